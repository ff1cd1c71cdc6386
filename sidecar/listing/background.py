"""The listing beside the sampler: the first (or resumed) listing, relists every
``--relist-interval`` seconds, and relists asked for with ``epochfs relist``.

A relist is a new listing generation written over the catalog the sampler keeps fetching from:
new keys join the sampling order where their rank puts them, and when the relist reaches the end
the keys it did not see are dropped (:meth:`~epochfs.sidecar.store.catalog.Listings.finish`). A
listing that fails (the remote is down) is tried again after a pause that doubles up to
``RETRY_MAX`` seconds; the sampler goes on with the catalog it has.

``epochfs relist --cache DIR`` asks by bumping the ``relist_requests`` counter in the index (as
``epochfs cut`` writes to the index, not to the process); this thread looks every ``POLL`` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from epochfs.sidecar.listing.filter import CatalogReport
from epochfs.sidecar.listing.lister import Lister

log = logging.getLogger("epochfs.catalog")

POLL = 1.0
"""Seconds between looks at the relist requests and the interval."""
RETRY_MIN = 1.0
RETRY_MAX = 60.0


class ListingThread(threading.Thread):
    """Runs ``lister`` in the background (see the module doc); ``on_complete`` is called with the
    report of each complete listing (a check that fails there stops the sampler)."""

    def __init__(self, lister: Lister, *, interval: float = 0.0, prepared: object = None,
                 on_complete: Callable[[CatalogReport], None] | None = None) -> None:
        super().__init__(name="listing", daemon=True)
        self.lister = lister
        self.interval = interval
        self.on_complete = on_complete
        self._prepared = prepared
        self.running = threading.Event()
        """Set while a listing runs (the fetch order looks for new keys sooner meanwhile)."""
        self.completed = 0
        self.fatal: BaseException | None = None

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
        pause = RETRY_MIN
        while not self.stop.is_set():
            self.running.set()
            try:
                prepared, self._prepared = self._prepared, None
                report = self.lister.run(fresh=fresh, prepared=prepared)  # type: ignore[arg-type]
            except Exception as e:
                log.warning("listing failed: %s; trying again in %.0fs (sampling goes on)", e, pause)
                self.stop.wait(pause)
                pause = min(RETRY_MAX, pause * 2)
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


__all__ = ["ListingThread"]
