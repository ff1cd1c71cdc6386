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
from dataclasses import dataclass

from epochfs.sidecar.store.records import Policy

_TRIMMED = (
    "SELECT rank, key, skipped, ROW_NUMBER() OVER w AS back, SUM(size) OVER w AS tail, "
    "FIRST_VALUE(rank) OVER w AS hi_rank, FIRST_VALUE(key) OVER w AS hi_key "
    "FROM (SELECT rank, key, size, skipped FROM catalog ORDER BY rank, key LIMIT ?) "
    "WINDOW w AS (ORDER BY rank DESC, key DESC ROWS UNBOUNDED PRECEDING)"
)
"""The first ``hi`` catalog rows of the rank order read once, last first, each with its place
counted from the window's back (``back``: 1 for position hi - 1), the bytes from it to the back
(``tail``) and the back's (rank, key); arguments (hi). The window is the rows with ``tail`` within
the budget: sizes are never negative, so ``tail`` only grows towards the front and those rows are
exactly the ones a walk from the back keeps before the budget is exceeded. One walk of the rank
index and one sort, in SQLite (a walk in Python cost a second a million rows)."""

_SCAN = (
    "SELECT MAX(t.back), t.rank, t.key, t.hi_rank, t.hi_key, "
    "COALESCE(SUM(t.skipped = 0 AND s.id IS NULL), 0), "
    "COALESCE(SUM(s.id IS NOT NULL AND s.rank IS NOT t.rank), 0), COUNT(s.id) "
    f"FROM ({_TRIMMED}) t LEFT JOIN samples s ON s.key = t.key WHERE t.tail <= ?"
)
"""Epoch n's window in one ordered pass (:func:`scan`); arguments (hi, budget). ``MAX(back)`` is
the statement's only min or max, so SQLite takes ``t.rank, t.key`` from its row: the window's
first row."""


def _hi(db: sqlite3.Connection, policy: Policy, n: int) -> int:
    """The end of epoch n's window before its front is trimmed: the schedule's size, or the
    whole catalog when it holds fewer keys."""
    assert policy.schedule is not None
    total = int(db.execute("SELECT COUNT(*) FROM catalog").fetchone()[0])
    return min(total, policy.schedule.size(n))


def window(db: sqlite3.Connection, policy: Policy, n: int) -> tuple[int, int]:
    """Schedule mode: positions [lo, hi) of epoch n's window in the sampling order, its front
    trimmed so that the window's bytes fit the epoch budget."""
    hi = _hi(db, policy, n)
    # Positions are implicit (the rank order), never numbered: listing and relisting stay cheap.
    kept = db.execute(f"SELECT COUNT(*) FROM ({_TRIMMED}) WHERE tail <= ?",
                      (hi, policy.epoch_budget)).fetchone()[0]
    return hi - int(kept), hi


Bounds = tuple[int, str, int, str]
"""A window's ends: (lo_rank, lo_key, hi_rank, hi_key), both ends in the window."""


@dataclass(frozen=True)
class Span:
    """Epoch n's window as one ordered pass over the catalog found it (:func:`scan`): what its
    cut condition and its cut both need, so that a cut reads the window once, not once for each
    question (three sorts of the window's rows, 6-20 s at 100k keys on a loaded node)."""

    lo: int
    hi: int
    """Positions [lo, hi) of the rank order, as :func:`window` says."""
    ends: Bounds | None
    """Its first and last catalog rows; None when the window is empty."""
    missing: int
    """Keys of the window neither skipped nor cached: the cut waits for them."""
    strays: bool
    """A cached sample of a key in the window records a rank other than the catalog's (NULL: it
    was admitted before schema 4 after its key left the catalog): bounds cannot describe it."""
    cached: int
    """Keys of the window with a sample."""


def scan(db: sqlite3.Connection, policy: Policy, n: int) -> Span:
    """Schedule mode: epoch n's window now (positions, ends, keys missing, strays), in one pass."""
    hi = _hi(db, policy, n)
    kept, rank, key, hi_rank, hi_key, missing, strays, cached = db.execute(
        _SCAN, (hi, policy.epoch_budget)).fetchone()
    if kept is None:
        return Span(hi, hi, None, 0, False, 0)  # empty: no keys, or the back alone exceeds the budget
    ends = (int(rank), str(key), int(hi_rank), str(hi_key))
    return Span(hi - int(kept), hi, ends, int(missing), bool(strays), int(cached))


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


def record(db: sqlite3.Connection, span: Span, n: int, max_sample: int) -> Bounds | None:
    """Record epoch n's window ``span`` (read by :func:`scan` in this same write transaction), cut
    now with ``max_sample`` the newest sample id: returns its bounds for its ``epochs`` row (after
    writing its few ``epoch_excluded`` rows), or None when the window is empty or bounds cannot
    describe it (then its ``epoch_samples`` rows are written, one per sample, as before schema 4)."""
    if span.ends is None:
        return None  # an empty window: no bounds and no rows, an epoch of nothing
    if span.strays:
        db.execute(
            f"INSERT INTO epoch_samples(epoch, sample) SELECT ?, s.id FROM samples s "
            f"JOIN {WINDOW_KEYS} c ON c.key = s.key",
            (n, span.hi - span.lo, span.lo),
        )
        return None
    # Without strays every cached key of the window is a sample between the ends, so the samples
    # between them number the window's cached keys unless some are not in it: counted first on
    # the rank index alone, as the search for them costs two lookups of the catalog per sample.
    between = db.execute("SELECT COUNT(*) FROM samples WHERE (rank, key) >= (?, ?) "
                         "AND (rank, key) <= (?, ?) AND id <= ?", (*span.ends, max_sample)).fetchone()[0]
    if int(between) == span.cached:
        return span.ends
    db.execute(
        "INSERT INTO epoch_excluded(epoch, sample) SELECT ?, s.id FROM samples s "
        "WHERE (s.rank, s.key) >= (?, ?) AND (s.rank, s.key) <= (?, ?) AND s.id <= ? "
        "AND NOT EXISTS (SELECT 1 FROM catalog c WHERE c.key = s.key AND c.rank = s.rank)",
        (n, *span.ends, max_sample),
    )
    return span.ends


def members(db: sqlite3.Connection, n: int, *, above: int = 0) -> tuple[int, int]:
    """(samples, bytes) of epoch n, a window recorded by its bounds, counting only the samples
    whose id is above ``above`` (one range read of the ``samples_rank`` index)."""
    newer = "AND s.id > ?" if above else "AND ? = 0"  # all: the rank index's range, not every id
    count, total = db.execute(
        "SELECT COUNT(*), COALESCE(SUM(s.size), 0) FROM epochs e, samples s "
        f"WHERE e.n = ? {newer} AND {IN_WINDOW}", (n, above)).fetchone()
    return int(count), int(total)
