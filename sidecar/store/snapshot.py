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


def newest_fitting(db: sqlite3.Connection, budget: int, count: int) -> int:
    """How many of the newest ``count`` samples a snapshot epoch of ``budget`` bytes holds: the
    epoch is the newest samples whose sizes sum to at most the budget (:func:`newest_within`), so
    it holds ``count`` or more exactly when the newest ``count`` fit. Reads at most ``count`` rows
    (as :func:`.epochs.at_least` does), never the table: the cut condition is polled on every
    lookup."""
    row = db.execute(
        "SELECT COUNT(*) FROM (SELECT SUM(size) OVER (ORDER BY id DESC ROWS UNBOUNDED PRECEDING) AS t "
        "FROM (SELECT id, size FROM samples ORDER BY id DESC LIMIT ?)) WHERE t <= ?",
        (count, budget)).fetchone()
    return int(row[0])


def holds_samples(db: sqlite3.Connection, policy: Policy, least: int) -> bool:
    """Whether a snapshot epoch cut now holds at least ``least`` samples (at most ``least`` rows
    read): the budget the cut would use (:func:`cut_budget`) is asked only when the epoch budget
    falls short (it may read the catalog). On a volume that holds nothing more the budget is 1
    byte (docs/sampler.md, "Disk space"): with no epoch to hold to, no sample fits and no epoch is
    cut."""
    return newest_fitting(db, policy.epoch_budget, least) >= least or \
        newest_fitting(db, cut_budget(db, policy), least) >= least


DISK_FULL = "disk full"
"""The sampler's backpressure reason for a full node volume (sampler/room.py, which sets it, and
its pause gauges: ``epochfs_disk_full``); as a prefix, "disk full: <why>", of a volume too small
to hold any sample (the way out is room on the disk too). Here, for :func:`cut_budget`; its
readers below the sampler (the metrics, the Kubernetes Events, a cut request's answer) import it
from :mod:`.stats`, beside ``CACHE_FULL``."""


def cut_budget(db: sqlite3.Connection, policy: Policy) -> int:
    """The bytes a snapshot epoch cut now holds at most: :func:`budget_at_cut`, and, while sampling
    is paused on a volume short of room, no less than the newest live epoch's bytes.

    The budget recorded then is what the volume allows, 1 byte where it holds nothing more: an
    epoch cut to it would hold no sample although the cache holds hundreds (a trainer reads it as
    0 files without an error, and it takes a --keep-epochs slot of a real one). Nor may the cut
    wait for room: past the epoch budget the paused sampler fetches a share of the headroom per
    cut, one download per cut of a 1-byte budget, so without a cut it never measures that the
    room is back. An epoch of the newest cached samples within the newest epoch's size pins no
    more than the kept epochs do, and lets the oldest retire."""
    budget = budget_at_cut(db, policy)
    paused = db.execute("SELECT value FROM meta WHERE name=?", (Meta.BACKPRESSURE.value,)).fetchone()
    if paused is None or not str(paused[0]).startswith(DISK_FULL):
        return budget
    newest = db.execute("SELECT bytes FROM epochs WHERE retired=0 ORDER BY n DESC LIMIT 1").fetchone()
    return budget if newest is None else max(budget, int(newest[0]))
