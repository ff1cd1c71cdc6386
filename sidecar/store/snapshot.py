"""A snapshot-mode epoch's extent: the newest samples whose sizes sum to at most the epoch budget.

A cut runs in the index's write transaction, which the FUSE server's cut-on-lookup and every
admission wait on, so it must not cost a pass over the cache. A query that sums a window over every
sample (``SUM(size) OVER (ORDER BY id DESC)``) and then counts the epoch's rows took 2.8 s for a
lookup cut and 3.8 s for ``epochfs cut`` with 1M cached samples (``benchmarks/scale_cached.py``).

This works from the running totals (``cache_samples``, ``cache_bytes``, kept in the transactions
that change the samples, recounted by recovery) and steps over only the samples *below* the epoch,
oldest first: none when the cache fits the budget, and about ``--headroom`` of the cache (25% by
default) when it is full. The result is the same set: the first sample is the lowest id whose
suffix sum is within the budget, i.e. the first whose prefix sum reaches ``total - budget``.

The budget is ``capacity x (1 - headroom)`` while anything is left to fetch: the headroom is room
for new samples beside the pinned epochs. Once nothing is (a complete listing whose every
unskipped key is cached: a dataset that fits --capacity but not the epoch budget) it buys nothing,
and trimming would leave the same oldest samples out of every epoch for ever: the epoch then holds
the whole cache (:func:`budget_at_cut`). A key listed later is fetched into free room at once, or,
in a cache full to its capacity, once the next cut trims again and the epochs that held everything
retire.
"""

from __future__ import annotations

import sqlite3

from epochfs.sidecar.store.meta import Meta
from epochfs.sidecar.store.records import Policy

BATCH = 4096
"""Rows fetched at a time while stepping over the samples below the epoch."""


def newest_within(db: sqlite3.Connection, budget: int, max_id: int) -> tuple[int, int, int]:
    """``(first_sample, samples, bytes)`` of the epoch of the newest samples within ``budget``
    bytes; ``first_sample`` is ``max_id + 1`` (an empty range) when not even the newest fits."""
    totals = dict(db.execute(
        "SELECT name, value FROM counters WHERE name IN ('cache_samples', 'cache_bytes')").fetchall())
    samples, nbytes = int(totals.get("cache_samples", 0)), int(totals.get("cache_bytes", 0))
    over = nbytes - budget
    if over <= 0:
        low = db.execute("SELECT MIN(id) FROM samples").fetchone()[0]
        return (max_id + 1, 0, 0) if low is None else (int(low), samples, nbytes)
    below = below_bytes = 0
    rows = db.execute("SELECT id, size FROM samples ORDER BY id")
    while chunk := rows.fetchmany(BATCH):
        for sample_id, size in chunk:
            if below_bytes >= over:
                return int(sample_id), samples - below, nbytes - below_bytes
            below += 1
            below_bytes += int(size)
    return max_id + 1, 0, 0


def budget_at_cut(db: sqlite3.Connection, policy: Policy) -> int:
    """The bytes a snapshot-mode epoch cut now may hold: the epoch budget, or the whole capacity
    when nothing is left to fetch (see the module's docstring).

    Asked only when the cache is over the epoch budget. The counts rule out most caches at once
    (a catalog with more keys than the cache holds samples plus skips ever counted); otherwise one
    query stops at the first listed, unskipped key not cached, and reads the whole catalog only
    when every key is cached, a catalog no larger than the cache."""
    budget = policy.epoch_budget
    if db.execute("SELECT 1 FROM meta WHERE name=?", (Meta.LISTING_COMPLETE.value,)).fetchone() is None:
        return budget
    counters = dict(db.execute("SELECT name, value FROM counters WHERE name IN "
                               "('cache_samples', 'cache_bytes', 'skipped_total')").fetchall())
    if int(counters.get("cache_bytes", 0)) <= budget:
        return budget
    row = db.execute("SELECT value FROM meta WHERE name=?", (Meta.CATALOG_OBJECTS.value,)).fetchone()
    listed = 0 if row is None else int(row[0])
    if listed > int(counters.get("cache_samples", 0)) + int(counters.get("skipped_total", 0)):
        return budget
    unfetched = db.execute("SELECT 1 FROM catalog c WHERE c.skipped = 0 AND NOT EXISTS "
                           "(SELECT 1 FROM samples s WHERE s.key = c.key) LIMIT 1").fetchone()
    return budget if unfetched is not None else max(budget, policy.capacity)
