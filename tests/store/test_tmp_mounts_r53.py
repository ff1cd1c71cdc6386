"""A folder in the cache's ``tmp/`` with a mount in it (at its top, or deeper) is left whole by
the recovery every sampler start runs: the temp-tree removal checked ``os.path.ismount`` of the
top folder only, which a bind mount of the same filesystem passes, and ``shutil.rmtree`` then
emptied the mounted folder (a trainer's checkpoint deleted) and failed only at its mount point,
logging "left in place" (review R53b). Real bind mounts (root)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from epochfs.sidecar.store import Store

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")


@pytest.mark.parametrize("where", ["view", "view/epoch-0", "dir with space"])
def test_a_mount_inside_tmp_keeps_what_it_shows(tmp_path: Path, where: str) -> None:
    cache = tmp_path / "cache"
    Store(cache, create=True).close()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.ckpt").write_text("weights")
    point = cache / "tmp" / where
    point.mkdir(parents=True)
    (cache / "tmp" / "partial.part").write_bytes(b"x")
    subprocess.run(["mount", "--bind", str(outside), str(point)], check=True)
    try:
        with Store(cache) as store:
            store.recover()
        assert (outside / "model.ckpt").read_text() == "weights"
        assert (point / "model.ckpt").read_text() == "weights"
        assert not (cache / "tmp" / "partial.part").exists()  # the store's own temps still go
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)
