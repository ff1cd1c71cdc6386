"""A view's mount given as ``--cache`` is told where the cache is, and no cache is made in it.

Why: mixing up ``--cache`` and ``--mount`` is a first-hour mistake; ``epochfs cut --cache
/mnt/epochfs`` answered "start `epochfs sample` or `epochfs sidecar` with this --cache first",
and ``epochfs sample --cache`` of a folder view made one there (its index, objects and lock in the
folder the trainers read). The view's ``status.json`` names its cache's folder; the refusal now
gives it. Real sidecars, their real FUSE and folder views.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from common import wait_until
from sidecar_helpers import EPOCHFS, running_sidecar

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/fuse").exists(),
                                reason="needs root and /dev/fuse")


@pytest.mark.parametrize("view", ["fuse", "folder"])
def test_commands_given_the_view_as_cache_name_the_cache(tmp_path: Path, view: str) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "a.bin").write_bytes(b"x" * 100)
    with running_sidecar(tmp_path, remote=f"file://{remote}", endpoint="", extra=("--view", view)) as car:
        status = car.mount / ".epochfs" / "status.json"
        # The view names its cache once the sampler recorded its shard (the folder view rewrites
        # its status.json every second).
        wait_until(lambda: '"shard"' in status.read_text(), timeout=30, what="the view's shard")
        before = sorted(p.name for p in car.mount.iterdir())
        sample = ["sample", "--remote", f"file://{remote}", "--capacity", "1Mi"]
        for command in (["cut"], ["status"], sample):
            r = subprocess.run([*EPOCHFS, *command, "--cache", str(car.mount)], capture_output=True,
                               text=True, timeout=60)
            assert r.returncode == 2, (command, r.stdout, r.stderr)
            said = r.stderr.strip().splitlines()[-1]
            assert f"{car.mount} is an epochfs view of the cache in {car.cache}: give that as --cache" \
                in said, said
            assert "start `epochfs sample`" not in said, said
        assert sorted(p.name for p in car.mount.iterdir()) == before, "nothing made in the view"
