"""Schedule mode's cut reads its window once (issue 25), and records exactly what it recorded when
it read the window once for each question.

The reference below is the cut as it was before: positions by a walk in Python from the window's
back, then the keys missing, the strays and each end each read again by position. Randomized
indexes (rank ties, zero sizes, skipped keys, budgets that trim the front, keys a relist dropped,
samples evicted, samples whose recorded rank disagrees with the catalog's or is unknown) must give
the same positions, the same cut condition and the same epoch rows either way.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fuse_helpers import admit, make_objects
from store_helpers import sid_of

from epochfs.sidecar.store import CatalogRow, Policy, Schedule, Store, epochs, schema, windows

WINDOW_KEYS = "(SELECT key, skipped, rank FROM catalog ORDER BY rank, key LIMIT ? OFFSET ?)"


def old_window(db: sqlite3.Connection, policy: Policy, n: int) -> tuple[int, int]:
    """Positions [lo, hi) as :func:`windows.window` found them before: a walk from the back."""
    assert policy.schedule is not None
    total = int(db.execute("SELECT COUNT(*) FROM catalog").fetchone()[0])
    hi = min(total, policy.schedule.size(n))
    rows = db.execute("SELECT size FROM (SELECT rank, key, size FROM catalog ORDER BY rank, key "
                      "LIMIT ?) ORDER BY rank DESC, key DESC", (hi,))
    lo, cum = hi, 0
    for (size,) in rows:
        cum += int(size)
        if cum > policy.epoch_budget:
            break
        lo -= 1
    return lo, hi


def old_missing(db: sqlite3.Connection, policy: Policy, n: int) -> int:
    lo, hi = old_window(db, policy, n)
    return int(db.execute(f"SELECT COUNT(*) FROM {WINDOW_KEYS} c WHERE c.skipped=0 AND NOT EXISTS "
                          "(SELECT 1 FROM samples s WHERE s.key=c.key)", (hi - lo, lo)).fetchone()[0])


def old_record(db: sqlite3.Connection, policy: Policy, n: int, max_sample: int) -> Any:
    """:func:`windows.record` before: the window, its strays and its ends each read by position."""
    lo, hi = old_window(db, policy, n)
    if lo >= hi:
        return None
    if db.execute(f"SELECT 1 FROM samples s JOIN {WINDOW_KEYS} c ON c.key = s.key "
                  "WHERE s.rank IS NOT c.rank LIMIT 1", (hi - lo, lo)).fetchone() is not None:
        db.execute(f"INSERT INTO epoch_samples(epoch, sample) SELECT ?, s.id FROM samples s "
                   f"JOIN {WINDOW_KEYS} c ON c.key = s.key", (n, hi - lo, lo))
        return None
    ends = [db.execute("SELECT rank, key FROM catalog ORDER BY rank, key LIMIT 1 OFFSET ?",
                       (p,)).fetchone() for p in (lo, hi - 1)]
    bounds = (int(ends[0][0]), str(ends[0][1]), int(ends[1][0]), str(ends[1][1]))
    db.execute(
        "INSERT INTO epoch_excluded(epoch, sample) SELECT ?, s.id FROM samples s "
        "WHERE (s.rank, s.key) >= (?, ?) AND (s.rank, s.key) <= (?, ?) AND s.id <= ? "
        "AND NOT EXISTS (SELECT 1 FROM catalog c WHERE c.key = s.key AND c.rank = s.rank)",
        (n, *bounds, max_sample))
    return bounds


def random_index(rng: random.Random) -> sqlite3.Connection:
    """An index as a store could hold it after listings, relists, admissions and evictions."""
    db = sqlite3.connect(":memory:")
    schema.create(db)
    keys = [f"k/{i:04d}-{rng.choice(['a', 'é', 'Z', '_'])}" for i in range(rng.randint(0, 120))]
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
        db.execute("INSERT INTO samples(sid, key, path, size, checksum, version, admitted_at, rank) "
                   "VALUES(?,?,?,?,?,?,?,?)", (sid_of(k), k, k, catalog.get(k, (0, 3))[1], "size-only",
                                                "v", 0.0, recorded))
    db.commit()  # a copy (backup) waits for an open write transaction
    return db


def cut_rows(db: sqlite3.Connection, policy: Policy, n: int) -> tuple[Any, ...]:
    """What a cut of epoch n writes (its row less the clock, its listed and excluded samples)."""
    epochs._insert_epoch(db, policy, n)
    return (db.execute("SELECT samples, bytes, new, evicted, max_sample, first_sample, lo_rank, lo_key, "
                       "hi_rank, hi_key FROM epochs WHERE n=?", (n,)).fetchall(),
            db.execute("SELECT sample FROM epoch_samples WHERE epoch=? ORDER BY sample", (n,)).fetchall(),
            db.execute("SELECT sample FROM epoch_excluded WHERE epoch=? ORDER BY sample", (n,)).fetchall())


def copy(db: sqlite3.Connection) -> sqlite3.Connection:
    other = sqlite3.connect(":memory:")
    db.backup(other)
    return other


@pytest.mark.parametrize("seed", range(40))
def test_the_one_pass_window_cuts_exactly_what_the_reads_by_position_cut(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    db = random_index(rng)
    for _ in range(6):
        policy = Policy(capacity=rng.choice([1, 60, 400, 1 << 40]), headroom=0.0,
                        schedule=Schedule(initial=rng.randint(1, 40), growth=rng.choice([1.0, 1.5, 3.0])))
        n = rng.randint(0, 4)
        span = windows.scan(db, policy, n)
        assert (span.lo, span.hi) == windows.window(db, policy, n) == old_window(db, policy, n)
        assert span.missing == old_missing(db, policy, n)
        new, old = copy(db), copy(db)
        max_sample = int(db.execute("SELECT COALESCE(MAX(id), 0) FROM samples").fetchone()[0])
        assert windows.record(new, span, n, max_sample) == old_record(old, policy, n, max_sample)
        for table in ("epoch_samples", "epoch_excluded"):
            assert new.execute(f"SELECT * FROM {table}").fetchall() == \
                old.execute(f"SELECT * FROM {table}").fetchall()
        # A whole cut, on the store's path and on the old one (its record swapped in).
        new, old = copy(db), copy(db)
        with monkeypatch.context() as m:
            m.setattr(epochs, "record", lambda d, _s, k, top, p=policy: old_record(d, p, k, top))
            before = cut_rows(old, policy, n)
        assert cut_rows(new, policy, n) == before


def test_a_schedule_mode_cut_reads_its_window_once(tmp_path: Path) -> None:
    """The condition and the record share one reading: one pass over the window's catalog rows
    and their samples, not six (each a sort of the window in SQLite: seconds at 100k keys)."""
    store = Store(tmp_path / "cache", create=True)
    try:
        store.configure(Policy(capacity=1 << 30, headroom=0.0, schedule=Schedule(initial=20, growth=2.0)))
        objects = make_objects(30, 10)
        store.add_catalog(CatalogRow(k, sid_of(k), 10, "v", rank=i) for i, k in enumerate(sorted(objects)))
        store.finalize_catalog()
        admit(store, objects)
        statements: list[str] = []
        trace: Callable[[str], None] = statements.append
        store._ix.db.set_trace_callback(trace)
        try:
            assert store.cut(0) == 0
        finally:
            store._ix.db.set_trace_callback(None)
        joined = [s for s in statements if "FROM catalog" in s and "JOIN samples" in s]
        assert len(joined) == 1, joined  # the window's keys read with their samples once
        assert [f.path for f in store.epoch_files(0)] == sorted(objects)[:20]
    finally:
        store.close()
