"""The next schedule-mode window's facts, measured before anyone asks for its cut.

A schedule-mode cut needs its window's facts (:class:`.windows.Span`: positions, ends, keys
missing, strays, the cached samples' count and bytes). Reading them is a join of every window key
with its sample, ~3.5-5 µs a key: 5 s at a million keys, in the trainer's wait at each epoch
boundary and again at each poll of the cut condition. So they are measured ahead, once per epoch,
and kept exact from then on in the index itself (table ``ahead``, :data:`.schema.AHEAD`):

* **Arm** (a short write transaction, :func:`arm`): the row for epoch n with the window's back and
  a guess at its front (the first key; the budget may trim it), the policy it holds for, and sums
  at zero. From this commit on the triggers add each sample admitted into the window and take away
  each one evicted, and mark the row invalid at any change of the catalog at or before the back
  (positions, the budget's trim and skips depend on those rows only) or anywhere when the window
  is the whole catalog.
* **Measure** (one read snapshot, outside any lock, :func:`measure`): :func:`.windows.scan` and the
  row's sums, read together. The sums then held the changes between arming and that snapshot,
  which the scan already counts.
* **Settle** (a short write transaction, :func:`settle`): the row still armed the same way and
  valid, its sums become the scan's plus what the triggers added after the snapshot.

From then on the cut condition and the cut read one row (:func:`fetch`), and the cut records the
same rows as a scan would: the tests compare both over random stores and random changes. Anything
that cannot be followed (a catalog change in the window, another policy, an epoch number other than
the row's) makes :func:`fetch` answer None, and the cut reads its window by a scan. The row is a
cache: it commits with the changes it follows, so a kill -9 at any point leaves it either settled
and exact, or unsettled or invalid and unused; :func:`prepare` measures it again.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
import time
from dataclasses import dataclass, replace

from epochfs.sidecar.store.dburi import uri
from epochfs.sidecar.store.index import Index, is_busy
from epochfs.sidecar.store.records import Policy
from epochfs.sidecar.store.windows import Span, at, extent, scan

log = logging.getLogger("epochfs.store")

DUTY = 0.25
"""At most this share of the time measuring again a window whose facts keep being invalidated (a
relist adding keys inside it): after a measurement that did not settle and took t seconds, the next
waits 3t. One that settled is not paced: the next epoch's window is measured right after its cut."""


@dataclass(frozen=True)
class Armed:
    """What :func:`arm` recorded: the row's token and the window's ends it tracks."""

    n: int
    token: int
    front: tuple[int, str]
    back: tuple[int, str]


def _prev_max(db: sqlite3.Connection, n: int) -> int:
    """``max_sample`` of the newest epoch below n (0: none), as :func:`.epochs._insert_epoch` reads it."""
    row = db.execute("SELECT max_sample FROM epochs WHERE n < ? ORDER BY n DESC LIMIT 1", (n,)).fetchone()
    return 0 if row is None else int(row[0])


def arm(db: sqlite3.Connection, policy: Policy, n: int, front: tuple[int, str] | None = None) -> Armed | None:
    """Start tracking epoch n's window (inside a write transaction): its back from the rank index,
    ``front`` (None: the first key of the rank order), every other row dropped. None, and no row,
    when the window is empty. Costs a count of the catalog and a walk of the rank index to the back."""
    assert policy.schedule is not None
    db.execute("DELETE FROM ahead")
    hi = extent(db, policy, n)[0]
    if hi <= 0:
        return None
    back = at(db, hi - 1)
    front = front or at(db, 0)
    token = random.getrandbits(62)
    db.execute("INSERT INTO ahead(n, token, size, budget, whole, lo_rank, lo_key, hi_rank, hi_key, prev_max) "
               "VALUES(?,?,?,?,?,?,?,?,?,?)",
               (n, token, policy.schedule.size(n), policy.epoch_budget, int(hi < policy.schedule.size(n)),
                *front, *back, _prev_max(db, n)))
    return Armed(n, token, front, back)


_SUMS = ("SELECT missing, strays, cached, cached_bytes, bounded, newer FROM ahead "
         "WHERE n=? AND token=? AND valid")

Sums = tuple[int, int, int, int, int, int]


@dataclass(frozen=True)
class Measured:
    """One snapshot's scan of the window and the row's sums in that same snapshot."""

    span: Span
    sums: Sums
    """The window's facts as the scan found them, in :data:`_SUMS`' order."""
    seen: Sums
    """The row's sums in the snapshot: the changes since arming that the scan counts already."""


def measure(db: sqlite3.Connection, policy: Policy, armed: Armed) -> Measured | Armed | None:
    """Epoch n's window read in one snapshot with the row armed for it (the caller's read
    transaction): the measurement; or, when the budget trims the window's front away from the
    front armed, that front (arm again with it: the sums count only the window's keys); None when
    the row is gone or invalid, or the window is empty."""
    seen = db.execute(_SUMS, (armed.n, armed.token)).fetchone()
    if seen is None:
        return None
    span = scan(db, policy, armed.n)
    if span.ends is None or span.ends[2:] != armed.back:
        return None  # empty (the back alone exceeds the budget), or moved (never while valid)
    if span.ends[:2] != armed.front:
        return replace(armed, front=(span.ends[0], span.ends[1]))
    bounded = int(db.execute("SELECT COUNT(*) FROM samples WHERE (rank, key) >= (?, ?) "
                             "AND (rank, key) <= (?, ?)", span.ends).fetchone()[0])
    prev_max = int(db.execute("SELECT prev_max FROM ahead WHERE n=?", (armed.n,)).fetchone()[0])
    # The newer samples are few right after a cut (the ids above the last one's): by id, then
    # their catalog rows, as the triggers count them (CROSS JOIN: in that order, not a walk of
    # the window's catalog rows, 0.5 s at 100k keys).
    newer = int(db.execute(
        "SELECT COUNT(*) FROM samples s CROSS JOIN catalog c ON c.key = s.key WHERE s.id > ? "
        "AND (c.rank, c.key) >= (?, ?) AND (c.rank, c.key) <= (?, ?)", (prev_max, *span.ends)).fetchone()[0])
    sums = (span.missing, int(span.strays), span.cached, span.cached_bytes, bounded, newer)
    return Measured(span, sums, tuple(int(v) for v in seen))  # type: ignore[arg-type]


def settle(db: sqlite3.Connection, armed: Armed, measured: Measured) -> bool:
    """Make the row's sums the window's (inside a write transaction): the scan's, plus what the
    triggers added since its snapshot (the row's sums now, less those it had then). False when the
    row was armed again, removed or invalidated meanwhile."""
    change = [a - b for a, b in zip(measured.sums, measured.seen, strict=True)]
    cur = db.execute(
        "UPDATE ahead SET missing = missing + ?, strays = strays + ?, cached = cached + ?, "
        "cached_bytes = cached_bytes + ?, bounded = bounded + ?, newer = newer + ?, lo = ?, hi = ?, "
        "complete = 1 WHERE n=? AND token=? AND valid AND NOT complete",
        (*change, measured.span.lo, measured.span.hi, armed.n, armed.token))
    return cur.rowcount == 1


def fetch(db: sqlite3.Connection, policy: Policy, n: int) -> Span | None:
    """Epoch n's window facts from a settled, valid row for n under this policy; None otherwise
    (the caller scans). The span's ``bounded`` and ``newer`` carry what the cut would count."""
    if policy.schedule is None:
        return None
    row = db.execute(
        "SELECT lo, hi, lo_rank, lo_key, hi_rank, hi_key, missing, strays, cached, cached_bytes, bounded, "
        "prev_max, newer FROM ahead WHERE n=? AND complete AND valid AND size=? AND budget=?",
        (n, policy.schedule.size(n), policy.epoch_budget)).fetchone()
    if row is None:
        return None
    lo, hi, lo_rank, lo_key, hi_rank, hi_key, missing, strays, cached, nbytes, bounded, prev_max, newer = row
    return Span(int(lo), int(hi), (int(lo_rank), str(lo_key), int(hi_rank), str(hi_key)), int(missing),
                bool(strays), int(cached), int(nbytes), bounded=int(bounded),
                newer=(int(prev_max), int(newer)))


def forget(db: sqlite3.Connection, n: int) -> None:
    """Drop the rows for epoch n and below (a cut of n used or passed them)."""
    db.execute("DELETE FROM ahead WHERE n <= ?", (n,))


_paced: dict[str, float] = {}
"""Per index path: the earliest time the next measurement may start (:data:`DUTY`)."""
_pacing = threading.Lock()


def prepare(ix: Index, policy: Policy, n: int) -> bool:
    """Have epoch n's window facts settled ahead (schedule mode); True when they are.

    A look first (one row); measuring takes two short write transactions (each waits briefly for
    the write lock: a busy index is left for the next call) and one read of the window on a
    connection of its own, so neither this process's connection nor the write lock is held while
    the window is read. Paced to :data:`DUTY` when its facts keep being invalidated. Best effort:
    a busy or full index leaves the facts unsettled, and the cut reads its window by a scan."""
    if policy.schedule is None:
        return False
    with ix.read() as db:
        if db.execute("SELECT 1 FROM meta WHERE name='listing_complete'").fetchone() is None:
            return False  # windows are positions in a complete listing's order
        if fetch(db, policy, n) is not None:
            return True
    key = str(ix.path)
    start = time.monotonic()
    with _pacing:
        if start < _paced.get(key, 0.0):
            return False
    try:
        done = _measure(ix, policy, n)
    except sqlite3.OperationalError as e:
        if not is_busy(e) and getattr(e, "sqlite_errorcode", None) != sqlite3.SQLITE_FULL:
            raise
        log.info("epoch %d: its window is measured later (%s)", n, e)
        done = False
    with _pacing:  # a measurement undone by a change waits; one that settled does not
        _paced[key] = 0.0 if done else start + (time.monotonic() - start) / DUTY
    return done


def _measure(ix: Index, policy: Policy, n: int) -> bool:
    """Arm, measure, settle; arm again once with the front the budget trims to."""
    front: tuple[int, str] | None = None
    for _ in range(2):
        with ix.write_now() as db:
            armed = arm(db, policy, n, front)
        if armed is None:
            return False
        reader = sqlite3.connect(uri(ix.path, "rw"), uri=True, timeout=30.0, isolation_level=None)
        try:
            reader.execute("BEGIN")
            result = measure(reader, policy, armed)
            reader.execute("COMMIT")
        finally:
            reader.close()
        if isinstance(result, Armed):
            front = result.front
            continue
        if result is None:
            return False
        with ix.write_now() as db:
            return settle(db, armed, result)
    return False
