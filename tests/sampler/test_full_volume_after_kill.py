"""A sampler killed (-9) and started again on a volume that filled meanwhile waits for room (exit 75,
"volume is full ... waiting for room"), as a start after a clean stop does; it is no index failure.

The kill leaves the index's shared-memory file and write-ahead log, so the index opens on the full
volume, and the start's first write (the check-up's record) fails with SQLITE_FULL. That start
exited 1 with "the cache index failed: database or disk is full" (docs/reliability.md, section 2).
Real parts: the ``epochfs sample`` command, a file:// remote, a tmpfs of its own as the volume.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from common import wait_until
from inprocess import fill, small_volume
from sampler_helpers import EPOCHFS, start_sampler

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")


def test_a_restart_after_kill_on_a_full_volume_waits_for_room(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for i in range(20):
        (source / f"{i:03d}.bin").write_bytes(bytes([i]) * 8192)
    with small_volume(tmp_path / "vol", "24m") as vol:
        cache = vol / "cache"
        # Listing on the sampler's threads: a listing process sees its socket close when the
        # sampler is killed, before the kernel sends it the parent-death SIGKILL, and its clean
        # close, now the last connection, checkpoints and deletes the log (6 of 240 kills under
        # load), which is the clean-stop case, not this one.
        sp = start_sampler(cache, f"file://{source}", "--capacity", "4Mi", "--list-process", "0")
        try:
            wait_until(lambda: sp.stats()["samples"] == 20, timeout=30, what="every sample fetched")
        finally:
            assert sp.stop(signal.SIGKILL) == -signal.SIGKILL
        assert (cache / "index.sqlite-wal").exists(), "the kill left the write-ahead log"
        fill(vol, leave=0)
        env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
        again = subprocess.run([EPOCHFS, "sample", "--remote", f"file://{source}", "--cache",
                                str(cache), "--capacity", "4Mi"], capture_output=True, text=True,
                               env=env, timeout=60)
        out = again.stdout + again.stderr
        assert again.returncode == 75, f"exit {again.returncode}:\n{out[-3000:]}"
        assert "the cache's volume is full" in out and "waiting for room" in out, out[-3000:]
        assert "the cache index failed" not in out
