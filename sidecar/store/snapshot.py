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
"""

from __future__ import annotations

import sqlite3

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
