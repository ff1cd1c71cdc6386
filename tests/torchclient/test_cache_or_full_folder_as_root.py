"""A root that can never become the view raises at once; the folders that still may keep waiting.

Why: given the sidecar's ``--cache`` folder (``index.sqlite``, ``objects/``), or a folder that
shows files but no ``.epochfs/`` and no ``epoch-N`` folder (the dataset's own folder, a typo'd
path), ``start_epoch`` and the loaders waited out their whole timeout (600 s by default), sending
cut requests meanwhile. Both views refuse a ``--mount`` that is not empty, so such a folder never
becomes the view: the client now says so at once and names the path to give. An empty folder (a
mount point before the sidecar mounts it), one with only dot names, and a mount point of another
file system (a volume's root, lost+found and all) may still show the view: they wait as before.
The cache is a real store's; the mount point a real tmpfs.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from epochfs.sidecar.store import Store
from epochfs.torchclient import EpochDataset, start_epoch, wait_for_epoch

BOUND = 5.0
"""A timeout that ends the test where the client waits instead of raising (the failure before the fix)."""

CACHE_SAID = "is the sidecar's --cache folder, not its mount: pass the --mount path (the view)"
NEVER_SAID = "is not the mount and never becomes it: it holds"


def _openers(root: Path) -> dict[str, Callable[[], object]]:
    """Every way a trainer meets the root first, each a call to make with it."""
    return {
        "start_epoch": lambda: start_epoch(root, timeout=BOUND, progress=None),
        "wait_for_epoch": lambda: wait_for_epoch(root, 0, timeout=BOUND, progress=None, sidecar_url=None),
        "EpochDataset": lambda: EpochDataset(root, 0, timeout=BOUND, progress=None),
    }


def test_the_cache_folder_as_root_raises_at_once(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with Store(cache, create=True):
        pass
    for call in _openers(cache).values():
        with pytest.raises(FileNotFoundError, match=re.escape(f"{cache} {CACHE_SAID}")):
            call()


def test_a_folder_of_files_as_root_raises_at_once(tmp_path: Path) -> None:
    dataset = tmp_path / "dataset"
    (dataset / "train").mkdir(parents=True)
    for i in range(5):
        (dataset / f"{i:04d}.npy").write_bytes(b"x")
    said = f"{dataset} {NEVER_SAID} 0000.npy, 0001.npy, 0002.npy and 3 more"
    for call in _openers(dataset).values():
        with pytest.raises(FileNotFoundError, match=re.escape(said)):
            call()


@pytest.mark.parametrize("content", ["empty", "dot names only"])
def test_a_folder_that_may_still_become_the_mount_waits(tmp_path: Path, content: str) -> None:
    point = tmp_path / "view"
    point.mkdir()
    if content == "dot names only":
        (point / ".nfs0001").write_bytes(b"")
    with pytest.raises(TimeoutError):
        wait_for_epoch(point, 0, timeout=1, progress=None, sidecar_url=None)
    with pytest.raises(TimeoutError):
        start_epoch(point, timeout=1, progress=None)


@pytest.fixture
def volume_root(tmp_path: Path) -> Iterator[Path]:
    """A real tmpfs mounted at a folder that then shows a file, like a volume's lost+found."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    point = tmp_path / "volume"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(point)], check=True)
    try:
        (point / "lost+found").mkdir()
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=True)


def test_a_mount_point_with_files_waits(volume_root: Path) -> None:
    assert os.path.ismount(volume_root)
    with pytest.raises(TimeoutError):
        wait_for_epoch(volume_root, 0, timeout=1, progress=None, sidecar_url=None)
