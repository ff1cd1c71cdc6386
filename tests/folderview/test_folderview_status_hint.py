"""``epochfs status`` says how epoch 0 is cut on the view it reads: on the folder view a plain
lookup cuts nothing (the torch client's request, ``--cut-interval`` or ``epochfs cut`` do), on the
FUSE view the first lookup of ``epoch-0`` does. Real processes: a folder-view sidecar and a FUSE
mount, each before its first cut with every sample of epoch 0 cached.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from common import random_objects, wait_until
from folderview_helpers import folder_sidecar, owned_dir, unprivileged, write_remote
from fuse_helpers import EPOCHFS, admit, make_objects, mounted, open_store

from epochfs.torchclient import layout

FOLDER_WORDS = "on the folder view it is cut when the torch client asks for it, at --cut-interval or by"
FUSE_WORDS = "it is cut at the first lookup of epoch-0"


def status_line(*args: str, env: dict[str, str] | None = None) -> str:
    """The last line of ``epochfs status ARGS``: the one about epoch 0 before the first cut."""
    out = subprocess.run(unprivileged([*EPOCHFS, "status", *args]), capture_output=True, text=True,
                         timeout=60, check=True, env={**os.environ, **(env or {})}).stdout
    last = out.strip().splitlines()[-1]
    assert last.startswith("  (no epoch cut yet: epoch 0: "), out
    return last


def all_cached(doc: dict[str, object] | None) -> bool:
    first = (doc or {}).get("first_epoch")
    return isinstance(first, dict) and not first.get("listing_round") and \
        int(first.get("samples", 0)) >= int(first.get("target", 1))


def test_the_folder_views_status_says_a_lookup_does_not_cut_epoch_0() -> None:
    with owned_dir() as base:
        remote = base / "remote"
        write_remote(remote, random_objects(12, 512, seed=5))
        with folder_sidecar(base, remote, extra=("--min-samples", "4")) as car:
            wait_until(lambda: all_cached(layout.read_status(car.mount)), timeout=60,
                       what="epoch 0's samples cached")
            line = status_line("--mount", str(car.mount))
            assert FOLDER_WORDS in line and "first lookup" not in line, line
            # In the sidecar's container EPOCHFS_VIEW names the view for --cache too.
            line = status_line("--cache", str(car.cache), env={"EPOCHFS_VIEW": "folder"})
            assert FOLDER_WORDS in line, line
            assert not layout.list_epochs(car.mount)  # nothing was cut meanwhile


@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and /dev/fuse")
def test_the_fuse_views_status_keeps_the_lookup_and_a_bare_cache_says_both(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", min_samples=3)
    admit(store, make_objects(4, 100))
    store.close()
    with mounted(tmp_path / "cache", tmp_path / "view") as m:
        line = status_line("--mount", str(m.path))
        assert FUSE_WORDS in line and "folder view" not in line, line
    # A cache alone does not say which view serves it: both ways are said.
    env = {k: v for k, v in os.environ.items() if k != "EPOCHFS_VIEW"}
    out = subprocess.run([*EPOCHFS, "status", "--cache", str(tmp_path / "cache")], capture_output=True,
                         text=True, timeout=60, check=True, env=env).stdout
    line = out.strip().splitlines()[-1]
    assert f"{FUSE_WORDS} on the FUSE view; on the folder view when the torch client asks" in line, out
