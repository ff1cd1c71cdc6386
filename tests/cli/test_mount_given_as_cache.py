"""A view's mount given as ``--cache`` is told where the cache is.

Why: mixing up ``--cache`` and ``--mount`` is a first-hour mistake; ``epochfs cut --cache
/mnt/epochfs`` answered "start `epochfs sample` or `epochfs sidecar` with this --cache first",
which would make a cache inside the view's folder. The view's ``status.json`` names its cache's
folder; the refusal now gives it. A real sidecar, its real FUSE view.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from sidecar_helpers import EPOCHFS, running_sidecar

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/fuse").exists(),
                                reason="needs root and /dev/fuse")


def test_cut_and_status_given_the_mount_as_cache_name_the_cache(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "a.bin").write_bytes(b"x" * 100)
    with running_sidecar(tmp_path, remote=f"file://{remote}", endpoint="") as car:
        for command in (["cut"], ["status"]):
            r = subprocess.run([*EPOCHFS, *command, "--cache", str(car.mount)], capture_output=True,
                               text=True, timeout=60)
            assert r.returncode == 2, (command, r.stdout, r.stderr)
            said = r.stderr.strip().splitlines()[-1]
            assert f"{car.mount} is an epochfs view of the cache in {car.cache}: give that as --cache" \
                in said, said
            assert "start `epochfs sample`" not in said, said
