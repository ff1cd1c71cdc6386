"""The listing beside the sampler: the first (or resumed) listing, relists every
``--relist-interval`` seconds, and relists asked for with ``epochfs relist``.

A relist is a new listing generation written over the catalog the sampler keeps fetching from:
new keys join the sampling order where their rank puts them, and when the relist reaches the end
the keys it did not see are dropped (:meth:`~epochfs.sidecar.store.listings.Listings.finish`). A
listing that fails (the remote is down, or throttles) is tried again after a full-jitter pause,
``uniform(0, bound)``: the sampler goes on with the catalog it has. The bound doubles from
``RETRY_MIN`` up to ``RETRY_MAX`` seconds after a run that committed nothing, stays after one that
committed pages, and starts over only after a run that listed for ``QUIET`` seconds
(:func:`pause_bound`). The jitter matters for a fleet (docs/scale.md, the fleet model): pauses
without it kept nodes throttled at the same instant in cohorts that asked again together; so does
a bound that does not fall back after each page: falling back to ``RETRY_MIN`` after every run
that committed a page more than tripled the fleet's refused LIST requests.

``epochfs relist --cache DIR`` asks by bumping the ``relist_requests`` counter in the index (as
``epochfs cut`` writes to the index, not to the process); this thread looks every ``POLL`` seconds.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from epochfs.sidecar.listing.filter import CatalogReport
from epochfs.sidecar.listing.lister import Lister
from epochfs.sidecar.redact import redact
from epochfs.sidecar.remote.backoff import doubled, full_jitter
from epochfs.sidecar.store import Meta

log = logging.getLogger("epochfs.catalog")

POLL = 1.0
"""Seconds between looks at the relist requests and the interval."""
RETRY_MIN = 1.0
"""The first bound of the pause after a failed listing run (and the bound after one that
committed a page)."""
RETRY_MAX = 60.0
"""The longest bound of that pause (doubling from RETRY_MIN)."""


QUIET = RETRY_MAX
"""Seconds a failed run must have listed for before its failure starts the pause over at RETRY_MIN
(a throttle after a quiet while is a new one, not the same contention)."""


def pause_bound(last: float | None, committed: int, ran: float = 0.0) -> float:
    """The bound of the pause after a failed listing run that committed ``committed`` pages in
    ``ran`` seconds, the last pause's bound being ``last`` (None: the listing's first failure).

    Doubled (up to RETRY_MAX) after a run that committed nothing; kept after one that committed
    pages; back to RETRY_MIN only after a run that listed for QUIET seconds. The bound is not
    reset after every committed page: under a fleet's throttling nearly every run commits a page
    or two before its SlowDown, and the reset sent each node back within a second of every
    SlowDown (the fleet model, 1M keys and 1,000 nodes: 2.2M LIST requests, 1.2M of them refused;
    halving the bound instead, 2.05M; keeping it, 1.14M and 142k, the listing done sooner, 305 s
    median instead of 348 s: docs/scale.md). A run that is not throttled never pauses, so a kept
    bound costs nothing once the contention is over.
    """
    if last is None or (committed > 0 and ran >= QUIET):
        return RETRY_MIN
    if committed > 0:
        return last
    return doubled(last, RETRY_MAX)


class ListingThread(threading.Thread):
    """Runs ``lister`` in the background (see the module doc); ``on_complete`` is called with the
    report of each complete listing (a check that fails there stops the sampler)."""

    def __init__(self, lister: Lister, *, interval: float = 0.0, prepared: object = None,
                 on_complete: Callable[[CatalogReport], None] | None = None,
                 rng: random.Random | None = None, served: int | None = None,
                 running: threading.Event | None = None) -> None:
        """``served``: the relist requests already served (None: those the index counts when the
        thread starts); a listing process started again passes the sampler's count, so that a
        request made while no listing process ran is served. ``running``: the event to set while
        a listing runs (None: one of its own), made before the thread so that the sampler is
        given it at its construction."""
        super().__init__(name="listing", daemon=True)
        self.lister = lister
        self.interval = interval
        self.on_complete = on_complete
        self._prepared = prepared
        self._failure: str | None = None
        """The failure recorded last (:meth:`_failed`)."""
        self.running = running if running is not None else threading.Event()
        """Set while a listing runs (the fetch order looks for new keys sooner meanwhile)."""
        self.completed = 0
        self.fatal: BaseException | None = None
        self.rng = rng or random.Random()
        self._served = served

    @property
    def stop(self) -> threading.Event:
        return self.lister.stop

    def run(self) -> None:
        served = self._served if self._served is not None else self.lister.store.listings().relist_requests()
        last = time.monotonic()
        pending = self.lister.needed()
        fresh = False
        while not self.stop.is_set():
            if pending:
                if self._list(fresh=fresh):
                    last = time.monotonic()
                    pending = fresh = False
                elif self.fatal is not None:
                    return
                continue
            if self.stop.wait(POLL):
                return
            asked = self.lister.store.listings().relist_requests()  # the index it has now
            if asked > served:
                served = asked
                log.info("relist asked for (epochfs relist)")
                pending = fresh = True
            elif self.interval > 0 and time.monotonic() - last >= self.interval:
                pending = fresh = True

    def _failed(self, reason: str | None) -> None:
        """Record why the listing failed (None: it ran), for status: otherwise a listing failing
        for ever showed only as a listing that had covered nothing. Best effort (a full disk)."""
        if reason == self._failure:
            return
        try:
            self.lister.store.set_meta(Meta.LISTING_FAILED, None if reason is None else redact(reason)[:300])
        except Exception as e:  # no store (an index file's lister), a full disk: the log has it
            log.debug("listing failure not recorded: %s", e)
            return
        self._failure = reason

    def _list(self, *, fresh: bool) -> bool:
        """One listing to the end: True when complete; False when stopped or failed."""
        bound: float | None = None
        while not self.stop.is_set():
            self.running.set()
            before, began = self.lister.committed, time.monotonic()
            try:
                prepared, self._prepared = self._prepared, None
                report = self.lister.run(fresh=fresh, prepared=prepared)  # type: ignore[arg-type]
            except Exception as e:
                bound = pause_bound(bound, self.lister.committed - before, time.monotonic() - began)
                pause = full_jitter(bound, self.rng)
                log.warning("listing failed: %s; trying again in %.1fs (full jitter up to %.0fs; "
                            "sampling goes on)", e, pause, bound)
                self._failed(" ".join(str(e).split()) or type(e).__name__)
                self.stop.wait(pause)
                fresh = False  # resume the listing begun, do not start another
                continue
            finally:
                self.running.clear()
            self._failed(None)
            if not report.complete:
                return False
            self.completed += 1
            if self.on_complete is not None:
                try:
                    self.on_complete(report)
                except Exception as e:
                    self.fatal = e
                    self.stop.set()
                    return False
            return True
        return False

__all__ = ["QUIET", "RETRY_MAX", "RETRY_MIN", "ListingThread", "pause_bound"]
