"""Two ``epochfs publish`` processes at once: on one folder, and of one cache into two folders (review 54).

Same folder: the second one's start-up recovery removed every temporary name in the folder, the
running one's tree built ahead included, which then died on a missing file (and a restarted
sidecar child and a manual publish kept killing each other). Now the folder has a lock, taken
before recovery: the second is refused at once (exit 2, one line naming the first one's pid), the
first one's tree stays, and a killed publisher's lock goes with it, so its leftovers are still
recovered by the next one.

Two folders: the second publisher, refused the cache's publisher lock at its start, never tried
again, so when the first stopped nobody held it while the second published on: the sampler
stalled for 60 s, then retired and evicted without a publisher. Now the running one takes it at
its next step.

Real processes on a real store (written by this test as the sampler would), no sleeps: every wait
is for an observable state (a file, a lock's holder, a process's exit).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, make_objects, open_store
from sidecar_helpers import EPOCHFS

from epochfs.sidecar import folderview_lock
from epochfs.sidecar.store import Store, flocks, publisherlock
from epochfs.torchclient import layout
from epochfs.torchclient.publish import TEMP_PREFIX


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A cache with one epoch cut and samples beyond it (so a tree is built ahead)."""
    s = open_store(tmp_path / "cache")
    admit(s, make_objects(40, 64, prefix="train/a/", seed=1))
    assert s.cut(s.next_epoch()) is not None
    admit(s, make_objects(10, 64, prefix="train/b/", seed=2))
    try:
        yield s
    finally:
        s.close()


class Publishers:
    """``epochfs publish`` processes, each stopped by its pid at the end (SIGKILL if it hangs)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, cache: Path, folder: Path, name: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp_path / f"{name}.log", "wb")  # noqa: SIM115 - the child writes it
        try:
            proc = subprocess.Popen([*EPOCHFS, "publish", "--cache", str(cache), "--mount", str(folder)],
                                    stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        return (self.tmp_path / f"{name}.log").read_text(errors="replace")

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@pytest.fixture
def publishers(tmp_path: Path) -> Iterator[Publishers]:
    p = Publishers(tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


def temp_names(folder: Path) -> list[str]:
    """The temporary names at the folder's top (a tree being built ahead)."""
    try:
        return sorted(n for n in os.listdir(folder) if n.startswith(TEMP_PREFIX))
    except FileNotFoundError:
        return []


def holds_cache_lock(cache: Path, pid: int) -> bool:
    """Whether the process ``pid`` holds the cache's publisher lock now (held, and its pid written)."""
    path = cache / publisherlock.LOCK_NAME
    return flocks.holder(path) is True and path.read_text().strip() == str(pid)


def publishing(folder: Path, cache: Path, pid: int) -> bool:
    """The publisher ``pid`` runs: it showed epoch 0, built the next tree ahead, holds the cache lock."""
    return layout.list_epochs(folder) == [0] and bool(temp_names(folder)) and holds_cache_lock(cache, pid)


def test_a_second_publisher_of_the_same_folder_is_refused_and_the_first_keeps_running(
        tmp_path: Path, store: Store, publishers: Publishers) -> None:
    folder = tmp_path / "view"
    first = publishers.start(store.root, folder, "first")
    wait_until(lambda: publishing(folder, store.root, first.pid), what="the first publisher to publish")
    ahead = temp_names(folder)  # no cut comes: the first one's tree stays under this name

    second = subprocess.run([*EPOCHFS, "publish", "--cache", str(store.root), "--mount", str(folder)],
                            capture_output=True, text=True, timeout=30)
    assert second.returncode == 2, second.stderr
    lines = second.stderr.strip().splitlines()
    assert f"pid {first.pid}" in lines[-1] and "one publisher per folder" in lines[-1], lines
    assert "recovered" not in second.stderr  # refused before its recovery touched anything
    assert first.poll() is None  # the first one lives on, its tree built ahead untouched
    assert temp_names(folder) == ahead
    assert layout.list_epochs(folder) == [0]

    # A killed publisher's lock goes with it: the next one takes it and recovers its leftovers.
    first.kill()
    first.wait()
    third = publishers.start(store.root, folder, "third")
    wait_until(lambda: not set(ahead) & set(temp_names(folder)) and "recovered" in publishers.log("third"),
               what="the next publisher to recover the killed one's tree")
    assert str(ahead) in publishers.log("third")
    wait_until(lambda: holds_cache_lock(store.root, third.pid),
               what="the next publisher to take the cache lock")
    assert flocks.holder(folder / layout.CONTROL_DIR / folderview_lock.FOLDER_LOCK_NAME) is True
    third.send_signal(signal.SIGTERM)
    assert third.wait(timeout=30) == 0
    assert layout.list_epochs(folder) == [0]  # left as published


def test_the_running_publisher_takes_the_cache_lock_when_the_other_one_stops(
        tmp_path: Path, store: Store, publishers: Publishers) -> None:
    first_folder, second_folder = tmp_path / "view-a", tmp_path / "view-b"
    first = publishers.start(store.root, first_folder, "first")
    wait_until(lambda: publishing(first_folder, store.root, first.pid), what="the first publisher to publish")
    second = publishers.start(store.root, second_folder, "second")
    wait_until(lambda: (layout.list_epochs(second_folder) == [0]
                        and "another publisher" in publishers.log("second")),
               what="the second publisher to publish without the cache lock")
    assert holds_cache_lock(store.root, first.pid)

    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 0
    # The lock is held a moment before the line that says so is written.
    wait_until(lambda: holds_cache_lock(store.root, second.pid) and "took" in publishers.log("second"),
               what="the running publisher to take the cache's publisher lock and say so")
    assert second.poll() is None
    assert publisherlock.may_release(store.root)  # the sampler retires and evicts: a publisher runs
    # and the lock keeps working: a cut is shown by the publisher that holds it now
    n = store.cut(store.next_epoch())
    assert n == 1
    wait_until(lambda: 1 in layout.list_epochs(second_folder), what="the second publisher to show epoch 1")
