"""``epochfs cut`` (and ``--force``) on a cache whose volume is full: one line naming the full
volume, exit 75 (try again later), not a Python traceback and exit 1.

The cut fails writing the high-water mark (or the index) with ENOSPC; the command caught only
ValueError. docs/reliability.md, section 2: "``epochfs cut --force`` cuts nothing either, saying
the volume is full". Real parts: a real store on a real 16 MiB tmpfs, held open as a running
sampler holds it, filled by another tenant's file, and the real CLI in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from fuse_helpers import EPOCHFS, open_store
from inprocess import fill, small_volume
from store_helpers import put

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")


def _cut(cache: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EPOCHFS, "cut", "--cache", str(cache), *extra], capture_output=True,
                          text=True, timeout=60)


def test_cut_on_a_full_volume_says_so_in_one_line_and_exits_75(tmp_path: Path) -> None:
    with small_volume(tmp_path / "vol", "16m") as vol, open_store(vol / "cache") as store:
        for i in range(8):
            put(store, f"train/{i}.bin", 4096)
        assert store.cut() == 0
        for i in range(8, 12):
            put(store, f"train/{i}.bin", 4096)
        filler = fill(vol, leave=0)  # another tenant: the volume full to its last byte
        for extra in ((), ("--force",)):
            done = _cut(vol / "cache", *extra)
            assert done.returncode == 75, (extra, done.returncode, done.stderr)
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1, (extra, done.stderr)
            assert lines[0].startswith("epochfs: cannot cut now: the cache's volume is full ("), lines
            assert "Traceback" not in done.stderr and done.stdout == "", (extra, done)
        assert store.newest_epoch() == 0
        filler.unlink()
        done = _cut(vol / "cache")
        assert (done.returncode, done.stdout.strip()) == (0, "1"), done.stderr
