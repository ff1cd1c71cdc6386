"""The admitter's batches wait a moment for more downloads after their first
(``sampler/admitter.py``, ``ADMIT_LINGER``): downloads that finish one after another go into one
batch (one pair of index commits and one fsync per fan-out folder) instead of a batch each, and a
stop is not held up by the wait. Real store, real files, the sampler's own admitter."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from common import wait_until
from store_helpers import sid_of

from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.sampler.admitter import ADMIT_LINGER, Admitter
from epochfs.sidecar.store import Admission, Policy, Store


def _download(store: Store, key: str, size: int = 64) -> Admission:
    body = key.encode() * size
    temp = store.temp_path()
    with open(temp, "wb") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    return Admission(key, sid_of(key), len(body), "md5:" + hashlib.md5(body).hexdigest(), "v1", temp)


def _keys(root: Path) -> list[str]:
    db = sqlite3.connect(root / "index.sqlite")
    try:
        return [str(r[0]) for r in db.execute("SELECT key FROM samples ORDER BY key")]
    finally:
        db.close()


@contextlib.contextmanager
def _admitting(
    tmp_path: Path, *, linger: float, pending: int
) -> Iterator[tuple[Store, Admitter, list[list[str]]]]:
    """A real store and the sampler's admitter over it (``pending`` downloads in flight), the keys
    of each batch it admits recorded in order."""
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=1 << 20, keep_epochs=2, headroom=0.0))
        batches: list[list[str]] = []
        admitter = Admitter(
            reservations=Reservations(store),
            on_batch=lambda b: batches.append([a.key for a in b]),
            linger=linger,
            pending=lambda: pending,
        )
        yield store, admitter, batches


def test_downloads_handed_over_after_the_first_join_its_batch(tmp_path: Path) -> None:
    with _admitting(tmp_path, linger=30.0, pending=1) as (store, admitter, batches):
        downloads = [_download(store, f"k{i:02d}") for i in range(12)]
        assert admitter.reservations.reserve(sum(a.size for a in downloads))
        admitter.start()
        admitter.hand_over(downloads[0])
        # The admitter has taken the first: the others come after it, one by one.
        wait_until(lambda: admitter._q.empty(), timeout=10, what="the first download taken")
        for a in downloads[1:]:
            admitter.hand_over(a)
        started = time.monotonic()
        admitter.finish(timeout=20)
        assert time.monotonic() - started < 20, "the stop waited for the linger"
        assert admitter.fatal is None
    assert batches == [[a.key for a in downloads]]
    assert _keys(tmp_path / "cache") == [a.key for a in downloads]


def test_a_stop_during_the_wait_admits_what_came_at_once(tmp_path: Path) -> None:
    with _admitting(tmp_path, linger=60.0, pending=1) as (store, admitter, _):
        download = _download(store, "only")
        assert admitter.reservations.reserve(download.size)
        admitter.start()
        admitter.hand_over(download)
        wait_until(lambda: admitter._q.empty(), timeout=10, what="the download taken")
        admitter.finish(timeout=30)
        assert not admitter._thread.is_alive(), "the stop waited for the linger"
    assert _keys(tmp_path / "cache") == ["only"]


def test_the_default_wait_is_short() -> None:
    """A sample is visible at most this much later than its download's end: well under the
    fastest cut interval a user can ask for."""
    assert 0 < ADMIT_LINGER <= 0.1


def test_with_nothing_in_flight_a_batch_does_not_wait(tmp_path: Path) -> None:
    """The last download of a set (none left in flight) is admitted at once, not a linger later."""
    with _admitting(tmp_path, linger=60.0, pending=0) as (store, admitter, batches):
        download = _download(store, "last")
        assert admitter.reservations.reserve(download.size)
        admitter.start()
        try:
            admitter.hand_over(download)
            wait_until(lambda: batches == [["last"]], timeout=20, what="the last download admitted")
        finally:
            admitter.finish(timeout=30)
    assert _keys(tmp_path / "cache") == ["last"]
