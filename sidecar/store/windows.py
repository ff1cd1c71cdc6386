"""Schedule-mode windows: where epoch N's window lies in the sampling order, and how a cut records it.

A window is positions [lo, hi) of the catalog's rank order (``ORDER BY rank, key``). Positions are
never stored (a relist would renumber them), but the window's two ends are: the (rank, key) of its
first and its last catalog row. Each sample records its key's rank when admitted
(``samples.rank``), so epoch N is the cached samples whose (rank, key) lies between those ends and
whose id is at most the cut's ``max_sample``, which a cut records in one ``epochs`` row whatever
the window's size, as a snapshot cut records a range of ids.

The set cannot change after the cut: samples admitted later have higher ids, a sample's rank is
never rewritten, and eviction never takes a member of a live window (:data:`IN_WINDOW`). The
bounds alone would say more than the catalog did at the cut in one case: a cached sample whose key
a relist has dropped from the catalog lies between the ends but was not in the window. Those few
samples are written down (``epoch_excluded``), one row each. A sample whose recorded rank is not
its key's catalog rank (NULL: admitted by an epochfs before schema 4 after its key left the
catalog, or inserted without one) cannot be described by bounds; a window holding one is cut as
before, one ``epoch_samples`` row per sample, so what an epoch lists never depends on the form.
"""

from __future__ import annotations

import sqlite3

from epochfs.sidecar.store.records import Policy


def window(db: sqlite3.Connection, policy: Policy, n: int) -> tuple[int, int]:
    """Schedule mode: positions [lo, hi) of epoch n's window in the sampling order, its front
    trimmed so that the window's bytes fit the epoch budget."""
    assert policy.schedule is not None
    total = int(db.execute("SELECT COUNT(*) FROM catalog").fetchone()[0])
    hi = min(total, policy.schedule.size(n))
    # Positions are implicit (the rank order), never numbered: listing and relisting stay cheap.
    rows = db.execute(
        "SELECT size FROM (SELECT rank, key, size FROM catalog ORDER BY rank, key LIMIT ?) "
        "ORDER BY rank DESC, key DESC",
        (hi,),
    )
    lo, cum = hi, 0
    for (size,) in rows:
        cum += int(size)
        if cum > policy.epoch_budget:
            break
        lo -= 1
    return lo, hi


WINDOW_KEYS = "(SELECT key, skipped, rank FROM catalog ORDER BY rank, key LIMIT ? OFFSET ?)"
"""The catalog rows at positions [lo, hi) of the rank order; arguments (hi - lo, lo)."""

IN_WINDOW = ("s.rank IS NOT NULL AND (s.rank, s.key) >= (e.lo_rank, e.lo_key) "
             "AND (s.rank, s.key) <= (e.hi_rank, e.hi_key) AND s.id <= e.max_sample "
             "AND NOT EXISTS (SELECT 1 FROM epoch_excluded x WHERE x.epoch = e.n AND x.sample = s.id)")
"""SQL: sample ``s`` belongs to epoch ``e``, a window recorded by its bounds (``e.lo_key`` set)."""

FILES_IN_WINDOW = (
    "SELECT s.path, s.size, s.checksum, s.sid, s.key FROM samples s, epochs e "
    f"WHERE e.n = ? AND s.key > ? AND {IN_WINDOW.replace('(s.rank, s.key) ', '(+s.rank, s.key) ')} "
    "ORDER BY s.key LIMIT ?"
)
"""The files of a window recorded by its bounds, in key order after a key; arguments (n, after,
limit). Walks the samples in key order (``+s.rank``: not the rank index, whose range a chunk
would read and sort whole each time), as a listing of ``epoch_samples`` rows did."""


def _end(db: sqlite3.Connection, position: int) -> tuple[int, str]:
    rank, key = db.execute("SELECT rank, key FROM catalog ORDER BY rank, key LIMIT 1 OFFSET ?",
                           (position,)).fetchone()
    return int(rank), str(key)


Bounds = tuple[int, str, int, str]
"""A window's ends: (lo_rank, lo_key, hi_rank, hi_key), both ends in the window."""


def record(db: sqlite3.Connection, policy: Policy, n: int, max_sample: int) -> Bounds | None:
    """Record epoch n's window, cut now with ``max_sample`` the newest sample id: returns its
    bounds for its ``epochs`` row (after writing its few ``epoch_excluded`` rows), or None when
    the window is empty or bounds cannot describe it (then its ``epoch_samples`` rows are written,
    one per sample, as before schema 4)."""
    lo, hi = window(db, policy, n)
    if lo >= hi:
        return None  # an empty window: no bounds and no rows, an epoch of nothing
    strays = db.execute(
        f"SELECT 1 FROM samples s JOIN {WINDOW_KEYS} c ON c.key = s.key "
        "WHERE s.rank IS NOT c.rank LIMIT 1", (hi - lo, lo)).fetchone()
    if strays is not None:
        db.execute(
            f"INSERT INTO epoch_samples(epoch, sample) SELECT ?, s.id FROM samples s "
            f"JOIN {WINDOW_KEYS} c ON c.key = s.key",
            (n, hi - lo, lo),
        )
        return None
    bounds = (*_end(db, lo), *_end(db, hi - 1))
    db.execute(
        "INSERT INTO epoch_excluded(epoch, sample) SELECT ?, s.id FROM samples s "
        "WHERE (s.rank, s.key) >= (?, ?) AND (s.rank, s.key) <= (?, ?) AND s.id <= ? "
        "AND NOT EXISTS (SELECT 1 FROM catalog c WHERE c.key = s.key AND c.rank = s.rank)",
        (n, *bounds, max_sample),
    )
    return bounds


def members(db: sqlite3.Connection, n: int, *, above: int = 0) -> tuple[int, int]:
    """(samples, bytes) of epoch n, a window recorded by its bounds, counting only the samples
    whose id is above ``above`` (one range read of the ``samples_rank`` index)."""
    newer = "AND s.id > ?" if above else "AND ? = 0"  # all: the rank index's range, not every id
    count, total = db.execute(
        "SELECT COUNT(*), COALESCE(SUM(s.size), 0) FROM epochs e, samples s "
        f"WHERE e.n = ? {newer} AND {IN_WINDOW}", (n, above)).fetchone()
    return int(count), int(total)
