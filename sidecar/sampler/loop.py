"""The sampler's loop: start downloads in fetch order, collect them, hand them to the admitter.

One loop on one thread decides what to fetch and owns every reservation, so capacity accounting
stays in one place: a download starts only once :class:`Reservations` has made room for it
(evicting the samples admitted first that no live epoch holds), and when nothing can be evicted the
loop raises backpressure in the store and waits for a cut or a retirement to free room. A pool of
worker threads only downloads into temp files; the :class:`Admitter` makes them visible; the
:class:`OutageBreaker` keeps keys through a remote outage; the :class:`FetchOrder` says what is next;
the :class:`CutSchedule` cuts epochs (:mod:`.cutter`);
the :class:`~epochfs.sidecar.scrub.Scrubber` (``--scrub-rate``) checks cached objects in the
background and hands back the keys of damaged ones, fetched again first. Throttling (S3
``SlowDown``, 429) is apart from outages (:mod:`.throttle`): the :class:`FetchWindow` bounds the
downloads in flight below ``--concurrency`` while the store throttles, and a throttled key is
never skipped, it waits in :class:`Deferred` for a full-jitter delay and is fetched again first.

The admitter's backlog is bounded: while it is full no download starts (:mod:`.admitter`). What
the loop publishes for status and logs as its progress is :mod:`.publishing`'s.

Stopping (:mod:`.shutdown`): the workers see the stop flag between blocks and abandon their
downloads; finished ones are admitted, temp files are removed and reservations released.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from epochfs.sidecar.config import SamplerSettings
from epochfs.sidecar.download import Downloader, FetchResult, LocalWriteError, RetryPolicy
from epochfs.sidecar.metrics import process_metrics
from epochfs.sidecar.ratelimit import RateLimiter
from epochfs.sidecar.remote import Remote
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.sampler.admitter import Admitter
from epochfs.sidecar.sampler.breaker import OutageBreaker, hold_for
from epochfs.sidecar.sampler.cutter import CutSchedule
from epochfs.sidecar.sampler.diskspace import DiskSpace, is_disk_full
from epochfs.sidecar.sampler.order import LISTING_WAIT, FetchOrder
from epochfs.sidecar.sampler.outagerecord import OutageRecord
from epochfs.sidecar.sampler.progress import Rates
from epochfs.sidecar.sampler.publishing import Publishing
from epochfs.sidecar.sampler.repairs import RepairsInPlace
from epochfs.sidecar.sampler.room import DiskFull, Room, Unfit
from epochfs.sidecar.sampler.shutdown import Shutdown
from epochfs.sidecar.sampler.throttle import Deferred, FetchWindow
from epochfs.sidecar.sampler.waiting import Waiting
from epochfs.sidecar.scrub import Scrubber
from epochfs.sidecar.store import Admission, Candidate, Store, StoreError

log = logging.getLogger("epochfs.sampler")
INDEX_DELETED = ("the cache index was deleted under the running sampler; exiting so that the next "
                 "start rebuilds it from the live epochs' members files (epochs continue above the "
                 "high-water mark)")
"""The loop's check finds the deletion, or a write fails on it first (SQLite's disk I/O error on a
file unlinked under it): :func:`.command.index_failed` says the same then."""

POLL = 0.2
"""Seconds between checks of the store while waiting (backpressure, idle, pending cuts)."""
REPAIRS_EVERY = 5.0
"""Seconds between looks at the samples waiting for a repair in place (the scrub of this process
hands its own over at once)."""
LOOK_EVERY = 0.05
"""Seconds between the loop's looks at the store (a deleted or damaged index, epochs to retire, the
cache's total read again): each is index reads, and the loop turns every few ms while it fetches."""


class Sampler(RepairsInPlace, Shutdown, Publishing, Waiting):
    """The fetch loop over an opened store and remote (``run_sample`` builds one)."""

    def __init__(
        self,
        *,
        store: Store,
        remote: Remote,
        settings: SamplerSettings,
        stop: threading.Event,
        progress_every: float = 5.0,
        breaker: OutageBreaker | None = None,
        outage: OutageRecord | None = None,
        listing: Callable[[], bool] | None = None,
    ) -> None:
        """``listing``: True while a listing adds keys to the catalog (``epochfs sample`` passes
        the listing's ``running``); the fetch order then looks for new keys sooner. None: no
        listing runs beside this sampler. ``outage``: the record the breaker reports to, made
        (clearing a killed run's) when the run took the cache's lock; None: made here."""
        if progress_every <= 0:
            raise ValueError("progress_every must be positive")
        self.store = store
        self.reservations = Reservations(store)
        self.remote = remote
        self.settings = settings
        self.stop = stop
        self.progress_every = progress_every
        self.downloader = Downloader(
            store=store, remote=remote, retry=RetryPolicy(attempts=settings.retries), stop=stop,
            rate=RateLimiter(rate=settings.max_rate) if settings.max_rate else None,
            direct=settings.direct_writes, stall_window=settings.read_timeout,
        )
        self.breaker = breaker or OutageBreaker(on_change=outage or OutageRecord(store),
                                                hold_for=hold_for(settings.retries, settings.read_timeout))
        self.window = FetchWindow(settings.concurrency)
        self.deferred = Deferred()
        """Throttled keys, fetched again after their full-jitter delay."""
        process_metrics().set_fetch_window(self.window.size)
        self.disk = DiskSpace(Path(settings.cache), settings.capacity)
        if settings.schedule is not None:
            self.disk.check_schedule_fits()
        self.room = Room(store=store, reservations=self.reservations, disk=self.disk,
                         settings=settings, write=self._write)
        self.admitter = Admitter(reservations=self.reservations, on_batch=self._admitted,
                                 on_failure=self._admit_failed, on_room=lambda: self._results.put(None),
                                 pending=lambda: len(self._inflight))
        self.order = FetchOrder(store=store, schedule_mode=settings.schedule is not None,
                                busy=self._busy, inflight=lambda: len(self._inflight), listing=listing)
        self._listing: Callable[[], bool] = listing or (lambda: False)
        self._refetch: queue.SimpleQueue[Candidate] = queue.SimpleQueue()
        """Keys of damaged objects the scrub evicted, to fetch again first."""
        self._repairs: set[str] = set()
        """Keys handed over for a repair in place, until their download lands or is skipped."""
        self.scrubber = (Scrubber(store=store, rate=settings.scrub_rate, stop=stop,
                                  on_damaged=self._refetch.put)
                         if settings.scrub_rate > 0 else None)
        self._repairs_looked = -REPAIRS_EVERY
        """When the index's repairs were last looked at (``epochfs verify``'s, a restart's)."""
        self.index_check = store.index_checker(stop)
        """The background full check of the index (store/checkup.py): damage found ends the loop."""
        self.members = store.members_keeper(stop)
        """Writes each live epoch's members file, what a damaged index is rebuilt from
        (store/memberfiles.py), whichever process cut it."""
        self._tasks: queue.Queue[Candidate | None] = queue.Queue()
        self._results: queue.Queue[FetchResult | DiskFull | BaseException | None] = queue.Queue()
        """Finished downloads, and None: the admitter's backlog fell below its bound (a wake-up)."""
        self._inflight: dict[str, Candidate] = {}
        self._looked = float("-inf")
        self._fatal: BaseException | None = None
        self.cuts = CutSchedule(store, settings.cut_interval, self._write, on_full=self.room.cut_refused)
        now = time.monotonic()
        self.rates = Rates(started=now, last_time=now)
        self._threads = [
            threading.Thread(target=self._worker, name=f"fetch-{i}", daemon=True)
            for i in range(settings.concurrency)
        ]

    # ------------------------------------------------------------------ workers
    def _worker(self) -> None:
        while True:
            cand = self._tasks.get()
            if cand is None:
                return
            try:
                self._results.put(self.downloader.fetch(cand))
            except LocalWriteError as e:
                self._results.put(DiskFull(cand, e) if is_disk_full(e) else e)
            except BaseException as e:  # another node-volume failure or a bug: the loop stops on it
                self._results.put(e)

    def fetching(self) -> bool:
        """Downloads in flight or waiting for admission: the listers leave the index to this
        sampler a share of the time (``Lister.yield_to``)."""
        return bool(self._inflight) or self.admitter.busy()

    def _busy(self, key: str) -> bool:
        """In flight, waiting for its admission batch, kept for after an outage or throttled."""
        return (key in self._inflight or self.breaker.is_kept(key) or self.deferred.holds(key)
                or self.admitter.holds(key))

    def _next_candidate(self) -> Candidate | None:
        self._take_repairs()
        return self.breaker.next_kept(self._busy) or self.order.next()

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        """Fetch until stopped; raises :class:`LocalWriteError` when the node volume fails."""
        for t in self._threads:
            t.start()
        self.admitter.start()
        if self.scrubber is not None:
            self.scrubber.start()
        self.index_check.start()
        self.members.start()
        pending: Candidate | None = None
        try:
            while not self.stop.is_set():
                pending = self._start_downloads(pending)
                due = self.deferred.next_due_in()
                wait = POLL if due is None else min(POLL, max(0.005, due))
                if not self._inflight and self._listing():
                    # Nothing in flight, no download to wake the loop: while the listing adds keys
                    # it looks again as soon as the order asks the catalog again (the start's first
                    # page is committed milliseconds after the loop begins).
                    wait = min(wait, LISTING_WAIT)
                self._collect(wait)
                self._tick(pending)
                fatal = self._fatal or self.admitter.fatal
                if fatal is not None:
                    raise fatal
        finally:
            self._shutdown()

    def _start_downloads(self, pending: Candidate | None) -> Candidate | None:
        """Start downloads while there is room in flight and in the cache; returns the candidate
        that found no room (tried again first)."""
        while (len(self._inflight) < self.window.size and not self.stop.is_set()
               and not self.breaker.paused() and not self.admitter.full()):
            if pending is not None and self.order.stale():
                pending = None
            cand = pending or self.deferred.due()
            if cand is None:
                # A throttled key's wait holds its place in the window: a throttled answer comes
                # back in one round trip, so a freed slot would otherwise ask again at once and
                # the window would not lower the request rate.
                if len(self._inflight) + self.deferred.holding() >= self.window.size:
                    break
                cand = self._next_candidate()
                if cand is None and not self._inflight and self.breaker.holding:
                    self._skip_held(self.breaker.retry_held())  # no download left to tell
                    cand = self._next_candidate()
                # Idle by design (nothing to offer, nothing in flight or waiting): the stall
                # alert stays quiet; keys offered and none admitted is the stall it is for.
                process_metrics().set_idle(cand is None and not self._inflight and not len(self.deferred))
            pending = None
            if cand is None:
                break
            unfit = self.room.skip_unfittable(cand)
            if unfit is Unfit.WAIT:  # the volume holds nothing now: looked at again after a poll
                return cand
            if unfit:
                self.rates.skipped += 1
                continue
            if not (cand.key in self._repairs and self.room.reserve_repair(cand)):  # (takes no room)
                if not self.room.reserve(cand, lookahead=self.order.lookahead):
                    self._start_repairs()
                    self.room.full(waiting_on_own=bool(self._inflight) or self.admitter.busy(),
                                   target=self.order.window_target())
                    return cand
                self.room.set_backpressure(None)
            self._inflight[cand.key] = cand
            self.breaker.sent(cand.key)  # its answer tells only about the failures before it
            self._tasks.put(cand)
        return None

    def _collect(self, timeout: float) -> None:
        """Take finished downloads: verified ones wait for the next admission batch."""
        try:
            item = self._results.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            if item is not None:  # (None: the admitter's wake-up)
                self._handle(item)
            try:
                item = self._results.get_nowait()
            except queue.Empty:
                return

    def _handle(self, item: FetchResult | DiskFull | BaseException) -> None:
        if isinstance(item, BaseException):
            self._fatal = self._fatal or item
            return
        if isinstance(item, DiskFull):
            key = item.candidate.key
            if item.released:  # the admitter's: its reservation is given back already
                self.room.admission_failed(item.candidate)
            elif self._inflight.get(key) is item.candidate:  # a worker's
                del self._inflight[key]
                self.room.release(item.candidate)
            if key not in self._inflight:  # (else a new download of it runs: not fetched twice)
                self.breaker.keep(item.candidate)  # fetched again once there is room
            self.disk.filled(item.error)
            return
        cand = item.candidate
        self._inflight.pop(cand.key, None)
        if item.admission is not None:
            if self.room.unreserved(cand):
                self._admit_repair(cand, item.admission)
            else:
                self.admitter.hand_over(item.admission)
            self._repairs.discard(cand.key)
            self._skip_held(self.breaker.succeeded(cand.key))
            self.deferred.came_through(cand.key)
            if self.window.succeeded():
                process_metrics().set_fetch_window(self.window.size)
            return
        self.room.release(cand)
        if item.cancelled:
            return
        if item.throttled:
            self._throttled(cand, item.error)
            return
        if item.gave_up and self.store.awaits_repair(cand.key):  # skipped, it would be marked lost
            self.deferred.defer(cand, throttled=False)  # (a run of 5xx is no answer about it); again later
            return
        self.deferred.fetched(cand.key)
        if item.unavailable:
            self.breaker.failed(cand, item.error)  # kept, or held until an outage is told
            return
        self._skip_held([*self.breaker.succeeded(cand.key), (cand, item.error)])

    def _write(self, fn: Callable[[], Any]) -> Any:
        """A store write from the loop: a full disk pauses sampling instead of ending it."""
        try:
            return fn()
        except Exception as e:
            if not is_disk_full(e):
                raise
            self.disk.filled(e)
            return None

    def _admit_failed(self, batch: list[Admission], error: BaseException) -> bool:
        """The admitter could not commit ``batch`` (its files are gone, reservations released): a
        full disk keeps the keys for later; anything else stops the sampler."""
        if not is_disk_full(error):
            return False
        for a in batch:
            self._results.put(DiskFull(Candidate(a.key, a.sid, a.size, a.version), error, released=True))
        return True

    def _admitted(self, batch: list[Admission]) -> None:
        """After each admitted batch (on the admitter's thread): rates, then queued cuts."""
        self.rates.samples += len(batch)
        self.rates.nbytes += sum(a.size for a in batch)
        try:
            self.cuts.serve_requests()
        except Exception as e:  # a cut that fails must not stop admissions
            log.error("serving cut requests failed: %s", e)

    def _tick(self, pending: Candidate | None) -> None:
        """Timers: cut interval, queued cuts while idle, progress line; the store's looks."""
        now = time.monotonic()
        if now - self._looked >= LOOK_EVERY:
            self._looked = now
            self._look_at_store()
            self.room.look_at_volume()  # a full volume refuses the cuts a "cache full" pause awaits
        if now - self._repairs_looked >= REPAIRS_EVERY:
            # Repairs this process did not queue: epochfs verify's quarantines, a restart's.
            self._repairs_looked = now
            # It writes (marks the samples that cannot be fetched again lost): a full disk pauses
            # it too (the 600 s soak: SQLITE_FULL here, just after an index rebuild, ended the
            # sampler with exit 1).
            for cand in self._write(self.store.repairs_due) or []:
                if not self._busy(cand.key):
                    self._refetch.put(cand)
            # A --capacity lowered since the samples came.
            self._write(lambda: self.reservations.trim(self.settings.capacity))
        self._held_overdue()
        self.cuts.tick(now, samples=self.rates.samples, backpressure=self.room.backpressure is not None)
        if not self._inflight:
            self._write(self.cuts.serve_requests)
        self._publish(now)
        self._log_progress(now)

    def _look_at_store(self) -> None:
        """A deleted or damaged index ends the loop; epochs beyond --keep-epochs retire once out of
        their in-use window, full cache or not (a read when nothing is due); the reservations read
        the cache's total from the index again at their next use."""
        if self.store.index_lost():
            raise StoreError(INDEX_DELETED)
        damage = self.index_check.damage()
        if damage is not None:
            raise StoreError(f"the cache index is damaged ({damage}); exiting so that the next start "
                             "checks it in full and replaces it")
        self._write(self.store.retire)
        self.reservations.reconcile()
