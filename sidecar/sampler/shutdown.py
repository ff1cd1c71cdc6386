"""The sampler loop's stop: admit what finishes within :data:`STOP_GRACE`, abandon the rest, remove
temp files, release reservations.

A mixin of :class:`~.loop.Sampler` (the attributes below are set by its ``__init__``), apart so the
loop's module stays the loop, as :mod:`.repairs` is: the stop runs once, after the loop, and reads
the loop's state without changing how the loop turns.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from typing import TYPE_CHECKING

from epochfs.sidecar.sampler.admitter import discard
from epochfs.sidecar.sampler.room import DiskFull

if TYPE_CHECKING:
    from epochfs.sidecar.download import Downloader, FetchResult
    from epochfs.sidecar.reservations import Reservations
    from epochfs.sidecar.sampler.admitter import Admitter
    from epochfs.sidecar.sampler.room import Room
    from epochfs.sidecar.scrub import Scrubber
    from epochfs.sidecar.store import Admission, Candidate, Store
    from epochfs.sidecar.store.checkup import Background
    from epochfs.sidecar.store.memberfiles import Keeper

log = logging.getLogger("epochfs.sampler")

STOP_GRACE = 2.0
"""Seconds the stop waits for in-flight downloads before abandoning them (the supervisor allows
the sampler 5 s to exit before it kills it)."""
ADMITTING_SAID_AT = 100
"""Verified downloads waiting for admission at the stop from which the stop says it admits them
(a few hundred take a noticeable moment, and a silent wait after Ctrl-C reads as a hang)."""


class Shutdown:
    """Ends the loop's workers and threads and leaves the cache with no reservation held."""

    stop: threading.Event
    store: Store
    reservations: Reservations
    downloader: Downloader
    room: Room
    admitter: Admitter
    scrubber: Scrubber | None
    index_check: Background
    members: Keeper
    _threads: list[threading.Thread]
    _tasks: queue.Queue[Candidate | None]
    _results: queue.Queue[FetchResult | DiskFull | BaseException | None]
    _inflight: dict[str, Candidate]
    _fatal: BaseException | None

    if TYPE_CHECKING:
        def _admit_repair(self, cand: Candidate, admission: Admission) -> None: ...
        def _unpublish(self) -> None: ...

    def _shutdown(self) -> None:
        """Admit what finished, abandon the rest, remove temp files, release reservations."""
        self.stop.set()
        for _ in self._threads:
            self._tasks.put(None)
        deadline = time.monotonic() + STOP_GRACE
        while self._inflight and time.monotonic() < deadline:
            try:
                item = self._results.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is None:  # the admitter's wake-up
                continue
            if isinstance(item, BaseException):
                self._fatal = self._fatal or item
                continue
            was_inflight = self._inflight.pop(item.candidate.key, None) is not None
            if isinstance(item, DiskFull):
                if was_inflight:  # the admitter released its own
                    self.room.release(item.candidate)
            elif item.admission is not None and self.room.unreserved(item.candidate):
                self._admit_repair(item.candidate, item.admission)
            elif item.admission is not None:
                self.admitter.hand_over(item.admission)
            else:
                self.room.release(item.candidate)
        waiting = self.admitter.backlog()
        if waiting >= ADMITTING_SAID_AT:
            log.info("admitting %d downloaded sample(s) before stopping", waiting)
        try:
            self.admitter.finish()
            if self.scrubber is not None:
                self.scrubber.join(timeout=STOP_GRACE)
            self.index_check.join(timeout=STOP_GRACE)
            self.members.join(timeout=STOP_GRACE)
        finally:
            for temp in self.downloader.active_temps():
                discard(temp)  # a volume gone read-only: one line, not a traceback over the cause
            for cand in self._inflight.values():
                self.room.release(cand)
            self._inflight.clear()
            with contextlib.suppress(Exception):
                self.reservations.publish()
                self.store.set_backpressure(None)
                self._unpublish()


__all__ = ["ADMITTING_SAID_AT", "STOP_GRACE", "Shutdown"]
