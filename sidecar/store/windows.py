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
    "COALESCE(SUM(s.id IS NOT NULL AND s.rank IS NOT t.rank), 0), COUNT(s.id), "
    "COALESCE(SUM(s.size), 0) "
    f"FROM ({_TRIMMED}) t LEFT JOIN samples s ON s.key = t.key WHERE t.tail <= ?"
)
"""Epoch n's window in one ordered pass (:func:`scan`); arguments (hi, budget). ``MAX(back)`` is
the statement's only min or max, so SQLite takes ``t.rank, t.key`` from its row: the window's
first row."""

_UNTRIMMED = (
    "SELECT COALESCE(SUM(t.skipped = 0 AND s.id IS NULL), 0), "
    "COALESCE(SUM(s.id IS NOT NULL AND s.rank IS NOT t.rank), 0), COUNT(s.id), "
    "COALESCE(SUM(s.size), 0) FROM catalog t {how} LEFT JOIN samples s ON s.key = t.key "
    "WHERE t.rank <= ?1 AND (t.rank, t.key) <= (?1, ?2)"
)
"""The window [0, hi) up to its back, ``(hi_rank, hi_key)``, when the budget trims nothing from its
front (:func:`_fits`), read as :data:`_SCAN` reads it but unordered: the keys missing, the strays,
the keys cached and their samples' bytes; arguments (hi_rank, hi_key). ``{how}``: :func:`_how`."""

SEQUENTIAL = 8
"""Read the whole catalog in storage order rather than walk the rank index when the window holds at
least 1/SEQUENTIAL of the catalog's keys: a row read in storage order costs about a twentieth of
one found by rowid from the rank index (100k keys: 0.016 s against 0.3-0.5 s on a loaded 2-core
VM)."""


def extent(db: sqlite3.Connection, policy: Policy, n: int) -> tuple[int, int]:
    """The end of epoch n's window before its front is trimmed (the schedule's size, or the
    whole catalog when it holds fewer keys), and the catalog's keys."""
    assert policy.schedule is not None
    total = int(db.execute("SELECT COUNT(*) FROM catalog").fetchone()[0])
    return min(total, policy.schedule.size(n)), total


def _how(hi: int, total: int) -> str:
    """How to read the catalog rows up to a window's back: ``NOT INDEXED`` (the whole table in
    storage order, no row found by its rowid) or ``INDEXED BY catalog_rank`` (a walk of the
    window's rows only, for a window much smaller than the catalog: :data:`SEQUENTIAL`). Neither
    sorts the rows."""
    return "NOT INDEXED" if hi * SEQUENTIAL >= total else "INDEXED BY catalog_rank"


def _fits(db: sqlite3.Connection, policy: Policy, hi: int, total: int) -> tuple[int, str] | None:
    """The back of the window [0, hi) when its bytes fit the epoch budget (the budget trims
    nothing from its front); None when they do not or the window is empty. The back is found on
    the rank index alone (:func:`at`), the bytes by an unordered read of the rows up to it."""
    if hi <= 0:
        return None
    back = at(db, hi - 1)
    count, nbytes = db.execute(f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM catalog {_how(hi, total)} "
                               "WHERE rank <= ?1 AND (rank, key) <= (?1, ?2)", back).fetchone()
    return back if int(count) == hi and int(nbytes) <= policy.epoch_budget else None


def window(db: sqlite3.Connection, policy: Policy, n: int) -> tuple[int, int]:
    """Schedule mode: positions [lo, hi) of epoch n's window in the sampling order, its front
    trimmed so that the window's bytes fit the epoch budget."""
    hi, total = extent(db, policy, n)
    if _fits(db, policy, hi, total) is not None:
        return 0, hi  # no sort while the window fits the budget (a sort once it does not)
    # Positions are implicit (the rank order), never numbered: listing and relisting stay cheap.
    kept = db.execute(f"SELECT COUNT(*) FROM ({_TRIMMED}) WHERE tail <= ?",
                      (hi, policy.epoch_budget)).fetchone()[0]
    return hi - int(kept), hi


Bounds = tuple[int, str, int, str]
"""A window's ends: (lo_rank, lo_key, hi_rank, hi_key), both ends in the window."""


@dataclass(frozen=True)
class Span:
    """Epoch n's window as one pass over the catalog found it (:func:`scan`): what its
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
    cached_bytes: int
    """The bytes of their samples: the epoch's bytes when bounds describe it."""
    bounded: int | None = None
    """The samples whose own (rank, key) lies between the ends, when known ahead (:mod:`.ahead`);
    None: :func:`record` counts them."""
    newer: tuple[int, int] | None = None
    """(prev_max, count) when known ahead: the cached keys' samples with id above ``prev_max``,
    which the cut counts as new when ``prev_max`` is the previous epoch's ``max_sample``."""


def at(db: sqlite3.Connection, p: int) -> tuple[int, str]:
    """The (rank, key) at position ``p`` of the rank order, from the rank index alone: the rank
    there (a walk of the index, no row read), then the key among the few keys of that rank."""
    rank = int(db.execute("SELECT rank FROM catalog ORDER BY rank LIMIT 1 OFFSET ?", (p,)).fetchone()[0])
    before = int(db.execute("SELECT COUNT(*) FROM catalog WHERE rank < ?", (rank,)).fetchone()[0])
    key = db.execute("SELECT key FROM catalog WHERE rank = ? ORDER BY key LIMIT 1 OFFSET ?",
                     (rank, p - before)).fetchone()[0]
    return rank, str(key)


def scan(db: sqlite3.Connection, policy: Policy, n: int) -> Span:
    """Schedule mode: epoch n's window now (positions, ends, keys missing, strays), in one pass.

    When the window's bytes fit the budget (:func:`_fits`) it is [0, hi) and one unordered read
    joins its keys with their samples (:data:`_UNTRIMMED`: 3.5 s at 1M keys on a loaded 2-core
    VM, of which nearly all is the lookup of each key's sample). Otherwise the ordered pass from
    the back (:data:`_SCAN`, a sort of the window's rows: 8.6 s there) finds where the budget cuts
    the front."""
    hi, total = extent(db, policy, n)
    back = _fits(db, policy, hi, total)
    if back is not None:
        missing, strays, cached, cached_bytes = db.execute(
            _UNTRIMMED.format(how=_how(hi, total)), back).fetchone()
        return Span(0, hi, (*at(db, 0), *back), int(missing), bool(strays), int(cached),
                    int(cached_bytes))
    kept, rank, key, hi_rank, hi_key, missing, strays, cached, cached_bytes = db.execute(
        _SCAN, (hi, policy.epoch_budget)).fetchone()
    if kept is None:
        return Span(hi, hi, None, 0, False, 0, 0)  # empty: no keys, or the back alone exceeds the budget
    ends = (int(rank), str(key), int(hi_rank), str(hi_key))
    return Span(hi - int(kept), hi, ends, int(missing), bool(strays), int(cached), int(cached_bytes))


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
    """Record epoch n's window ``span`` (read by :func:`scan` in this same write transaction, or
    kept exact ahead of it by :mod:`.ahead`), cut now with ``max_sample`` the newest sample id:
    returns its bounds for its ``epochs`` row (after writing its few ``epoch_excluded`` rows), or
    None when the window is empty or bounds cannot describe it (then its ``epoch_samples`` rows are
    written, one per sample)."""
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
    between = span.bounded if span.bounded is not None else db.execute(
        "SELECT COUNT(*) FROM samples WHERE (rank, key) >= (?, ?) AND (rank, key) <= (?, ?) AND id <= ?",
        (*span.ends, max_sample)).fetchone()[0]
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
