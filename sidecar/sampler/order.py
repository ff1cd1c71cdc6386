"""The fetch order: which catalog key to download next.

Snapshot mode: a cursor over the sampling order that starts a new pass when it reaches the end, so
a dataset larger than the cache streams through it. A restart goes on from the newest admissions'
ranks (not the front: stepping over a million cached keys there took seconds). Schedule mode: the
missing keys of the next epoch's window first, then those of the window after it (a look-ahead),
never keys in front of the window, which the epoch budget has trimmed. Keys already busy (in
flight, waiting for admission, kept through an outage) are passed over; the caller says which
through ``busy``.

While the listing runs (``listing`` says so), snapshot mode draws from what is listed so far: the
cursor walks the rank order of the listed keys, and a key listed later with a rank behind the
cursor is **owed** to the pass: it is fetched before the cursor moves on (:func:`.catalog.refill`),
never left for the next pass. So at any moment the pass has fetched (or is fetching) every listed
key up to its cursor, a uniform sample of what is listed, and once the listing is complete the
cache converges to exactly the first keys of the whole order. Schedule mode waits for the first
complete listing: its windows are positions in the order of the whole catalog, which move while
keys are still arriving.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import deque
from collections.abc import Callable

from epochfs.sidecar.store import Candidate, Meta, Store

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
OFFERED_EVERY = 1.0
"""Seconds between records of how far the pass has offered the catalog's rows (a restart goes on
looking for owed rows from there: at most this much of the listing is looked at twice)."""


class FetchOrder:
    """Candidates in sampling order, read from the store's catalog a batch at a time."""

    def __init__(self, *, store: Store, schedule_mode: bool, busy: Callable[[str], bool],
                 inflight: Callable[[], int], listing: Callable[[], bool] | None = None) -> None:
        self.store = store
        self.schedule_mode = schedule_mode
        self._busy = busy
        self._inflight = inflight
        self._queue: deque[tuple[int, Candidate]] = deque()
        self._cursor: int | None = None if schedule_mode else store.resume_rank()
        """Snapshot mode: the highest rank offered in this pass; a restart goes on where the last
        run was."""
        self._offered = self._offered_at_start() if not schedule_mode else 0
        """Snapshot mode: every catalog row up to this rowid was offered in this pass."""
        self._offered_recorded = (self._offered, time.monotonic())
        self.owed = 0
        """Snapshot mode: keys fetched as owed so far (listed after the cursor passed them)."""
        self._windows: dict[int, tuple[int, int]] = {}
        self._target = -1
        self.lookahead = False
        """Schedule mode: the candidates come from the window after the next epoch's."""
        self.passes = 0
        self._exhausted_at: float | None = None
        self.listing: Callable[[], bool] = listing or (lambda: False)
        """True while a listing adds keys to the catalog (set by ``epochfs sample``)."""

    def next(self) -> Candidate | None:
        """The next key to fetch, or None when the catalog has nothing left to fetch right now."""
        while True:
            if self._queue and self.stale():
                self._queue.clear()
            while self._queue:
                rank, cand = self._queue.popleft()
                if not self.schedule_mode and (self._cursor is None or rank > self._cursor):
                    self._cursor = rank  # an owed key lies behind the cursor: it stays
                if not self._busy(cand.key):
                    return cand
            if not self._refill():
                return None

    def stale(self) -> bool:
        """Schedule mode: a cut or a request moved the target since the queue was filled."""
        return self.schedule_mode and self._schedule_target() != self._target

    def _window(self, n: int) -> tuple[int, int]:
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
        limit = LISTING_REFILL if self.listing() else REFILL
        got = self.store.refill(cursor=self._cursor, offered_upto=self._offered, limit=limit)
        rows = got.rows
        self.owed += got.owed
        self._offered = got.offered_upto
        if not rows and self._cursor is not None:
            self._cursor = None
            got = self.store.refill(cursor=None, offered_upto=self._offered, limit=limit)
            rows, self._offered = got.rows, got.offered_upto
            if [r for r in rows if not self._busy(r[1].key)]:
                self.passes += 1
                log.info("pass %d over the catalog done; starting again from the front "
                         "(samples evicted since are fetched again)", self.passes)
        self._record_offered()
        return rows

    def _record_offered(self) -> None:
        """At most once a second, and only while a listing adds keys (nothing is owed otherwise):
        a record that cannot be written (a full disk) is tried again later, as it only saves a
        restart from leaving owed keys for the next pass."""
        value, at = self._offered_recorded
        now = time.monotonic()
        if value == self._offered or now - at < OFFERED_EVERY or not self.listing():
            return
        self._offered_recorded = (value, now)
        try:
            self.store.record_offered_upto(self._offered)
        except (OSError, sqlite3.Error) as e:
            log.debug("could not record how far the pass offered the catalog: %s", e)
            return
        self._offered_recorded = (self._offered, now)

    def _refill(self) -> bool:
        wait = LISTING_WAIT if self.listing() else EXHAUSTED_WAIT
        if self._exhausted_at is not None and time.monotonic() - self._exhausted_at < wait:
            return False
        rows = self._schedule_rows() if self.schedule_mode else self._snapshot_rows()
        rows = [r for r in rows if not self._busy(r[1].key)]
        if not rows:
            self._exhausted_at = time.monotonic()
            return False
        self._exhausted_at = None
        self._queue.extend(rows)
        return True
