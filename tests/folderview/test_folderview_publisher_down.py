"""A dead publisher leaves no published epoch pointing at deleted objects (folder view).

Only the publisher takes a retired epoch's folder down. While it is dead (``kill -9``, then the
supervisor's backoff, which doubles while it keeps crashing) the sampler would retire the epochs
the folder shows and evict their objects: every file of ``epoch-N/`` and ``latest`` a dangling
link. So while no publisher holds the cache's publisher lock, nothing retires and nothing is
evicted (:mod:`epochfs.sidecar.store.publisherlock`), for at most ``GONE_AFTER`` seconds.

The real sidecar here: the publisher is killed, and kept crashing for a while (its folder made
read-only, so each restart fails in its recovery, as a publisher does that keeps crashing), while
the sampler keeps sampling into a full cache with a short in-use window, so epochs would retire
and their objects go within seconds. Every file of every epoch the folder shows must stay readable
with its bytes until the publisher is back and has taken down what the store retired.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from pathlib import Path

import pytest
from common import random_objects, wait_until
from folderview_helpers import folder_sidecar, kill_child, owned_dir, write_remote
from sidecar_helpers import Sidecar

from epochfs.sidecar.store import publisherlock
from epochfs.torchclient import layout

NOT_RUNNING = "the folder view's publisher is not running"
"""What the sampler logs when it starts waiting for a publisher."""

pytestmark = pytest.mark.skipif(os.geteuid() == 0 and not os.path.exists("/usr/bin/setpriv"),
                                reason="needs setpriv to drop root")


def query(cache: Path, sql: str) -> list[tuple[int, ...]]:
    db = sqlite3.connect(f"file:{cache / 'index.sqlite'}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def retired(cache: Path) -> set[int]:
    return {int(n) for (n,) in query(cache, "SELECT n FROM epochs WHERE retired != 0")}


def evicted(cache: Path) -> int:
    rows = query(cache, "SELECT value FROM counters WHERE name='evicted_total'")
    return int(rows[0][0]) if rows else 0


def unreadable(folder: Path, n: int, objects: dict[str, bytes]) -> list[str]:
    """The files of ``epoch-n`` (as its manifest lists them) that cannot be read with their bytes;
    none once the epoch is gone (a publisher took it down meanwhile)."""
    manifest = layout.read_manifest(folder, n)
    bad: list[str] = []
    for rel in manifest.paths if manifest is not None else []:
        try:
            data = (folder / f"epoch-{n}" / rel).read_bytes()
        except OSError as e:
            if not (folder / f"epoch-{n}").is_dir():
                return []  # taken down while we read: a reader then finds no epoch, not a broken one
            bad.append(f"epoch-{n}/{rel}: {e.strerror}")
            continue
        if data != objects[rel]:
            bad.append(f"epoch-{n}/{rel}: other bytes")
    return bad


def publisher(car: Sidecar) -> dict[str, int]:
    return car.health()["children"]["publisher"]


@pytest.mark.long
def test_published_epochs_keep_their_objects_while_the_publisher_is_down(tmp_path: Path) -> None:
    objects = random_objects(40, 8192, seed=5)
    write_remote(tmp_path, objects)
    # About 4 samples a second into a cache of 20, a cut every 0.5 s, one epoch kept and 1 s in
    # use: with the publisher alive epochs retire and objects go all the time.
    extra = ("--cut-interval", "0.5", "--max-rate", "32Ki", "--in-use-seconds", "1", "--keep-epochs", "1",
             "--capacity", "160Ki")
    with owned_dir() as base, folder_sidecar(base, tmp_path, extra=extra) as car:
        folder = car.mount
        wait_until(lambda: len(retired(car.cache)) >= 2 and evicted(car.cache) > 0
                   and set(layout.list_epochs(folder)) - retired(car.cache), timeout=60,
                   what="epochs retiring and objects evicted")
        errors: list[str] = []
        stop, restored = threading.Event(), threading.Event()
        exempt: set[int] = set()

        def reader() -> None:
            # Every file of every epoch shown, again and again, as a trainer would read them. Once
            # the folder is writable again a publisher may be back, and with it running an epoch
            # the store retires is shown until its next step while its objects may go (as
            # before): from then on only an epoch the store still holds must read whole.
            while not stop.is_set():
                for n in layout.list_epochs(folder):
                    back = restored.is_set()
                    bad = [] if n in exempt else unreadable(folder, n, objects)
                    if bad and (not back or n not in retired(car.cache)):
                        errors.extend(bad)

        waits = car.log_text().count(NOT_RUNNING)
        old = kill_child(car, "publisher")
        os.chmod(folder, 0o555)  # each restart fails in its recovery: a publisher that keeps crashing
        # An epoch the store retired while the publisher ran, which it had not taken down yet when
        # killed, may have lost objects before the kill (the folder follows the store within a
        # step): not what this test is about, so it is not read. Nor one retired by a call of the
        # sampler under way at the kill: once the sampler says it waits, no such call is left (its
        # loop's thread makes them all). Nothing retires after that.
        shown = layout.list_epochs(folder)
        exempt |= set(shown) & retired(car.cache)
        wait_until(lambda: car.log_text().count(NOT_RUNNING) > waits or publisher(car)["restarts"] >= 2,
                   timeout=60, what="the sampler waiting for the publisher")
        if car.log_text().count(NOT_RUNNING) > waits:  # else none waits, and the epochs retire
            exempt |= set(shown) & retired(car.cache)
        assert set(shown) - exempt, (shown, exempt)  # the epochs read: live, shown, their files there
        t = threading.Thread(target=reader)
        t.start()
        try:
            # One more crash: a backoff (2 s) after the wait began, while an epoch the folder shows
            # would retire within a second (1 s in use, a cut every 0.5 s) and its objects go.
            wait_until(lambda: errors or publisher(car)["restarts"] >= 3, timeout=120,
                       what="the publisher crashing again")
            assert not errors, errors[:5]
            # The sampler waited: no epoch the folder shows retired meanwhile.
            assert set(shown) & retired(car.cache) == exempt
            restored.set()
            os.chmod(folder, 0o755)
            wait_until(lambda: publisher(car)["alive"] and publisher(car)["pid"] != old
                       and not set(layout.list_epochs(folder)) & retired(car.cache),
                       timeout=60, what="the publisher back, the retired epochs' folders taken down")
        finally:
            os.chmod(folder, 0o755)
            stop.set()
            t.join()
        assert not errors, errors[:5]
        # Retirement and eviction go on with the publisher back: the epochs shown at the kill go.
        done = evicted(car.cache)
        wait_until(lambda: not set(shown) & set(layout.list_epochs(folder)) and evicted(car.cache) > done,
                   timeout=60, what="epochs retiring and objects evicted again")
        log = car.log_text()
        assert NOT_RUNNING in log, log[-3000:]
        assert "the folder view's publisher runs again" in log, log[-3000:]


def test_without_a_publisher_the_wait_is_bounded(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A cache without the lock file (the FUSE view) is not held back; one with it waits while no
    publisher holds it, at most GONE_AFTER seconds, then goes on with an error in the log; a
    publisher holding it (here this test's own descriptor, a lock of its own) lets it go on."""
    caplog.set_level(logging.INFO, logger="epochfs.store")
    assert publisherlock.state(tmp_path) is None
    assert publisherlock.may_release(tmp_path, now=0.0)
    fd = publisherlock.hold(tmp_path)
    assert fd is not None
    assert publisherlock.state(tmp_path) is True
    assert publisherlock.hold(tmp_path) is None  # a second publisher of the same cache
    assert publisherlock.may_release(tmp_path, now=0.0)
    assert not publisherlock.forget(tmp_path)  # held: kept
    os.close(fd)  # the publisher dies
    assert publisherlock.state(tmp_path) is False
    start = 1000.0
    assert not publisherlock.may_release(tmp_path, now=start)
    assert not publisherlock.may_release(tmp_path, now=start + publisherlock.GONE_AFTER - 1)
    assert "is not running" in caplog.text and "has not run for" not in caplog.text
    assert publisherlock.may_release(tmp_path, now=start + publisherlock.GONE_AFTER)
    assert "has not run for 60s" in caplog.text
    fd = publisherlock.hold(tmp_path)  # back
    assert fd is not None
    try:
        assert publisherlock.may_release(tmp_path, now=start + 2 * publisherlock.GONE_AFTER)
        assert "runs again" in caplog.text
    finally:
        os.close(fd)
    assert not publisherlock.may_release(tmp_path, now=0.0)  # down again: waits again
    assert publisherlock.forget(tmp_path)  # the FUSE view's supervisor removes it
    assert publisherlock.state(tmp_path) is None and publisherlock.may_release(tmp_path)
