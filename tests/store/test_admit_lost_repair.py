"""A repair download that lands after its sample was marked lost is dropped; the batch goes on.

A sample waiting for its repair in place is fetched again; if a relist drops its key while that
download is in flight, :func:`~epochfs.sidecar.store.integrity.lose_unfetchable` marks it lost.
The download then reaches admission with the same key and sid as the lost row. That is no clash:
its temp is removed and the rest of the batch admitted, and the admitter (which treats any other
admission error as fatal, stopping the sampler) carries on. A real clash still raises.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import time
from pathlib import Path

import pytest
from store_helpers import put, sid_of

from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.sampler.admitter import Admitter
from epochfs.sidecar.store import Admission, Policy, Store, integrity


def _download(store: Store, key: str, size: int, *, sid: str | None = None) -> Admission:
    body = key.encode()[:1] * size
    temp = store.temp_path()
    Path(temp).write_bytes(body)
    return Admission(key, sid or sid_of(key), size, "md5:" + hashlib.md5(body).hexdigest(), "v1", temp)


def _lose_while_in_flight(store: Store, root: Path, key: str) -> None:
    """The scrub took ``key`` out for a repair, then a relist dropped it: marked lost."""
    db = sqlite3.connect(root / "index.sqlite")
    try:
        (sample,) = db.execute("SELECT id FROM samples WHERE key=?", (key,)).fetchone()
        db.execute("INSERT INTO repairs(sample, lost, since) VALUES(?, 0, ?)", (sample, time.time()))
        db.execute("DELETE FROM catalog WHERE key=?", (key,))
        db.commit()
    finally:
        db.close()
    assert integrity.lose_unfetchable(store._ix, store.files) == [key]


def test_a_repair_landing_after_its_sample_was_lost_is_dropped_and_the_batch_admitted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "cache"
    with Store(root, create=True) as store:
        store.configure(Policy(capacity=10_000, keep_epochs=2, headroom=0.0))
        put(store, "k", 100)
        _lose_while_in_flight(store, root, "k")
        reservations = Reservations(store)
        assert reservations.reserve(100 + 200)
        late, fresh = _download(store, "k", 100), _download(store, "new", 200)
        admitted: list[list[Admission]] = []
        admitter = Admitter(
            reservations=reservations, on_batch=admitted.append, on_failure=lambda batch, error: False
        )
        admitter.start()
        with caplog.at_level(logging.INFO, logger="epochfs.store"):
            admitter.hand_over(late)
            admitter.hand_over(fresh)
            admitter.finish()
        assert admitter.fatal is None
        assert not Path(late.temp).exists() and not Path(fresh.temp).exists()
        assert list(store.tmp_dir.iterdir()) == []
        assert "after they were marked lost" in caplog.text
        db = sqlite3.connect(root / "index.sqlite")
        try:
            assert db.execute(
                "SELECT r.lost FROM repairs r JOIN samples s ON s.id = r.sample WHERE s.key='k'"
            ).fetchall() == [(1,)]
            assert db.execute("SELECT key FROM samples ORDER BY key").fetchall() == [("k",), ("new",)]
        finally:
            db.close()
        assert not store.files.path_of(sid_of("k")).exists()  # still lost: its file stays gone
        assert store.files.path_of(sid_of("new")).exists()


def test_a_real_clash_with_a_lost_sample_still_raises(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    with Store(root, create=True) as store:
        store.configure(Policy(capacity=10_000, keep_epochs=2, headroom=0.0))
        put(store, "k", 100)
        _lose_while_in_flight(store, root, "k")
        with pytest.raises(ValueError, match="already in the cache: k"):
            store.admit([_download(store, "k", 100, sid=sid_of("other"))])
        with pytest.raises(ValueError, match="already in the cache: k"):
            store.admit([_download(store, "other", 100, sid=sid_of("k"))])
