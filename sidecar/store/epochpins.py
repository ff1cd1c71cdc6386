"""Which epochs stay: the newest ``keep_epochs`` and those read recently, the reads that pin them,
and the retirement of the rest.

Apart from :mod:`.epochs` (cuts) because it runs on another clock: the sampler retires on every
tick and readers record reads as they go, neither of them cutting anything.
"""

from __future__ import annotations

import errno
import logging
import math
import sqlite3
import time
from collections.abc import Sequence

from epochfs.sidecar.store import heldback, memberfiles, publisherlock
from epochfs.sidecar.store.index import Index, is_busy
from epochfs.sidecar.store.records import Policy
from epochfs.sidecar.store.windows import IN_WINDOW

log = logging.getLogger("epochfs.store")

RETIRE_GRACE = Policy.retire_grace
"""Seconds a retired epoch's samples outlive its retirement by default (``--retire-grace``:
:attr:`.Policy.retire_grace`): :mod:`.eviction` keeps what it held until then. Why: the FUSE view
answers from a snapshot of the live epochs that its refresher reads again every ``refresh_interval``
(0.5 s: :class:`~epochfs.fuse.operations.EpochOperations`), so for up to that long after the commit
it still lists, looks up and opens the epoch, and a reader that got in then must find every file
with its bytes. Ten times that interval, so a late refresh (a busy machine, a store read waiting for
the write lock) is covered too, and short enough that the sampler waits (backpressure) for a few
seconds at most when only a just-retired epoch has room to give. For every other purpose (listings,
pins, stats, cuts) the epoch is retired at once; its ``epochs.retired`` holds the time it retired
(whole seconds, rounded up; 0: live), and its ``epoch_samples``/``epoch_excluded`` rows, which
eviction reads, go once the grace is over. A shorter grace turns a full cache over sooner (each turn
may wait for it); below ~2 s a loaded node's view may still show an epoch whose files are gone (a
reads may fail)."""

HOLDS = "(retired = 0 OR retired BETWEEN ? AND ?)"
"""SQL over ``epochs``: an epoch whose samples eviction keeps, live or
retired within :data:`RETIRE_GRACE`; its arguments are :func:`grace_bounds`."""


def grace_bounds(now: float, grace: float) -> tuple[float, float]:
    """The arguments of :data:`HOLDS` at ``now``: retired after ``now - grace`` (the policy's
    :attr:`~.Policy.retire_grace`). A stamp more than the grace ahead of ``now`` (the clock stepped
    back) holds nothing: it would pin the cache for as long as the clock is behind, long after
    every view refreshed."""
    return now - grace + 1e-9, now + grace


def retired_stamp(now: float) -> int:
    """What ``epochs.retired`` records for an epoch retired at ``now``: the second after it, so
    the grace is never shorter than the policy's, and never 0 (which means live)."""
    return max(1, math.ceil(now))


def disk_full(e: BaseException) -> bool:
    """Whether ``e`` says the disk is full: the best-effort writes (a read's record here, a cut
    request in :mod:`.epochs`) give way on it rather than fail a reader."""
    if isinstance(e, OSError):
        return e.errno in (errno.ENOSPC, errno.EDQUOT)
    return getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(e)


def live(db: sqlite3.Connection, policy: Policy, now: float) -> list[int]:
    """Epochs that stay visible: the newest ``keep_epochs`` and those read within the in-use window."""
    rows = db.execute("SELECT n, last_read FROM epochs WHERE retired=0 ORDER BY n DESC").fetchall()
    return [int(n) for i, (n, last_read) in enumerate(rows)
            if i < policy.keep_epochs or now - float(last_read) < policy.in_use_seconds]


def retire(ix: Index, policy: Policy, *, now: float | None = None) -> list[int]:
    """Retire the epochs that are neither among the newest K nor read recently.

    The sampler calls this on its own schedule (every tick), not only when it must evict, so with
    a cache that is not full epochs beyond ``keep_epochs`` still go once out of their in-use
    window. A look first, under a read: the write lock is taken only when something is due.

    Nothing retires while the cache has a folder view whose publisher is not running (for at most
    :data:`~.publisherlock.GONE_AFTER` seconds): only the publisher takes a retired epoch's folder
    down, so its objects must not go before (:mod:`.publisherlock`).

    A retired epoch's samples stay for :data:`RETIRE_GRACE` (eviction treats it as a holder until
    then), and so do its ``epoch_samples``/``epoch_excluded`` rows: the first call after the grace
    deletes them."""
    if not publisherlock.may_release(ix.path.parent):
        return []
    heldback.holding(ix)  # a publisher back (or no folder view): keys held back are fetched again
    now = time.time() if now is None else now
    with ix.read() as db:
        due = db.execute("SELECT COUNT(*) FROM epochs WHERE retired=0").fetchone()[0] > len(
            live(db, policy, now))
        stale = bool(_past_grace(db, now, policy.retire_grace))
    if not due and not stale:
        return []
    with ix.write() as db:
        _forget_rows(db, now, policy.retire_grace)
        if not due:
            return []
        keep = set(live(db, policy, now))
        gone = [int(n) for (n,) in db.execute("SELECT n FROM epochs WHERE retired=0").fetchall()
                if int(n) not in keep]
        db.executemany("UPDATE epochs SET retired=? WHERE n=?", [(retired_stamp(now), n) for n in gone])
        # Before the commit: a members file must never outlive its epoch (its objects may be
        # evicted once its grace is over), and one removed for a retirement that then fails is
        # written again.
        memberfiles.remove(ix.path.parent, gone)
    return gone


def in_grace(ix: Index, policy: Policy, *, now: float | None = None) -> bool:
    """Whether an epoch retired within ``policy``'s retire grace still holds its samples from
    eviction: the room they take comes free once the grace is over, so a full cache waits."""
    lo, hi = grace_bounds(time.time() if now is None else now, policy.retire_grace)
    with ix.read() as db:
        return db.execute("SELECT 1 FROM epochs WHERE retired != 0 AND retired BETWEEN ? AND ? LIMIT 1",
                          (lo, hi)).fetchone() is not None


def _past_grace(db: sqlite3.Connection, now: float, grace: float) -> list[int]:
    """Retired epochs whose grace is over (or whose stamp lies beyond it: :func:`grace_bounds`)
    that still have ``epoch_samples``/``epoch_excluded`` rows."""
    lo, hi = grace_bounds(now, grace)
    return [int(n) for (n,) in db.execute(
        "SELECT n FROM epochs WHERE retired != 0 AND (retired < ? OR retired > ?) "
        "AND (EXISTS (SELECT 1 FROM epoch_samples x WHERE x.epoch = epochs.n) "
        "OR EXISTS (SELECT 1 FROM epoch_excluded x WHERE x.epoch = epochs.n))", (lo, hi)).fetchall()]


def _forget_rows(db: sqlite3.Connection, now: float, grace: float) -> None:
    """Delete the rows of the epochs :func:`_past_grace` names (in a write): eviction reads them
    while the epoch is in its grace, nothing after."""
    for n in _past_grace(db, now, grace):
        db.execute("DELETE FROM epoch_samples WHERE epoch=?", (n,))
        db.execute("DELETE FROM epoch_excluded WHERE epoch=?", (n,))


REFUSED_WARN_EVERY = 60.0
"""Seconds between two warnings that a read could not be recorded now (a full volume, the lock
held): the renewals of claimed epochs ask every second; the others go to the debug log."""
_refused_warned = [float("-inf")]

READ_AHEAD_LIMIT = 300.0
"""Seconds ahead of the clock a recorded read may be dated and still stand against a later
record dated earlier: the callers date reads at most about a minute ahead (a client's report, a
cut request's, the mount's held folders), so a record further ahead comes from a clock that
stepped back, and keeping it would pin its epoch for as long."""


def record_read(ix: Index, n: int, *, now: float | None = None) -> bool:
    """Note that epoch ``n`` is being read, which keeps it pinned for ``in_use_seconds``; False
    when it could not be written now (the caller keeps it for its next try)."""
    return record_reads(ix, [n], now=now)


def record_reads(ix: Index, ns: Sequence[int], *, now: float | None = None) -> bool:
    """:func:`record_read` of several epochs in one write.

    Best effort on a full disk and while the sampler holds the write lock (a reader waits only
    :data:`~.index.READER_WAIT_MS` for it): the epoch stays pinned by its last record (and by being
    among the newest), and the reader must not see an error for a bookkeeping write."""
    if not ns:
        return True
    when = time.time() if now is None else now
    # A later record stands: a read dated ahead (a client's report, a cut request) is not cut
    # short by a read dated now; one further ahead of this one than any caller dates (the clock
    # stepped back) is replaced.
    latest = when + READ_AHEAD_LIMIT
    try:
        with ix.write_now() as db:
            db.executemany(
                "UPDATE epochs SET last_read = CASE WHEN last_read > ? AND last_read <= ? "
                "THEN last_read ELSE ? END WHERE n=?", [(when, latest, when, int(n)) for n in ns])
    except sqlite3.OperationalError as e:
        if not disk_full(e) and not is_busy(e):
            raise
        loud = time.monotonic() - _refused_warned[0] >= REFUSED_WARN_EVERY
        if loud:
            _refused_warned[0] = time.monotonic()
        log.log(logging.WARNING if loud else logging.DEBUG, "cannot record a read of epoch%s %s now: %s",
                "s" if len(ns) > 1 else "", ", ".join(map(str, ns)), e)
        return False
    return True


HOLDERS = (
    "SELECT s.sid, e.n FROM samples s JOIN epochs e ON e.retired = 0 AND ("
    "(e.first_sample IS NOT NULL AND s.id BETWEEN e.first_sample AND e.max_sample) "
    f"OR (e.first_sample IS NULL AND e.lo_key IS NOT NULL AND {IN_WINDOW}) "
    "OR (e.first_sample IS NULL AND e.lo_key IS NULL AND EXISTS "
    "(SELECT 1 FROM epoch_samples x WHERE x.epoch = e.n AND x.sample = s.id))) "
    "WHERE s.sid IN ({})"
)
"""SQL: (sample id, live epoch holding it) for the samples named (``{}``: their placeholders), by
the three forms an epoch takes (a range of the admission order, a schedule window by its bounds,
rows), as :mod:`.epochfiles` lists them."""

HOLDERS_CHUNK = 500
"""Sample ids asked at a time (SQLite's limit on a statement's arguments is 999 in old builds)."""


def holders(db: sqlite3.Connection, sids: Sequence[str]) -> dict[str, set[int]]:
    """The live epochs holding each of the samples ``sids`` (object file names); a name that is no
    sample's (a stray file, an undecodable name: sample ids are hex) is left out."""
    names = sorted({sid for sid in sids if sid.isascii()})
    found: dict[str, set[int]] = {}
    for i in range(0, len(names), HOLDERS_CHUNK):
        part = names[i:i + HOLDERS_CHUNK]
        for sid, n in db.execute(HOLDERS.format(",".join("?" * len(part))), part):
            found.setdefault(str(sid), set()).add(int(n))
    return found


def epochs_read(holding: dict[str, set[int]], kept: set[int]) -> set[int]:
    """The epochs a reader that opened these samples reads (``holding``: each sample's live
    holders; ``kept``: the newest ``keep_epochs``, pinned anyway).

    A sample a kept epoch holds needs no record (its file stays). The others are covered greedily:
    the epoch holding most of them, then the one holding most of the rest (ties: the newest), so a
    reader of an old epoch names that epoch and not a newer one it shares files with (which would
    keep that epoch's own samples for nobody), and two readers of two epochs name both."""
    left = [held for held in holding.values() if held and not held & kept]
    chosen: set[int] = set()
    while left:
        counts: dict[int, int] = {}
        for held in left:
            for n in held:
                counts[n] = counts.get(n, 0) + 1
        best = max(counts, key=lambda n: (counts[n], n))
        chosen.add(best)
        left = [held for held in left if best not in held]
    return chosen


def opened_epochs(ix: Index, policy: Policy, sids: Sequence[str]) -> set[int]:
    """:func:`epochs_read` of the samples ``sids``, as the index holds them now (one read)."""
    with ix.read() as db:
        holding = holders(db, sids)
        newest = db.execute("SELECT n FROM epochs WHERE retired=0 ORDER BY n DESC LIMIT ?",
                            (max(policy.keep_epochs, 0),)).fetchall() if holding else []
    return epochs_read(holding, {int(n) for (n,) in newest})
