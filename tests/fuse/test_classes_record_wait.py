"""Requests for ``.epochfs/classes.json`` that wait for the index's write lock never hold up the
rest of the mount, nor its stop (docs/mount.md, "Lookups and read records never wait out the
sampler").

The first look at ``classes.json`` after a cut records the new epoch's folders, which takes the
index's write lock; while the sampler holds it, that request waits (up to 30 s). Before, each such
request waited on its own in one of libfuse's request threads (at most 10): ten readers at an
epoch boundary (every rank of a trainer opens the file) took every thread, so the whole mount
(listings, ``status.json``, the samples) answered nothing for up to 30 s, and a SIGTERM to the
server took as long, its loop waiting for those threads.

Here the test holds the write lock itself, as the sampler's long transaction does, and opens
``classes.json`` from many threads at once; each open is one request that needs the record. It
waits until every opener is in the kernel waiting for its answer (``/proc``'s wchan), then:

* another reader lists the mount, reads ``status.json`` and a sample: answered while the lock is
  still held; openers beyond the cap on waiting requests answer EIO at once, and once the lock is
  free every other opener reads the new epoch's classes (one record, its result shared);
* a SIGTERM ends the server while the openers still wait: it exits at once (status 0) and each
  opener gets an error instead of hanging.

The bound on each wait (:data:`BLOCKED`) is far above what the fixed server takes (milliseconds)
and below the 30 s a record waited before, after which the old server answered again.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sqlite3
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import Mount, admit, make_objects, mounted, open_store

from epochfs.fuse.classes import MAX_WAITING

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]

BLOCKED = 20.0
"""Seconds after which a request (or the server's exit) counts as held up by the waiting record:
below the record's own bound (30 s), far above the milliseconds it takes when it is not."""

IN_KERNEL = "request_wait_answer"
"""The kernel function a thread sleeps in while its FUSE request waits for the server's answer."""


class Openers:
    """Threads that each open and read ``classes.json`` once; what each got (bytes or errno)."""

    def __init__(self, path: Path, count: int) -> None:
        self.path = path
        self.results: dict[int, bytes | int] = {}
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._open, args=(i,), daemon=True) for i in range(count)]

    def _open(self, i: int) -> None:
        try:
            with open(self.path, "rb") as f:
                result: bytes | int = f.read()
        except OSError as e:
            result = e.errno or -1
        with self._lock:
            self.results[i] = result

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def sent(self) -> bool:
        """Every opener is done, or sleeps in the kernel until the server answers its request."""
        with self._lock:
            done = set(self.results)
        for i, t in enumerate(self.threads):
            if i in done:
                continue
            try:
                wchan = Path(f"/proc/self/task/{t.native_id}/wchan").read_text()
            except FileNotFoundError:  # ended between the two looks
                continue
            if wchan != IN_KERNEL:
                return False
        return True

    def snapshot(self) -> dict[int, bytes | int]:
        with self._lock:
            return dict(self.results)

    def join(self) -> None:
        for t in self.threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in self.threads), "an opener of classes.json never got an answer"


@contextmanager
def sampler_writing(cache: Path) -> Iterator[None]:
    """The index's write lock held, as the sampler's long write transaction holds it."""
    db = sqlite3.connect(cache / "index.sqlite", isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            db.execute("ROLLBACK")
    finally:
        db.close()


def answered_within(fn: Callable[[], object], bound: float) -> bool:
    """Whether ``fn()`` (run in a thread of its own) returned within ``bound`` seconds."""
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(timeout=bound)
    return not t.is_alive()


def new_epoch_to_record(tmp_path: Path) -> Iterator[tuple[Path, Path, Mount]]:
    """A mount whose ``classes.json`` was read (epoch 0's folders recorded), then a cut of an
    epoch with a new class folder (``bee``): the next look at ``classes.json`` must record it."""
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache)
    try:
        admit(store, make_objects(2, 64, prefix="train/ant/"))
        assert store.cut() == 0
        with mounted(cache, mnt) as m:
            classes = json.loads((mnt / ".epochfs" / "classes.json").read_bytes())["classes"]
            assert classes["train"] == {"ant": 0}
            (mnt / ".epochfs" / "status.json").read_bytes()  # its entry cached: only its open is asked
            admit(store, make_objects(2, 64, prefix="train/bee/", start=2))
            assert store.cut() == 1
            assert (mnt / "epoch-1").is_dir()
            yield cache, mnt, m
    finally:
        store.close()


@pytest.fixture
def mount_with_new_epoch(tmp_path: Path) -> Iterator[tuple[Path, Path, Mount]]:
    yield from new_epoch_to_record(tmp_path)


def test_classes_json_waiters_never_hold_up_the_mount(mount_with_new_epoch: tuple[Path, Path, Mount]) -> None:
    cache, mnt, m = mount_with_new_epoch
    over = 6
    openers = Openers(mnt / ".epochfs" / "classes.json", MAX_WAITING + over)
    other: dict[str, object] = {}
    # Opened before: a first *lookup* in .epochfs/ waits behind a waiting classes.json lookup in
    # the kernel's lock on that folder (libfuse 3.14 runs no lookups of one folder in parallel:
    # docs/mount.md says so); the server's own answers are what this test is about.
    status = os.open(mnt / ".epochfs" / "status.json", os.O_RDONLY)

    def other_reader() -> None:
        other["root"] = sorted(os.listdir(mnt))
        other["status"] = json.loads(os.pread(status, 1 << 20, 0))
        other["sample"] = (mnt / "epoch-0" / "train" / "ant" / "00000.bin").read_bytes()

    with sampler_writing(cache):
        openers.start()
        wait_until(openers.sent, timeout=60, what="every opener's request sent to the server")
        answered = answered_within(other_reader, BLOCKED)
        # The answers beyond the cap come at once, but each on its own thread: waited for (no
        # more can come while the lock is held, as the rest wait for the record).
        wait_until(lambda: len(openers.snapshot()) >= over, timeout=BLOCKED,
                   what="the answers to the openers beyond the cap")
        while_held = openers.snapshot()
    openers.join()
    os.close(status)
    assert answered, "the mount answered nothing else while requests for classes.json waited"
    assert other["root"] == [".epochfs", "epoch-0", "epoch-1", "latest"], other
    assert isinstance(other["status"], dict)
    assert other["sample"] == make_objects(2, 64, prefix="train/ant/")["train/ant/00000.bin"]
    # Beyond the cap: EIO at once, while the lock was still held; every other opener waited.
    assert sorted(while_held.values()) == [errno.EIO] * over, while_held
    results = openers.snapshot()
    good = [r for r in results.values() if isinstance(r, bytes)]
    assert len(good) == MAX_WAITING, results
    for body in good:
        assert json.loads(body)["classes"]["train"] == {"ant": 0, "bee": 1}
    # The refused ones in one line, once: no traceback each (64 waiters logged 64 before).
    log = m.log_text()
    assert "unexpected error" not in log, log[-3000:]
    assert log.count("such lines at most once a minute") == 1, log[-3000:]


def test_a_stop_does_not_wait_for_a_classes_json_record(
        mount_with_new_epoch: tuple[Path, Path, Mount]) -> None:
    cache, mnt, m = mount_with_new_epoch
    proc = m.proc
    openers = Openers(mnt / ".epochfs" / "classes.json", 4)
    with sampler_writing(cache):
        openers.start()
        wait_until(openers.sent, timeout=60, what="every opener's request sent to the server")
        # A listing answered after them: the server has taken the openers' requests (in order).
        assert answered_within(lambda: os.listdir(mnt), BLOCKED)
        assert openers.snapshot() == {}, "a request for classes.json was answered while the lock was held"
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=BLOCKED)
            exited = True
        except subprocess.TimeoutExpired:
            exited = False
    openers.join()
    assert exited, "the server's stop waited for the classes.json record's wait"
    assert proc.returncode == 0
    results = openers.snapshot()
    assert len(results) == 4 and all(isinstance(r, int) for r in results.values()), results
