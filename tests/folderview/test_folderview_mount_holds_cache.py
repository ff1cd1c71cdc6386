"""A folder view's ``--mount`` that is the cache folder or holds it is refused with the FUSE view's
words ("holds the cache folder"), checked before anything is made: before the fix
``epochfs sidecar --view folder --cache X/cache --mount X`` was refused as "not empty, and not a
folder the folder view published" (empty until the sidecar made ``cache/`` in it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from epochfs.sidecar.config import ConfigError
from epochfs.sidecar.volumes import check_view_folder


@pytest.mark.parametrize("create", [True, False])
def test_a_mount_holding_the_cache_is_refused_as_such_and_nothing_is_made(
        tmp_path: Path, create: bool) -> None:
    view = tmp_path / "x"
    view.mkdir()
    held = rf"^--mount: {view} holds the cache folder {view}/cache \(--cache\)"
    with pytest.raises(ConfigError, match=held):
        check_view_folder(view, create=create, cache=view / "cache")
    assert os.listdir(view) == []
    with pytest.raises(ConfigError, match=r"is the cache folder \(--cache\)"):
        check_view_folder(view, create=create, cache=view)


@pytest.mark.parametrize("create", [True, False])
def test_a_mount_inside_the_cache_is_refused_and_nothing_is_made(tmp_path: Path, create: bool) -> None:
    """Published inside the cache (its tmp/, a new folder there), the view would sit among the
    store's own folders; refused in the FUSE view's words before anything is made."""
    cache = tmp_path / "cache"
    (cache / "tmp").mkdir(parents=True)
    for inside in (cache / "tmp", cache / "published"):
        said = rf"^--mount: {inside} is inside the cache folder {cache} \(--cache\)"
        with pytest.raises(ConfigError, match=said):
            check_view_folder(inside, create=create, cache=cache)
    assert sorted(os.listdir(cache)) == ["tmp"] and os.listdir(cache / "tmp") == []


def test_a_mount_beside_the_cache_passes(tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir()
    check_view_folder(tmp_path / "view", create=True, cache=tmp_path / "cache")
    assert (tmp_path / "view").is_dir()


def test_the_sidecar_refuses_it_before_it_makes_the_cache(tmp_path: Path) -> None:
    """Through ``epochfs sidecar --view folder``: exit 2 with the FUSE view's words, and no
    ``cache/`` left in the folder (the cache used to be made first, then the folder refused as
    "not empty")."""
    view = tmp_path / "x"
    view.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("epochfs")), "sidecar", "--view", "folder",
         "--cache", str(view / "cache"), "--mount", str(view), "--remote", tmp_path.as_uri(),
         "--health-port", "0"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"--mount: {view} holds the cache folder {view}/cache (--cache)" in done.stderr
    assert os.listdir(view) == []
