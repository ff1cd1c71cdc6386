"""The folder view's aim at schedule mode's next window (:meth:`WindowReads.predicted`, issue 25)
finds the window's two ends on the rank index, not by a walk of the catalog's rows.

The reference below is ``predicted`` as it was: each end read by its position in ``ORDER BY rank,
key`` (``LIMIT 1 OFFSET``), which reads a catalog row for every position before it (3.8-8.3 s at
1M keys after every publish). Random catalogs (rank ties ordered by key bytes, zero sizes, budgets
that trim the window's front or leave it empty, windows past the catalog's end, an empty catalog)
must give the same ends either way.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from store_helpers import sid_of

from epochfs.sidecar.store import CatalogRow, Policy, Schedule, Store, windows
from epochfs.sidecar.store.admitted import Place


def old_predicted(db: sqlite3.Connection, policy: Policy, n: int) -> tuple[Place, Place] | None:
    """:meth:`WindowReads.predicted` before: each end read by its position in the rank order."""
    if policy.schedule is None:
        return None
    lo, hi = windows.window(db, policy, n)
    if lo >= hi:
        return None
    ends = [db.execute("SELECT rank, key FROM catalog ORDER BY rank, key LIMIT 1 OFFSET ?",
                       (p,)).fetchone() for p in (lo, hi - 1)]
    return (int(ends[0][0]), str(ends[0][1])), (int(ends[1][0]), str(ends[1][1]))


def random_catalog(rng: random.Random) -> list[CatalogRow]:
    """A catalog with many rank ties (few ranks), keys that order differently as bytes and as
    text would (case, non-ASCII), and sizes from zero up."""
    ranks = rng.choice([3, 20, 1 << 40])
    tails = ["a", "é", "Z", "_", "~", "ß", "A", ""]
    keys = {f"{rng.choice(['k', 'K', 'é'])}/{rng.randrange(10_000):04d}{rng.choice(tails)}"
            for _ in range(rng.randint(0, 150))}
    return [CatalogRow(k, sid_of(k), rng.choice([0, 0, 1, 7, 100]), "v", rng.randrange(-ranks, ranks))
            for k in sorted(keys)]


@pytest.mark.parametrize("seed", range(30))
def test_predicted_ends_match_the_ends_read_by_position(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    store = Store(tmp_path / "cache", create=True)
    try:
        rows = random_catalog(rng)
        store.add_catalog(rows)
        store.finalize_catalog()
        reads = store.admitted_windows()
        for _ in range(8):
            # Budgets from one byte (the back alone may exceed it: an empty window) to no limit;
            # windows from one key to far past the catalog's end (n up to 40 at growth 3).
            schedule = Schedule(initial=rng.randint(1, 60), growth=rng.choice([1.0, 1.5, 3.0]))
            policy = Policy(capacity=rng.choice([1, 50, 300, 1 << 40]), headroom=0.0, schedule=schedule)
            store.configure(policy)
            n = rng.choice([0, 1, 2, 5, 40])
            with store._ix.read() as db:
                expected = old_predicted(db, policy, n)
            assert reads.predicted(n) == expected, (policy, n)
        store.configure(Policy(capacity=1 << 40))  # snapshot mode: no window
        assert reads.predicted(0) is None
    finally:
        store.close()


def test_an_empty_catalog_has_no_predicted_window(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache", create=True)
    try:
        store.configure(Policy(capacity=1 << 40, headroom=0.0, schedule=Schedule(initial=10, growth=1.0)))
        assert store.admitted_windows().predicted(0) is None
    finally:
        store.close()


def test_predicted_reads_no_catalog_row_along_the_rank_order(tmp_path: Path) -> None:
    """When the window fits the budget (the benchmark's case, and the usual one), no statement
    ``predicted`` runs walks the rank index reading each catalog row (``SCAN ... USING INDEX``,
    not ``COVERING``): the reads by position did, twice, up to each end."""
    store = Store(tmp_path / "cache", create=True)
    try:
        store.configure(Policy(capacity=1 << 40, headroom=0.0, schedule=Schedule(initial=500, growth=1.0)))
        ranks = {f"k/{i:05d}": (i * 7919) % 400 for i in range(1000)}  # ties: 2-3 keys a rank
        store.add_catalog(CatalogRow(k, sid_of(k), 10, "v", rank=r) for k, r in ranks.items())
        store.finalize_catalog()
        db = store._ix.db
        statements: list[str] = []
        trace: Callable[[str], None] = statements.append
        db.set_trace_callback(trace)
        try:
            ends = store.admitted_windows().predicted(0)
        finally:
            db.set_trace_callback(None)
        assert ends is not None and ends[0] == (0, min(k for k, r in ranks.items() if r == 0))
        plans = {s: [str(r[3]) for r in db.execute(f"EXPLAIN QUERY PLAN {s}")]
                 for s in statements if "catalog" in s}
        assert plans, statements
        walks = {s: p for s, p in plans.items() if any(d.startswith("SCAN catalog USING INDEX") for d in p)}
        assert not walks, walks
    finally:
        store.close()
