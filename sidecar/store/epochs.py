"""Epochs: the cut condition, cuts, schedule windows and cut requests.

An epoch is an immutable snapshot. In snapshot mode it is a range of the admission order: the
samples with ``first_sample <= id <= max_sample`` (the newest samples that fit the epoch budget
at the cut), so a cut writes one row whatever the number of samples. It stays the same set because
ids only grow (a later sample gets a higher id) and eviction never takes a sample inside a live
epoch's range. A schedule-mode window is not a range of the admission order but a range of the
sampling order: its row records the window's ends and ``max_sample`` (:mod:`.windows`), plus a row
per cached sample of a key a relist dropped inside those ends. Epochs cut by schema 2 or 3 (and a
window bounds cannot describe) are their ``epoch_samples`` rows (NULL ``first_sample`` and
``lo_key``), removed when the epoch retires.
Epoch numbers only grow: a cut below the newest epoch is refused, and an existing epoch is
returned as is, so several ranks asking for the same N get one snapshot. "The newest" counts the
high-water mark kept outside the index (:mod:`.hwm`) too, so a number published once is never cut
again with other content, even after the index lost it (a rolled-back write-ahead log, a reset).

:func:`cut_ready` is the one cut condition: the FUSE view's lookups, the sampler's timer and queued
requests, and the supervisor's readiness all ask it.

Beside it: :mod:`.epochnumbers` (the numbers a cut may take), :mod:`.epochfiles` (the live epochs
and each epoch's files), :mod:`.epochpins` (reads that pin epochs, retirement) and :mod:`.epochdiff`
(what an epoch adds to and leaves out of the one before: the table's new and left out). The store's
facade and its other parts call those as ``epochs.<name>``, so the names are imported here too.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

from epochfs.sidecar.store import ahead, epochdiff, hwm, memberfiles
from epochfs.sidecar.store.catalog import first_round_pending
from epochfs.sidecar.store.epochfiles import files as files
from epochfs.sidecar.store.epochfiles import iter_files as iter_files
from epochfs.sidecar.store.epochfiles import listing as listing
from epochfs.sidecar.store.epochnumbers import check_number, next_epoch
from epochfs.sidecar.store.epochnumbers import drop_out_of_range as drop_out_of_range
from epochfs.sidecar.store.epochpins import disk_full
from epochfs.sidecar.store.epochpins import opened_epochs as opened_epochs
from epochfs.sidecar.store.epochpins import record_read as record_read
from epochfs.sidecar.store.epochpins import record_reads as record_reads
from epochfs.sidecar.store.epochpins import retire as retire
from epochfs.sidecar.store.index import Index, is_busy
from epochfs.sidecar.store.records import Policy
from epochfs.sidecar.store.snapshot import cut_budget, holds_samples, newest_within
from epochfs.sidecar.store.stats import known_at_cut, read_stats
from epochfs.sidecar.store.windows import Span, members, record, scan
from epochfs.sidecar.store.windows import window as window  # the store's schedule_window asks here

log = logging.getLogger("epochfs.store")


def at_least(db: sqlite3.Connection, count: int) -> bool:
    """At least ``count`` samples are complete (reads at most ``count`` rows, not the table)."""
    row = db.execute("SELECT COUNT(*) FROM (SELECT 1 FROM samples LIMIT ?)", (count,)).fetchone()
    return int(row[0]) >= count


def condition_holds(db: sqlite3.Connection, policy: Policy, n: int) -> tuple[bool, Span | None]:
    """Whether epoch n would hold at least ``min_samples`` and, in schedule mode, its window is
    complete (the first epoch in snapshot mode also waits, boundedly, for the listing's first
    round); and that window as read for it, which a cut records rather than reading it again.

    What the epoch would hold, not what the cache holds: a full cache of 16 samples whose epoch
    budget holds 12 cut epoch 0 with 12 under ``--min-samples 14``, and a window's look-ahead
    counted the next window's samples too. At 1 as well: on a volume that holds nothing more the
    budget is 1 byte (docs/sampler.md, "Disk space"), and an epoch of no sample from a cache of
    hundreds reads as 0 files without an error (:func:`.snapshot.cut_budget`)."""
    least = max(1, policy.min_samples)
    if not at_least(db, least):
        return False, None
    if policy.schedule is None:
        if not holds_samples(db, policy, least):
            return False, None
        return not first_round_pending(db), None
    if db.execute("SELECT 1 FROM meta WHERE name='listing_complete'").fetchone() is None:
        return False, None  # windows are positions in the order of a complete listing
    span = ahead.fetch(db, policy, n) or scan(db, policy, n)  # one row when measured ahead
    return span.missing == 0 and span.cached >= least, span


def _newest(db: sqlite3.Connection) -> int | None:
    row = db.execute("SELECT MAX(n) FROM epochs").fetchone()[0]
    return None if row is None else int(row)


def _top(ix: Index, db: sqlite3.Connection) -> int | None:
    """The highest number that may not be cut again: the index's newest epoch, or the high-water
    mark when the index lost published epochs."""
    return hwm.floor(hwm.read(ix.path.parent), _newest(db))


def cut_ready(ix: Index, policy: Policy, n: int) -> bool:
    """True when ``epoch-n`` can be served now: it is live, or it is above the newest epoch and its
    cut condition holds. A read, but for the next epoch's window in schedule mode: its facts are
    measured ahead here when they are not yet (:func:`.ahead.prepare`: two short writes that wait
    only briefly for the write lock), so that this poll and the next ones, and the cut, read one
    row instead of the window."""
    if policy.schedule is not None and n == next_number(ix):
        ahead.prepare(ix, policy, n)
    with ix.read() as db:
        row = db.execute("SELECT retired FROM epochs WHERE n=?", (n,)).fetchone()
        if row is not None:
            return not int(row[0])
        top = _top(ix, db)
        if top is not None and n <= top:
            return False
        return condition_holds(db, policy, n)[0]


def next_window_adds(ix: Index, policy: Policy) -> bool | None:
    """Schedule mode: whether the next epoch's window, cut now, would hold a sample the newest
    epoch does not (:func:`.epochdiff.window_adds`); None in snapshot mode. The sampler's timer
    asks it: a window grows over samples fetched ahead of it, so "no sample arrived since the last
    cut" did not mean "the next epoch is the newest one again" (the timer stopped cutting while
    the schedule's windows still grew). True where the cut itself decides cheaply (no epoch yet,
    an incomplete listing). The window's facts are measured ahead as for :func:`cut_ready` (one
    row to read), else read by a scan, as the cut would."""
    if policy.schedule is None:
        return None
    n = next_number(ix)
    ahead.prepare(ix, policy, n)
    with ix.read() as db:
        newest = _newest(db)
        listed = db.execute("SELECT 1 FROM meta WHERE name='listing_complete'").fetchone()
        if newest is None or listed is None:
            return True
        span = ahead.fetch(db, policy, n) or scan(db, policy, n)
        return epochdiff.window_adds(db, span, newest)


def _listed(db: sqlite3.Connection, n: int) -> tuple[int, int]:
    """(samples, bytes) of epoch n listed row by row in ``epoch_samples``."""
    count, total = db.execute("SELECT COUNT(*), COALESCE(SUM(s.size), 0) FROM epoch_samples e "
                              "JOIN samples s ON s.id = e.sample WHERE e.epoch=?", (n,)).fetchone()
    return int(count), int(total)


def _window_members(db: sqlite3.Connection, n: int, span: Span | None) -> tuple[int, int]:
    """(samples, bytes) of epoch n, just recorded by its bounds from ``span``: the window's cached
    keys' samples, which the scan counted. Bounds are recorded only without strays, so each of
    those samples lies between the ends, and every other sample between them is excluded
    (:func:`.windows.record`): the members read back along the rank index are the same set, and
    the window is not read a second time (0.06-0.19 s at 100k keys)."""
    return (span.cached, span.cached_bytes) if span is not None else members(db, n)


def _insert_epoch(db: sqlite3.Connection, policy: Policy, n: int, span: Span | None = None) -> None:
    """One ``epochs`` row: a range of the admission order (snapshot mode) or a window's bounds
    (schedule mode, with its few ``epoch_excluded`` rows, or its ``epoch_samples`` rows when
    bounds cannot describe it: :func:`.windows.record`). ``span``: the window as the cut
    condition read it in this transaction (None: read it here)."""
    now = time.time()
    max_all = int(db.execute("SELECT COALESCE(MAX(id), 0) FROM samples").fetchone()[0])
    first: int | None = None
    bounds: tuple[int | None, str | None, int | None, str | None] = (None, None, None, None)
    if policy.schedule is None:
        # From the running totals (:mod:`.snapshot`), not a count of the epoch's rows.
        first, samples, nbytes = newest_within(db, cut_budget(db, policy), max_all)
    else:
        span = span or ahead.fetch(db, policy, n) or scan(db, policy, n)
        bounds = record(db, span, n, max_all) or bounds
    ahead.forget(db, n)  # used, or passed by this cut
    db.execute(
        "INSERT INTO epochs(n, cut_at, samples, bytes, new, evicted, max_sample, last_read, "
        "first_sample, lo_rank, lo_key, hi_rank, hi_key, listed, estimated) "
        "VALUES(?,?,0,0,0,0,?,?,?,?,?,?,?,?,?)",
        (n, now, max_all, 0.0, first, *bounds, *known_at_cut(db)),
    )
    if first is None:
        samples, nbytes = _window_members(db, n, span) if bounds[1] is not None else _listed(db, n)
    new, evicted = epochdiff.new_and_left_out(db, n, samples, span)
    db.execute("UPDATE epochs SET samples=?, bytes=?, new=?, evicted=? WHERE n=?",
               (samples, nbytes, new, evicted, n))
    db.execute("DELETE FROM cut_requests WHERE n <= ?", (n,))


def cut(ix: Index, policy: Policy, n: int | None = None, *, force: bool = False,
        far: bool = False) -> int | None:
    """Cut epoch ``n`` (default newest + 1) if its condition holds; returns n, else None.

    An existing epoch is returned as is. ``n`` at or below the newest epoch that does not exist is
    refused with ValueError: epochs are only ever added at the top. ``force`` (``epochfs cut
    --force``) skips the condition, ``min_samples`` included; an epoch still needs one sample.
    ``n`` above :data:`~.hwm.MAX_EPOCH` is refused, and more than
    :data:`~.epochnumbers.MAX_JUMP` above the next epoch unless ``far`` (``epochfs cut --far``, an
    operator's decision).
    """
    return _cut(ix, policy, n, force=force, far=far)[0]


def _cut(ix: Index, policy: Policy, n: int | None, *, force: bool, far: bool = False,
         reader: bool = False) -> tuple[int | None, bool]:
    """:func:`cut`, and whether this call made the epoch (False when it existed already).
    ``reader``: a cut on lookup, which waits only briefly for the write lock (see
    :meth:`Index.write_now`).

    The high-water mark is raised before the commit (``cutting``) and after it (``published``):
    see :mod:`.hwm` for why both. The members file goes in place before the commit (:mod:`.memberfiles`)."""
    root = ix.path.parent
    with memberfiles.at_cut(root) as keep, (ix.write_now() if reader else ix.write()) as db:
        newest = _newest(db)
        top = hwm.floor(hwm.read(root), newest)
        if n is None:
            n = next_epoch(top)
        check_number(n, next_epoch(top), far=far)
        exists = db.execute("SELECT retired FROM epochs WHERE n=?", (n,)).fetchone()
        if exists is not None:
            if int(exists[0]):
                raise ValueError(f"epoch {n} has retired")
            return n, False
        if newest is not None and n < newest:
            raise ValueError(f"epoch {n} is below the newest epoch {newest} and was never cut")
        if top is not None and n <= top:
            raise ValueError(f"epoch {n} may have been published before the index lost it "
                             f"(high-water mark {top}); epochs continue at {top + 1}")
        holds, span = condition_holds(db, policy, n)
        if not holds and (not force or not _holds_one(db, policy)):
            return None, False
        hwm.raise_to(root, cutting=n)
        _insert_epoch(db, policy, n, span)
        keep(db, n)
        ix.bump("cuts_total", 1)
    try:
        with ix.write_now() if reader else ix.write():
            hwm.raise_to(root, published=n)
    except (OSError, sqlite3.OperationalError) as e:
        # The cut stands; only a later loss of the index could then re-use n (see hwm.floor).
        log.warning("epoch %d is cut, but its high-water mark could not be recorded: %s", n, e)
    return n, True


def _holds_one(db: sqlite3.Connection, policy: Policy) -> bool:
    """What ``--force`` still asks: the epoch holds a sample (in snapshot mode, the newest fits
    the budget the cut uses, which a volume that holds nothing more sets to 1 byte)."""
    return holds_samples(db, policy, 1) if policy.schedule is None else at_least(db, 1)


def request_cut(ix: Index, policy: Policy, n: int) -> bool:
    """A reader looked up epoch ``n``: True when it can be served now (cut if needed;
    :func:`request_cut_made` also says whether this call made the cut)."""
    return request_cut_made(ix, policy, n)[0]


def request_cut_made(ix: Index, policy: Policy, n: int) -> tuple[bool, bool]:
    """A reader looked up epoch ``n``: (it can be served now, this call cut it). The second is
    what a requester reports as its wait (``epochfs_cut_wait_seconds``): eight ranks asking for
    one epoch are one cut, whoever found it live.

    Only the next epoch (newest + 1) is ever cut or queued for a lookup: a stray lookup far ahead
    (``stat epoch-999999``) answers no and leaves nothing behind, so it can neither make the
    epochs below it impossible nor cost a cut or a row. A jump ahead is for an explicit cut
    (:func:`cut`: ``epochfs cut --epoch N``). A miss costs one read, plus one write the first
    time the next epoch is asked for before its condition holds.
    """
    with ix.read() as db:
        row = db.execute("SELECT retired FROM epochs WHERE n=?", (n,)).fetchone()
        if row is not None:
            return not int(row[0]), False
        if n != next_epoch(_top(ix, db)):
            return False, False
        ready = condition_holds(db, policy, n)[0]
        queued = db.execute("SELECT 1 FROM cut_requests WHERE n=?", (n,)).fetchone() is not None
    try:
        if ready:
            try:
                if _cut(ix, policy, n, force=False, reader=True)[0] is not None:
                    return True, True
            except ValueError:
                return False, False
        if not queued:
            with ix.write_now() as db:
                db.execute("INSERT OR IGNORE INTO cut_requests(n, requested_at) VALUES(?, ?)",
                           (n, time.time()))
    except (sqlite3.OperationalError, OSError) as e:
        if is_busy(e):
            # The sampler holds the write lock (a long transaction): "not yet", at once; the
            # reader's next lookup asks again. Waiting here would stall a FUSE request.
            log.info("epoch %d: the index is busy; the lookup answers not yet", n)
            return False, False
        if not disk_full(e):
            raise
        # The index (or the high-water mark) cannot grow: the epoch is not there yet (ENOENT,
        # asked again later), which a reader survives; an error here would reach it as EIO.
        _refused_full(ix, n, e)
        return False, False
    with _said_lock:
        _full.pop(str(ix.path.parent), None)  # written, or queued before: the volume took it
    return False, False


FULL_SAY_EVERY = 60.0
"""Seconds between two warnings of lookups refused on a full volume (every trainer's poll is one)."""

_full: dict[str, str] = {}
"""Per cache folder: why the last request for a cut could not be recorded (the volume full)."""
_full_said: dict[str, float] = {}
"""Per cache folder: when that was last logged (monotonic)."""


def _refused_full(ix: Index, n: int, e: BaseException) -> None:
    """A request for epoch ``n`` the full volume refused: kept for :func:`refused_full` (the cut
    request's answer says it) and logged at most once a minute (62 lines in 18 s otherwise)."""
    key, now = str(ix.path.parent), time.monotonic()
    with _said_lock:
        _full[key] = str(e)
        say = now - _full_said.get(key, float("-inf")) >= FULL_SAY_EVERY
        if say:
            _full_said[key] = now
    if say:
        log.warning("cannot cut epoch %d now: the cache's volume is full (%s); lookups answer not yet "
                    "until room returns (said at most once a minute)", n, e)


def refused_full(root: object) -> str | None:
    """Why this process's last request for a cut of the cache at ``root`` could not be recorded
    (its volume full: the error), or None when it was."""
    with _said_lock:
        return _full.get(str(root))


def pending_cuts(ix: Index) -> list[tuple[int, float]]:
    """Queued cut requests (epoch, time requested), lowest first."""
    return [(int(n), float(t)) for n, t in ix.query("SELECT n, requested_at FROM cut_requests ORDER BY n")]


def process_cut_requests(ix: Index, policy: Policy) -> list[tuple[int, float]]:
    """Cut every queued epoch whose condition now holds; returns (epoch, seconds waited) for the
    cuts this call made (the sampler's admitter and its loop both call it: a wait is counted once).
    In schedule mode it then has the next epoch's window measured ahead (:func:`.ahead.prepare`),
    so the sampler does it after each cut and keeps it exact as samples land."""
    done = []
    for n, requested in pending_cuts(ix):
        if n > next_number(ix):
            # Queued far ahead (by an older epochfs): dropped, never cut on a lookup's word.
            with ix.write() as db:
                db.execute("DELETE FROM cut_requests WHERE n=?", (n,))
            continue
        try:
            result, made = _cut(ix, policy, n, force=False)
        except ValueError:
            with ix.write() as db:
                db.execute("DELETE FROM cut_requests WHERE n=?", (n,))
            continue
        if result is None:
            break
        if made:
            done.append((n, time.time() - requested))
    if policy.schedule is not None:
        # The next window's facts, measured ahead of its cut (once per epoch; a look otherwise).
        ahead.prepare(ix, policy, next_number(ix))
    if not done:
        _say_never(ix, policy)
    return done


SAY_EVERY = 1.0
"""Seconds between the sampler's looks at whether the first cut can never come (:func:`_say_never`)."""

_said: dict[str, tuple[float, str]] = {}
"""Per index path: when :func:`_say_never` last looked, and the warning it last logged."""
_said_lock = threading.Lock()
"""Guards :data:`_said` (the sampler's threads look at once)."""


def _say_never(ix: Index, policy: Policy) -> None:
    """Log, once per warning, that the next epoch can never be cut (``--min-samples`` above what
    the listing, the epoch budget or the window holds): the warning ``epochfs status``,
    ``/readyz`` and the torch client show (:func:`.stats.read_stats`: ``first_epoch``, then
    ``next_epoch``), in the sampler's log too, where its backpressure line alone said "waiting for
    a cut" that cannot come. The sampler calls this several times a second: a look at most every
    :data:`SAY_EVERY` s."""
    key, now = str(ix.path), time.monotonic()
    with _said_lock:  # the look is claimed first: two threads in one second logged it twice
        looked, said = _said.get(key, (float("-inf"), ""))
        if now - looked < SAY_EVERY:
            return
        _said[key] = (now, said)
    stats = read_stats(ix, policy)
    doc = stats.first_epoch or stats.next_epoch or {}
    warning = doc.get("warning") or ""
    with _said_lock:
        said = _said.get(key, (now, ""))[1]
        _said[key] = (now, warning)
    if warning and warning != said:
        log.warning("epoch %d: %s", doc.get("epoch", 0), warning)


def newest(ix: Index) -> int | None:
    row = ix.query("SELECT MAX(n) FROM epochs")[0][0]
    return None if row is None else int(row)


def next_number(ix: Index) -> int:
    """The number the next cut gets: above the newest epoch and above the high-water mark."""
    with ix.read() as db:
        return next_epoch(_top(ix, db))

