"""The fetch order: which catalog key to download next.

Snapshot mode: a cursor over the sampling order that starts a new pass when it reaches the end, so
a dataset larger than the cache streams through it. A restart goes on from the cursor the last run
recorded (:mod:`epochfs.sidecar.store.fetchpass`), not the front: stepping over a million cached
keys there took seconds, and the keys admitted and evicted since look like keys never fetched.
Schedule mode: the missing keys of the next epoch's window first, then those of the window after
it (a look-ahead), never keys in front of the window, which the epoch budget has trimmed. Keys
already busy (in flight, waiting for admission, kept through an outage) are passed over; the
caller says which through ``busy``.

While the listing runs (``listing`` says so), snapshot mode draws from what is listed so far: the
cursor walks the rank order of the listed keys, and a key listed later with a rank behind the
cursor is **owed** to the pass: owed keys are fetched, lowest rank first, before the cursor moves
on (:func:`.catalog.refill`; while the listing's skew caps the walk, they wait with it), never
left for the next pass; once the listing is complete the cache
converges to exactly the first keys of the whole order. The walk is paced while the listing runs
(:meth:`FetchOrder._pace`): nothing until the listing's first round has a page of every folder,
then no faster than :data:`LEAD` times a fair sample's share of the estimated whole and no
further than a fair sample of the listing's skew allows (:func:`skew_cap`), so the first keys
listed do not make up the early epochs (docs/sampler.md, "A fair sample while the listing
runs"). Schedule mode waits for the first complete listing: its windows are positions in the order
of the whole catalog, which move while keys are still arriving.
"""

from __future__ import annotations

import heapq
import logging
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from epochfs.sidecar.sampler.earlypicks import EarlyPicks
from epochfs.sidecar.sampler.pace import LEAD, PACE_START, spread_factor, walk_cap
from epochfs.sidecar.store import Candidate, Meta, Store
from epochfs.sidecar.store.stats import FIRST_ROUND_WAIT, awaits_first_round

log = logging.getLogger("epochfs.sampler")

REFILL = 512
"""Candidates read from the catalog at a time."""
LISTING_REFILL = 32
"""The same while a listing adds keys: keys listed behind the cursor are found at the next refill,
so the candidates queued ahead of them are few."""
EXHAUSTED_WAIT = 1.0
"""Seconds before a catalog found empty of candidates is asked again."""
LISTING_WAIT = 0.05
"""The same while a listing is adding keys (the first pages must be fetched at once)."""
OWED_SCAN = 4096
"""Rows looked at for owed keys in one refill at most (in the order they were listed)."""
MAX_OWED = 200_000
"""Owed keys held in memory at most (a heap by rank, ~150 bytes each); past it the listing's
newer rows wait to be looked at."""
OFFERED_EVERY = 1.0
"""Seconds between records of where the pass is: how far it has offered the catalog's rows and its
cursor (a restart goes on from there: at most this much of the walk and of the listing is looked
at twice). As often, the catalog is asked whether rows were added since the last refill."""


class FetchOrder:
    """Candidates in sampling order, read from the store's catalog a batch at a time."""

    def __init__(self, *, store: Store, schedule_mode: bool, busy: Callable[[str], bool],
                 inflight: Callable[[], int], listing: Callable[[], bool] | None = None) -> None:
        self.store = store
        self.schedule_mode = schedule_mode
        self._busy = busy
        self._inflight = inflight
        self._queue: deque[tuple[int, Candidate]] = deque()
        self._owed: list[tuple[int, str, int, Candidate]] = []
        """Snapshot mode: keys owed to the pass (listed after its cursor passed their rank),
        a heap by rank: the lowest first, so what is fetched of them is a uniform sample of
        them whatever order they were listed in."""
        self._handed = 0
        """Keys handed out in this pass (the pace's count)."""
        self._owed_left: int | None = None
        """Owed keys the listing's skew lets through until the next refill (None: any): while the
        listing is lopsided the cap (:func:`skew_cap`) holds them as it holds the walk. They stay
        owed, fetched first once the skew falls or the listing ends. (Let through, they came
        from wherever the listing was reading then: a flat bucket of 1M keys, its skew at
        0.47-0.51, went from 71 samples to 277 in 10 s, all from the listed keys 0.3-0.39 from
        the deciles' mix, and its epochs were 2.3-2.4x a random sample's distance.)"""
        self._cursor: int | None = None if schedule_mode else store.resume_rank()
        """Snapshot mode: the highest rank offered in this pass; a restart goes on where the last
        run was."""
        self._offered = self._offered_at_start() if not schedule_mode else 0
        """Snapshot mode: every catalog row up to this rowid was offered in this pass."""
        self._recorded: tuple[int, int | None] | None = None
        """The pass's position last recorded (offered rowid, cursor)."""
        self._recorded_at = time.monotonic()
        self._out: dict[str, tuple[int, int | None]] = {}
        """Snapshot mode: keys handed out whose downloads may not have ended, as (rank, rowid of an
        owed key; None for the walk's): a restart must offer them again, so the recorded position
        stays behind them (:meth:`_record`)."""
        self._last_out: str | None = None
        """The key handed out last: the loop holds it while it waits for room, not yet busy."""
        self.owed = 0
        """Snapshot mode: keys fetched as owed so far (listed after the cursor passed them)."""
        self._windows: dict[int, tuple[int, int]] = {}
        self._target = -1
        self.lookahead = False
        """Schedule mode: the candidates come from the window after the next epoch's."""
        self.passes = 0
        self._exhausted: tuple[float, bool] | None = None
        """When the catalog was last found with nothing to offer, and whether a listing ran then."""
        self._listing: Callable[[], bool] = listing or (lambda: False)
        """True while a listing adds keys to the catalog (the listing's ``running``)."""
        self._known: Mapping[str, Any] = {}
        """What the listing knew at the last paced refill (:meth:`_pace`)."""
        self.early = EarlyPicks(store)
        """Snapshot mode: keys drawn by their folder's estimated share while the listing runs,
        handed out before the walk's (:mod:`.earlypicks`)."""

    def next(self) -> Candidate | None:
        """The next key to fetch, or None when the catalog has nothing left to fetch right now."""
        if not self.schedule_mode:
            self._record()
        while True:
            if self._queue and self.stale():
                self._queue.clear()
            if len(self._queue) > LISTING_REFILL and not self.schedule_mode and self._listing():
                # A listing (a relist) began since the queue was filled: the keys it lists behind
                # the cursor are owed, found at the next refill (now), and from then on a refill
                # takes LISTING_REFILL walk keys at most: no more go before them (512 did). The
                # rows dropped lie above the cursor: the walk comes to them again.
                self._queue.clear()
            if self.early and (not self._listing() or self.store.meta(Meta.LISTING_COMPLETE) is not None):
                self.early.drop()  # the listing ended (its flag may lag its record by a poll)
            if self._owed_left != 0 and (picked := self.early.pop(self._busy, self._out)) is not None:
                self._handed += 1
                if self._owed_left is not None:
                    self._owed_left -= 1
                return self._hand_out(picked[1], picked[0], None)
            while self._owed and self._owed_left != 0:
                rank, _, rowid, cand = heapq.heappop(self._owed)
                if not self._busy(cand.key) and not self._fetched_early(cand.key):
                    self.owed += 1
                    self._handed += 1
                    if self._owed_left is not None:
                        self._owed_left -= 1
                    return self._hand_out(cand, rank, rowid)
            while self._queue:
                rank, cand = self._queue.popleft()
                if not self.schedule_mode and (self._cursor is None or rank > self._cursor):
                    self._cursor = rank  # an owed key lies behind the cursor: it stays
                if not self._busy(cand.key):
                    self._handed += 1
                    return self._hand_out(cand, rank, None)
            if not self._refill():
                return None

    def _fetched_early(self, key: str) -> bool:
        """Whether ``key``, owed, was fetched early (:mod:`.earlypicks`): an early key the listing
        committed after the last refill is found owed once the cursor passes its rank, read while
        its download ran and popped after it ended. One that is not cached (its download failed)
        is fetched as owed."""
        return key in self.early.keys and bool(self.store.cached_among([key]))

    def _hand_out(self, cand: Candidate, rank: int, rowid: int | None) -> Candidate:
        """Snapshot mode: ``cand``, kept in :attr:`_out` until its download ends."""
        if not self.schedule_mode:
            self._out[cand.key] = (rank, rowid)
            self._last_out = cand.key
        return cand

    def window_target(self) -> int | None:
        """Schedule mode: the epoch whose window the candidates now come from (None: a look-ahead
        into the window after it, or snapshot mode)."""
        return self._target if self.schedule_mode and not self.lookahead and self._target >= 0 else None

    def stale(self) -> bool:
        """Schedule mode: a cut or a request moved the target since the queue was filled."""
        return self.schedule_mode and self._schedule_target() != self._target

    def _window(self, n: int) -> tuple[int, int]:
        """Epoch ``n``'s window, computed once: its epoch budget is --capacity's for the whole run
        (schedule mode never records a budget the disk bounds: :meth:`.room.Room._record_capacity`)."""
        if n not in self._windows:
            self._windows[n] = self.store.schedule_window(n)
        return self._windows[n]

    def _schedule_target(self) -> int:
        """The epoch whose window is fetched first: the lowest requested one, else newest + 1."""
        target = self.store.next_epoch()  # above every number ever published (an index reset too)
        pending = self.store.pending_cuts()
        return max(target, pending[0][0]) if pending else target

    def _schedule_rows(self) -> list[tuple[int, Candidate]]:
        """The missing keys of the next epoch's window, then of the one after it.

        The next window is looked at only once this one is complete, and no further: a sample
        admitted after a cut cannot be evicted before the next one, so keys of later windows would
        take the room the next window needs.
        """
        target = self._target = self._schedule_target()
        self.lookahead = False
        if self.store.meta(Meta.LISTING_COMPLETE) is None:
            return []  # windows are positions in a complete listing's order
        for n in (target, target + 1):
            lo, hi = self._window(n)
            rows = self.store.window_candidates(lo, hi, limit=REFILL + self._inflight())
            if rows:
                # Until this window is complete (in flight counts as missing), look no further.
                self.lookahead = n != target
                return [r for r in rows if not self._busy(r[1].key)]
        return []

    def _offered_at_start(self) -> int:
        """Where to look for owed rows from: the last run's record, else (a new cache, or one
        from before the record) nowhere before the catalog's end unless the pass starts afresh."""
        recorded = self.store.offered_upto()
        if recorded is not None:
            return recorded
        return 0 if self._cursor is None else self.store.last_catalog_row()

    def _snapshot_rows(self) -> list[tuple[int, Candidate]]:
        listing = self._listing()
        room = MAX_OWED - len(self._owed)
        limit = LISTING_REFILL if listing else REFILL
        pace, left = self._pace() if listing else (None, None)
        if left is not None:
            limit = min(limit, left)  # the skew's cap, exactly: not a refill's worth past it
        self._owed_left = left
        got = self.store.refill(cursor=self._cursor, offered_upto=self._offered,
                                owed_limit=min(OWED_SCAN, room), walk_limit=0 if self._owed else limit,
                                walk_below=pace)
        for rank, rowid, cand in got.owed:
            heapq.heappush(self._owed, (rank, cand.key, rowid, cand))
        self._offered = got.offered_upto
        # Keys found owed now go first: the walk's rows read beside them wait for the next refill
        # (both counted against the cap's ``left``, they passed it together).
        rows = [] if got.owed else got.walk
        if listing and (pace is not None or left is not None) and pace != -(2**63):
            # The walk's rows and the scaled draw's keys together: no more than a listing's
            # refill; a top-up takes the place of owed keys under the cap (:mod:`.earlypicks`).
            rows = self.early.refill(rows, pace=pace, left=left, limit=limit, owed=len(self._owed),
                                     known=self._known, out=self._out, busy=self._busy,
                                     inflight=self._inflight())
        if (not rows and not got.owed and self._cursor is not None and not self._owed and pace is None
                and left is None):  # capped by the skew: the pass is not over, it waits
            self._cursor = None
            self._handed = 0
            got = self.store.refill(cursor=None, offered_upto=self._offered, owed_limit=0, walk_limit=limit)
            rows, self._offered = got.walk, got.offered_upto
            if [r for r in rows if not self._busy(r[1].key)]:
                self.passes += 1
                log.info("pass %d over the catalog done; starting again from the front "
                         "(samples evicted since are fetched again)", self.passes)
        return rows

    def _pace(self) -> tuple[int | None, int | None]:
        """The highest rank the pass may walk to while the first listing runs (None: no limit;
        a relist adds to a catalog that was complete: the pass knows the dataset whole), and how
        many more keys the walk may take under the listing's skew (:func:`skew_cap`; None: any).

        It limits how far the walk goes, never the cursor: when it falls (the estimate grows, the
        skew rises) keys listed below the cursor are still owed, so what is cached stays the listed
        keys below one rank, a uniform sample of what is listed, whenever each key was listed.
        (Tried: the cursor stepped back to a fallen pace left the keys fetched above it in the
        cache, all from what was listed first: a nested key space's samples 0.10 from the folder
        mix where the listed keys were 0.01.)"""
        self._known = {}
        if self.store.meta(Meta.LISTING_COMPLETE) is not None:
            return None, None
        known = self.store.listing_known()
        self._known = known
        estimated = known.get("estimated_objects")
        if known.get("complete") or not estimated:
            return None, None
        if awaits_first_round(known, FIRST_ROUND_WAIT):
            return -(2**63), None  # the first round first: the first folders listed are not the sample
        skew = float(known.get("skew") or 0.0)
        taken = self._handed + self._inflight()
        cap = walk_cap(known)
        left = None if cap is None else max(0, cap - taken)  # the walk's and the owed keys'
        share = LEAD * spread_factor(skew) * (taken + PACE_START) / max(1, int(estimated))
        if share >= 1.0:
            return None, left
        return int(share * 2**64) - 2**63, left

    def _record(self) -> None:
        """At most once a second: record where the pass is (:mod:`~epochfs.sidecar.store.fetchpass`),
        so a restart goes on from its cursor, and look whether the catalog grew since the last
        refill. A record that cannot be written (a full disk) is tried again later: it only saves
        a restart from walking again what this run walked.

        The position recorded is behind every key a restart must offer again: the cursor below
        the lowest walk key handed out whose download has not ended (in flight, waiting for its
        admission or for room, kept through an outage), the rows' record before the lowest owed
        key held in memory or handed out so. A key handed out before the last one that is no
        longer busy has ended: admitted, skipped, or dropped for good."""
        now = time.monotonic()
        if now - self._recorded_at < OFFERED_EVERY:
            return
        self._recorded_at = now
        for key in [k for k in self._out if k != self._last_out and not self._busy(k)]:
            del self._out[key]
        if self._queue and self.store.last_catalog_row() > self._offered:
            # Rows were added (a listing that began and ended between two looks): owed ones are
            # found at the next refill, not after what is queued.
            self._queue.clear()
        cursor = self._cursor
        walk = [rank for rank, rowid in self._out.values() if rowid is None]
        if cursor is not None and walk and min(walk) <= cursor:
            cursor = None if min(walk) == -(2**63) else min(walk) - 1
        owed = [rowid - 1 for _, _, rowid, _ in self._owed]
        owed += [rowid - 1 for _, rowid in self._out.values() if rowid is not None]
        position = (min([self._offered, *owed]), cursor)
        if position == self._recorded:
            return
        try:
            self.store.record_pass(offered_upto=position[0], cursor=position[1])
        except (OSError, sqlite3.Error) as e:
            log.debug("could not record where the pass is: %s", e)
            return
        self._recorded = position

    def _refill(self) -> bool:
        """Queue the next candidates; False when there are none now. A catalog found empty is
        asked again after a wait, unless the listing started or ended since: its end lifts the
        pace and adds its last page, and the first fetches of a small dataset waited out the whole
        :data:`EXHAUSTED_WAIT` when the listing ended just after a look (1,500 keys listed in 0.3 s:
        no GET for 1.1 s in two of four runs)."""
        listing = self._listing()
        if self._exhausted is not None:
            at, was_listing = self._exhausted
            wait = LISTING_WAIT if listing else EXHAUSTED_WAIT
            if was_listing == listing and time.monotonic() - at < wait:
                return False
        rows = self._schedule_rows() if self.schedule_mode else self._snapshot_rows()
        rows = [r for r in rows if not self._busy(r[1].key)]
        if rows:
            # A key whose batch was committed after the read above and let go before the busy
            # look was neither cached to the one nor busy to the other: fetched twice.
            cached = self.store.cached_among([cand.key for _, cand in rows])
            rows = [r for r in rows if r[1].key not in cached]
        if not rows and (self._owed_left == 0 or (not self.early and not self._owed)):
            self._exhausted = (time.monotonic(), listing)
            return False
        self._exhausted = None
        self._queue.extend(rows)
        return True
