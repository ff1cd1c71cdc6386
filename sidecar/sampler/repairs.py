"""The sampler loop's repairs in place: damaged samples fetched again into their place first, and,
while the cache is full, started with no reservation (:meth:`~.room.Room.reserve_repair`: their bytes
are counted already) and admitted on the loop's thread (:meth:`~.room.Room.admit_repair`).

A mixin of :class:`~.loop.Sampler` (the attributes below are set by its ``__init__``), apart so the
loop's module stays the loop: the supervisor's parts are split the same way.
"""

from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING

from epochfs.sidecar.download import LocalWriteError
from epochfs.sidecar.sampler.diskspace import DiskSpace, is_disk_full
from epochfs.sidecar.store import Admission, Candidate

if TYPE_CHECKING:
    from epochfs.sidecar.sampler.breaker import OutageBreaker
    from epochfs.sidecar.sampler.progress import Rates
    from epochfs.sidecar.sampler.room import Room
    from epochfs.sidecar.sampler.throttle import FetchWindow


class RepairsInPlace:
    """Takes the keys the scrub hands over, starts them when the cache has no room, admits them."""

    _refetch: queue.SimpleQueue[Candidate]
    _repairs: set[str]
    _inflight: dict[str, Candidate]
    _tasks: queue.Queue[Candidate | None]
    _fatal: BaseException | None
    breaker: OutageBreaker
    room: Room
    window: FetchWindow
    disk: DiskSpace
    rates: Rates
    stop: threading.Event

    if TYPE_CHECKING:
        def _busy(self, key: str) -> bool: ...

    def _take_repairs(self) -> None:
        """Damaged objects to fetch again go first, like keys kept through an outage."""
        while True:
            try:
                cand = self._refetch.get_nowait()
            except queue.Empty:
                return
            self._repairs.add(cand.key)
            self.breaker.keep(cand)

    def _start_repairs(self) -> None:
        """No room for the next download: start the kept repairs in place, which need none.

        The candidate that found no room is tried again first, so without this a full cache that
        live epochs pin (waiting for a cut) would never get to the repairs behind it."""
        self._take_repairs()
        others: list[Candidate] = []
        while len(self._inflight) < self.window.size:
            cand = self.breaker.next_kept(self._busy)
            if cand is None:
                break
            if cand.key in self._repairs and self.room.reserve_repair(cand):
                self._inflight[cand.key] = cand
                self._tasks.put(cand)
            else:
                others.append(cand)
        for cand in others:
            self.breaker.keep(cand)

    def _admit_repair(self, cand: Candidate, admission: Admission) -> None:
        """Admit a repair in place that reserved nothing, on this thread (:meth:`Room.admit_repair`):
        a full disk keeps the key for later, as the admitter does; another failure ends the loop."""
        try:
            if self.room.admit_repair(cand, admission):
                self.rates.samples += 1
                self.rates.nbytes += admission.size
        except Exception as e:
            if not is_disk_full(e):
                self._fatal = self._fatal or (LocalWriteError(f"admitting the repair of {cand.key!r}: {e}")
                                              if isinstance(e, OSError) else e)
                return
            self.disk.filled(e)
            self.breaker.keep(cand)
            self._repairs.add(cand.key)


__all__ = ["RepairsInPlace"]
