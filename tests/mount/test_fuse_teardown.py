"""Stopping the FUSE server while the kernel is being told about changes (issue 11, item 7).

The refresher thread tells the kernel what changed (``latest``, ``status.json``, retired epochs)
through libfuse's notification calls. libfuse ends its loop on SIGTERM, then closes the device
(``fuse_unmount``) and frees the session (``fuse_destroy``); a notification sent after the first is
``fuse: writing device: Bad file descriptor``, one after the second a use-after-free (the server
died of SIGSEGV, exit -11). The server must stop notifying before the loop ends, every time.

Each round mounts a cache, starts a storm of admissions, cuts and retirements (each changes
``latest`` and ``status.json`` and retires an epoch the kernel has cached), cuts on lookup through
the mount (each wakes the refresher at once) and a writer holding the index's write lock in bursts
(the refresher's tick then runs late, into the teardown), and stops the server with SIGTERM in the
middle of it. No round may end in a crash, a non-zero exit or a "writing device" line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, make_objects, mounted, open_store, stop

from epochfs.fuse.mounting import find_mount
from epochfs.sidecar.store import Store

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]

ROUNDS = 12  # in the suite; the slow variant runs SLOW_ROUNDS
SLOW_ROUNDS = 200


class Storm:
    """Changes the store and pokes the mount from three threads until stopped."""

    def __init__(self, cache: Path, mnt: Path) -> None:
        self.cache = cache
        self.mnt = mnt
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.cuts = 0
        self.progress = threading.Event()
        self.threads = [threading.Thread(target=self._guard, args=(f,), daemon=True)
                        for f in (self._changes, self._lookups, self._lock_bursts)]

    def _guard(self, fn) -> None:
        try:
            fn()
        except BaseException as e:  # reported by the test, not lost in a thread
            self.errors.append(e)

    def _changes(self) -> None:
        """Admit, cut, retire: every round changes latest and status.json and retires an epoch."""
        with Store(self.cache) as store:
            i = 1000
            while not self.stop.is_set():
                admit(store, make_objects(1, 64, start=i, seed=5))
                i += 1
                store.cut()
                store.retire(now=time.time() + 3600)
                self.cuts += 1
                self.progress.set()

    def _lookups(self) -> None:
        """Cut on lookup (wakes the refresher at once) and fill the kernel's caches to invalidate."""
        status = self.mnt / ".epochfs" / "status.json"
        while not self.stop.is_set():
            with contextlib.suppress(OSError):  # the mount goes away under us: expected
                names = os.listdir(self.mnt)
                newest = max((int(n[6:]) for n in names if n.startswith("epoch-")), default=-1)
                os.path.exists(self.mnt / f"epoch-{newest + 1}")
                os.readlink(self.mnt / "latest")
                status.read_bytes()
                for n in names:
                    if n.startswith("epoch-"):
                        os.listdir(self.mnt / n)

    def _lock_bursts(self) -> None:
        """Hold the index's write lock now and then, as a big cut would: the refresher's tick waits
        for it and then notifies late, which is when a teardown race shows."""
        db = sqlite3.connect(self.cache / "index.sqlite", timeout=30, isolation_level=None)
        try:
            while not self.stop.is_set():
                cuts = self.cuts
                db.execute("BEGIN IMMEDIATE")
                deadline = time.monotonic() + 0.05
                while time.monotonic() < deadline and not self.stop.is_set():
                    db.execute("SELECT count(*) FROM samples").fetchone()
                db.execute("COMMIT")
                # Let the other writers in: the next burst waits for the next cut.
                while self.cuts == cuts and not self.stop.is_set():
                    self.progress.wait(0.5)
                    self.progress.clear()
        finally:
            db.close()

    def __enter__(self) -> Storm:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


@contextlib.contextmanager
def storm_mount(tmp_path: Path, n: int) -> Iterator[tuple[Path, Path]]:
    cache, mnt = tmp_path / f"cache{n}", tmp_path / f"mnt{n}"
    store = open_store(cache, keep_epochs=1, in_use_seconds=1)
    admit(store, make_objects(4, 64, seed=n))
    store.cut(0)
    store.close()
    yield cache, mnt


def stop_under_storm(tmp_path: Path, n: int) -> tuple[int | None, str, int]:
    with storm_mount(tmp_path, n) as (cache, mnt), mounted(cache, mnt) as m:
        with Storm(cache, mnt) as storm:
            # The storm is on once the kernel has seen latest change a few times.
            seen: set[str] = set()

            def moving() -> bool:
                with contextlib.suppress(OSError):
                    seen.add(os.readlink(mnt / "latest"))
                return len(seen) >= 3

            wait_until(moving, timeout=30, what="latest to move under the storm")
            code = stop(m, sig=signal.SIGTERM)
        assert not storm.errors, storm.errors
        assert find_mount(mnt) is None
        return code, m.log_text(), storm.cuts


def run_rounds(tmp_path: Path, rounds: int) -> None:
    failures = []
    cuts = 0
    for n in range(rounds):
        code, log, made = stop_under_storm(tmp_path, n)
        cuts += made
        bad = [line for line in log.splitlines()
               if "writing device" in line or "Segmentation" in line or "Fatal Python" in line]
        if code != 0 or bad:
            failures.append(f"round {n}: exit {code}; {bad[:3]}")
    assert not failures, f"{len(failures)} of {rounds} stops failed:\n" + "\n".join(failures)
    assert cuts >= rounds  # the storm really changed things in every round


@pytest.mark.long
def test_sigterm_under_a_storm_of_changes_never_crashes(tmp_path: Path) -> None:
    run_rounds(tmp_path, ROUNDS)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # about 1.5 s a round on a busy 2-core machine
def test_sigterm_under_a_storm_of_changes_never_crashes_many_times(tmp_path: Path) -> None:
    run_rounds(tmp_path, SLOW_ROUNDS)
