"""A command that meets the index's write lock held past SQLite's wait (a stuck cut or verify, an
operator's sqlite3 shell left in a transaction) says so in one line and exits 75 (try again); it
printed a traceback ending in ``sqlite3.OperationalError: database is locked``. A real store, a
real second process holding the lock, the real console script. Long: SQLite waits 30 s first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fuse_helpers import cut_epochs, open_store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))


@pytest.mark.long
def test_a_cut_that_meets_a_held_write_lock_says_the_index_is_busy(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with open_store(cache) as store:
        cut_epochs(store, 1)
    code = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('BEGIN IMMEDIATE'); print('held', flush=True); sys.stdin.read()")
    hold = subprocess.Popen([sys.executable, "-c", code, str(cache / "index.sqlite")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert hold.stdout is not None and hold.stdout.readline().strip() == "held"
        env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
        done = subprocess.run([EPOCHFS, "cut", "--cache", str(cache), "--force"], capture_output=True,
                              text=True, env=env, timeout=120)
    finally:
        assert hold.stdin is not None
        hold.stdin.close()
        hold.wait(30)
    assert done.returncode == 75, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "epochfs cut: --cache: the index is busy (database is locked" in done.stderr
