"""The listing beside the sampler: the first (or resumed) listing, relists every
``--relist-interval`` seconds, and relists asked for with ``epochfs relist``.

A relist is a new listing generation written over the catalog the sampler keeps fetching from:
new keys join the sampling order where their rank puts them, and when the relist reaches the end
the keys it did not see are dropped (:meth:`~epochfs.sidecar.store.catalog.Listings.finish`). A
listing that fails (the remote is down, or throttles) is tried again after a full-jitter pause,
``uniform(0, bound)`` with a bound that doubles from ``RETRY_MIN`` up to ``RETRY_MAX`` seconds and
falls back to ``RETRY_MIN`` once a run has committed a page: the sampler goes on with the catalog
it has. The jitter and the reset matter for a fleet (docs/scale.md, the fleet model): pauses
without them kept nodes throttled at the same instant in cohorts that asked again together, and
a node that listed a few pages between throttles still waited up to a minute each time.

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

log = logging.getLogger("epochfs.catalog")

POLL = 1.0
"""Seconds between looks at the relist requests and the interval."""
RETRY_MIN = 1.0
"""The first bound of the pause after a failed listing run (and the bound after one that
committed a page)."""
RETRY_MAX = 60.0
"""The longest bound of that pause (doubling from RETRY_MIN)."""


class ListingThread(threading.Thread):
    """Runs ``lister`` in the background (see the module doc); ``on_complete`` is called with the
    report of each complete listing (a check that fails there stops the sampler)."""

    def __init__(self, lister: Lister, *, interval: float = 0.0, prepared: object = None,
                 on_complete: Callable[[CatalogReport], None] | None = None,
                 rng: random.Random | None = None) -> None:
        super().__init__(name="listing", daemon=True)
        self.lister = lister
        self.interval = interval
        self.on_complete = on_complete
        self._prepared = prepared
        self.running = threading.Event()
        """Set while a listing runs (the fetch order looks for new keys sooner meanwhile)."""
        self.completed = 0
        self.fatal: BaseException | None = None
        self.rng = rng or random.Random()

    @property
    def stop(self) -> threading.Event:
        return self.lister.stop

    def run(self) -> None:
        listings = self.lister.store.listings()
        served = listings.relist_requests()
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
            asked = listings.relist_requests()
            if asked > served:
                served = asked
                log.info("relist asked for (epochfs relist)")
                pending = fresh = True
            elif self.interval > 0 and time.monotonic() - last >= self.interval:
                pending = fresh = True

    def _list(self, *, fresh: bool) -> bool:
        """One listing to the end: True when complete; False when stopped or failed."""
        bound = RETRY_MIN
        while not self.stop.is_set():
            self.running.set()
            before = self._resume_points()
            try:
                prepared, self._prepared = self._prepared, None
                report = self.lister.run(fresh=fresh, prepared=prepared)  # type: ignore[arg-type]
            except Exception as e:
                if self._resume_points() != before:
                    bound = RETRY_MIN  # the run committed pages: the remote lists, start over
                pause = self.rng.uniform(0, bound)
                log.warning("listing failed: %s; trying again in %.1fs (full jitter up to %.0fs; "
                            "sampling goes on)", e, pause, bound)
                self.stop.wait(pause)
                bound = min(RETRY_MAX, bound * 2)
                fresh = False  # resume the listing begun, do not start another
                continue
            finally:
                self.running.clear()
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

    def _resume_points(self) -> list[tuple[int, str, bool]]:
        """Where each span of the running listing stands (changes when a page is committed)."""
        try:
            return [(p.part, p.after, p.done) for p in self.lister.store.listings().state().parts]
        except Exception:  # a store that cannot be read now: no reset, the pause still doubles
            return []


__all__ = ["ListingThread"]
