"""A read recorded ahead of the clock (a client's report, a cut request, both dated 40 s ahead so
a reader keeps its epoch between heartbeats) is not cut short by a later record dated now: the
folder view's grace record, written when it shows the epoch, used to replace it, and from then on
only the client's next post held the epoch. A record further ahead than any caller dates (the
clock stepped back) is replaced. Real store; times passed as ``now``."""

from __future__ import annotations

import time
from pathlib import Path

from fuse_helpers import admit, make_objects, open_store

from epochfs.sidecar.store import Store
from epochfs.sidecar.store.epochpins import READ_AHEAD_LIMIT


def last_read(store: Store, n: int) -> float:
    (value,) = store._ix.query("SELECT last_read FROM epochs WHERE n=?", (n,))[0]
    return float(value)


def cut_one(tmp_path: Path) -> Store:
    store = open_store(tmp_path / "cache")
    admit(store, make_objects(2, 64))
    assert store.cut(0) == 0
    return store


def test_a_read_dated_ahead_stands_against_a_later_record_dated_now(tmp_path: Path) -> None:
    store = cut_one(tmp_path)
    try:
        now = time.time()
        assert store.record_read(0, now=now + 40)
        assert store.record_read(0, now=now)
        assert last_read(store, 0) == now + 40
        assert store.record_read(0, now=now + 50)  # a later one still moves it on
        assert last_read(store, 0) == now + 50
    finally:
        store.close()


def test_a_record_further_ahead_than_any_caller_dates_is_replaced(tmp_path: Path) -> None:
    store = cut_one(tmp_path)
    try:
        now = time.time()
        assert store.record_read(0, now=now + READ_AHEAD_LIMIT + 3600)  # the clock stepped back
        assert store.record_read(0, now=now)
        assert last_read(store, 0) == now
    finally:
        store.close()
