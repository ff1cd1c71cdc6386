"""The FUSE loop gives back the request threads a burst made it start, through a real mount.

libfuse starts a request thread whenever every thread it has is busy, up to the loop's maximum
(74 in the low-level loop, :data:`~epochfs.fuse.lowlevel.LOOP_THREADS`). Since libfuse 3.12 it
keeps them all for the life of the mount unless the loop is told how many idle ones to keep, and
each keeps glibc's per-thread cache of freed memory, which ``malloc_trim`` cannot give back: a
reader's burst would leave the server ~20-30 MB larger for good. Here 64 threads list and stat the mount at
once; once they are done, the server must be back to at most
:data:`~epochfs.fuse.lowlevel.IDLE_THREADS` request threads, while the burst itself had more.

A request thread is told apart by where the kernel shows it waiting: idle request threads wait in
a read of ``/dev/fuse`` (``fuse_dev_do_read``); the server's own threads (the main one, the
signal, refresh and warm-up threads) wait elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, make_objects, mounted, open_store

from epochfs.fuse.lowlevel import IDLE_THREADS

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]

EPOCHS = 3
READERS = 64
PROCESSES = 8
BURST_SECONDS = 3.0
SETTLE_SECONDS = 30.0
"""How long the server may take to end its surplus threads (it does so as each answers its last
request: well under a second here)."""
HIGHLEVEL_THREADS = 10
"""libfuse's high-level loop (``fuse_main``) runs at most this many request threads."""


def _request_threads(pid: int) -> int:
    """The server's threads waiting in a read of /dev/fuse: its idle request threads."""
    count = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                count += f.read().strip() == "fuse_dev_do_read"
        except OSError:  # the thread ended meanwhile
            pass
    return count


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


_READER = r"""
import os, sys, threading, time
mnt, epochs, threads, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
stop = time.monotonic() + seconds
def read():
    while time.monotonic() < stop:
        for n in range(epochs):
            os.listdir(f"{mnt}/epoch-{n}/train")
            os.stat(f"{mnt}/.epochfs/status.json")
        os.listdir(mnt)
ts = [threading.Thread(target=read) for _ in range(threads)]
for t in ts: t.start()
for t in ts: t.join()
"""
"""One reader process: threads listing the epochs' folders and stating ``status.json`` (each a
request the kernel cannot answer from its caches). Processes, not threads of the test: one
interpreter's lock would let only a few requests be in flight at once."""


def _burst(mnt: Path, pid: int) -> int:
    """Readers in several processes for a few seconds; how many threads the server had in all
    meanwhile (each thread id seen: a thread that ended is counted too)."""
    per = READERS // PROCESSES
    procs = [subprocess.Popen([sys.executable, "-c", _READER, str(mnt), str(EPOCHS), str(per),
                               str(BURST_SECONDS)]) for _ in range(PROCESSES)]
    seen: set[str] = set()
    try:
        while any(p.poll() is None for p in procs):
            seen.update(os.listdir(f"/proc/{pid}/task"))
            with contextlib.suppress(subprocess.TimeoutExpired):
                procs[0].wait(timeout=0.01)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    assert [p.returncode for p in procs] == [0] * PROCESSES, "a reader failed"
    return len(seen)


def _settles(pid: int, ok: Callable[[int], bool], poke: Path) -> int:
    """Poll the server's idle request threads until ``ok`` (a stat between polls: a request)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    idle = _request_threads(pid)
    while not ok(idle) and time.monotonic() < deadline:
        os.stat(poke)
        time.sleep(0.1)  # a poll's pace, not a synchronisation: the condition is re-read
        idle = _request_threads(pid)
    return idle


@pytest.mark.long
@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_a_burst_leaves_no_more_idle_request_threads_than_kept(tmp_path: Path, api: str) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache, keep_epochs=EPOCHS)
    admit(store, make_objects(2000, 16))
    for n in range(EPOCHS):
        assert store.cut(n, force=True) == n
    store.close()
    with mounted(cache, tmp_path / "mnt", args=("--fuse-api", api)) as m:
        pid = m.proc.pid
        # The mount is ready before its first request thread is back in its read of /dev/fuse
        # (under load the suite once looked in between).
        wait_until(lambda: _request_threads(pid) >= 1, timeout=30,
                   what="a thread of the server waiting in fuse_dev_do_read")
        own = _threads(pid) - _request_threads(pid)
        started = _burst(m.path, pid)
        status = m.path / ".epochfs" / "status.json"
        idle = _settles(pid, lambda idle: idle <= IDLE_THREADS, status)
        threads = _threads(pid)
        print(f"{api}: {started} threads during the burst, then {idle} idle request threads "
              f"({threads} in all)")
        assert idle <= IDLE_THREADS, (
            f"{idle} idle request threads kept after the burst ({started} threads during it), "
            f"more than the {IDLE_THREADS} the loop should keep")
        if api == "lowlevel":  # it may start up to LOOP_THREADS: the burst must have made it start more
            assert started > own + IDLE_THREADS, f"the burst ran only {started} threads: nothing to give back"
        else:  # no more than its request threads at once: the idle ones are at most those
            assert threads <= own + HIGHLEVEL_THREADS + 2, f"the high-level loop kept {threads} threads"
