"""A schedule-mode cut reads its window without sorting it, and counts its members from that read
(issue 25: the cut took 1.3-2 s at 100k keys, most of it a descending sort of the window's catalog
rows and a second read of its samples along the rank index).

What the cut records must not change: positions, ends, the cut condition and the epoch's count and
bytes are compared here with the ordered pass from the window's back (``windows._SCAN``, the
reading before) and with the members' count read along the rank index (:func:`windows.members`),
over random indexes (rank ties, zero sizes, skipped keys, budgets that trim the front, keys a
relist dropped, evicted samples, samples whose recorded rank is not the catalog's), with windows
read in storage order and along the rank index (a window much smaller than the catalog).
"""

from __future__ import annotations

import dataclasses
import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects
from store_helpers import sid_of

from epochfs.sidecar.store import CatalogRow, Policy, Schedule, Store, epochs, schema, windows


def random_index(rng: random.Random) -> sqlite3.Connection:
    """An index as a store could hold it after listings, relists, admissions and evictions."""
    db = sqlite3.connect(":memory:")
    schema.create(db)
    keys = [f"k/{i:04d}-{rng.choice(['a', 'é', 'Z', '_'])}" for i in range(rng.randint(0, 150))]
    ranks = rng.choice([10, 40, 10_000])  # few ranks: many ties, ordered by key
    catalog = {k: (rng.randrange(ranks), rng.choice([0, 0, 1, 5, 100]), int(rng.random() < 0.1))
               for k in keys}
    for k, (rank, size, skipped) in catalog.items():
        db.execute("INSERT INTO catalog(key, path, sid, size, version, rank, skipped) "
                   "VALUES(?,?,?,?,?,?,?)", (k, k, sid_of(k), size, "v", rank, skipped))
    cached = [k for k in keys if rng.random() < 0.8]  # the rest: never fetched, or evicted
    dropped = [f"gone/{i}" for i in range(rng.randint(0, 6))]  # a relist dropped their keys
    rng.shuffle(cached)
    odd = rng.random() < 0.25  # a few samples whose recorded rank is not the catalog's
    for k in [*cached, *dropped]:
        recorded: int | None = catalog[k][0] if k in catalog else rng.randrange(ranks)
        if odd and rng.random() < 0.05:
            recorded = rng.choice([None, int(recorded or 0) + 1])
        size = catalog[k][1] if k in catalog else 3
        if rng.random() < 0.1:
            size += 7  # a relist changed the key's size after its sample was admitted
        db.execute("INSERT INTO samples(sid, key, path, size, checksum, version, admitted_at, rank) "
                   "VALUES(?,?,?,?,?,?,?,?)", (sid_of(k), k, k, size, "size-only", "v", 0.0, recorded))
    db.commit()
    return db


def ordered_span(db: sqlite3.Connection, policy: Policy, n: int) -> windows.Span:
    """Epoch n's window as the ordered pass from its back reads it (every window, trimmed or not)."""
    assert policy.schedule is not None
    total = int(db.execute("SELECT COUNT(*) FROM catalog").fetchone()[0])
    hi = min(total, policy.schedule.size(n))
    kept, rank, key, hi_rank, hi_key, missing, strays, cached, cached_bytes = db.execute(
        windows._SCAN, (hi, policy.epoch_budget)).fetchone()
    if kept is None:
        return windows.Span(hi, hi, None, 0, False, 0, 0)
    return windows.Span(hi - int(kept), hi, (int(rank), str(key), int(hi_rank), str(hi_key)),
                        int(missing), bool(strays), int(cached), int(cached_bytes))


@pytest.mark.parametrize("seed", range(40))
def test_the_unsorted_read_finds_the_window_the_ordered_pass_finds(seed: int) -> None:
    rng = random.Random(seed)
    db = random_index(rng)
    for _ in range(8):
        policy = Policy(capacity=rng.choice([1, 60, 400, 1 << 40, 1 << 40]), headroom=0.0,
                        schedule=Schedule(initial=rng.randint(1, 60), growth=rng.choice([1.0, 1.5, 3.0])))
        n = rng.randint(0, 4)
        span = windows.scan(db, policy, n)
        assert span == ordered_span(db, policy, n)
        assert (span.lo, span.hi) == windows.window(db, policy, n)
        if span.ends is not None:
            assert span.ends[:2] == windows.at(db, span.lo) and span.ends[2:] == windows.at(db, span.hi - 1)


@pytest.mark.parametrize("seed", range(40))
def test_a_window_cut_counts_what_its_members_count_reads(seed: int) -> None:
    """The epoch's samples and bytes taken from the window's read equal those read back along the
    rank index from its recorded bounds (the count a cut made before), excluded samples or not."""
    rng = random.Random(1000 + seed)
    db = random_index(rng)
    for n in range(4):
        policy = Policy(capacity=rng.choice([60, 400, 1 << 40]), headroom=0.0,
                        schedule=Schedule(initial=rng.randint(1, 60), growth=rng.choice([1.0, 1.5])))
        epochs._insert_epoch(db, policy, n)
        samples, nbytes, lo_key = db.execute("SELECT samples, bytes, lo_key FROM epochs WHERE n=?",
                                             (n,)).fetchone()
        if lo_key is not None:  # recorded by its bounds
            assert (samples, nbytes) == windows.members(db, n)


def traced_cut(store: Store, n: int) -> list[str]:
    statements: list[str] = []
    trace: Callable[[str], None] = statements.append
    store._ix.db.set_trace_callback(trace)
    try:
        assert store.cut(n) == n
    finally:
        store._ix.db.set_trace_callback(None)
    return statements


@pytest.mark.parametrize("capacity, trimmed", [(1 << 30, False), (150, True)])
def test_a_cut_sorts_its_window_only_when_the_budget_trims_its_front(
        tmp_path: Path, capacity: int, trimmed: bool) -> None:
    """The descending pass (a sort of every catalog row of the window) and the second count of the
    members along the rank index run only for a window whose bytes exceed the budget."""
    store = Store(tmp_path / "cache", create=True)
    try:
        policy = Policy(capacity=1 << 30, headroom=0.0, schedule=Schedule(initial=20, growth=2.0))
        store.configure(policy)
        objects = make_objects(30, 10)
        store.add_catalog(CatalogRow(k, sid_of(k), 10, "v", rank=i) for i, k in enumerate(sorted(objects)))
        store.finalize_catalog()
        admit(store, objects)
        store.configure(dataclasses.replace(policy, capacity=capacity))  # the budget: 15 of 20 keys
        statements = traced_cut(store, 0)
        sorted_back = [s for s in statements if "ORDER BY rank DESC" in s]
        assert len(sorted_back) == (1 if trimmed else 0), sorted_back
        recounted = [s for s in statements if "FROM epochs e, samples s" in s and "s.id >" not in s]
        assert recounted == [], recounted
        expect = sorted(objects)[5:20] if trimmed else sorted(objects)[:20]
        assert [f.path for f in store.epoch_files(0)] == expect
        [info] = store.epochs()
        assert (info.samples, info.bytes) == (len(expect), 10 * len(expect))
    finally:
        store.close()
