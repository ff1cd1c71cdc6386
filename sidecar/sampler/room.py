"""Room in the cache for the fetch loop's next download, and the backpressure it raises when none.

The loop asks once per object, so the answer reads nothing but memory while there is room: the
cache's total as the reservations keep it (:class:`Reservations`, which read the index's counter
again after each look at the store) and the disk's free space as :class:`DiskSpace` last measured
it (once a second); the capacity is written to the store only when the disk moves it by more than
1%, and the backpressure only when its reason changes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from epochfs.sidecar.config import SamplerSettings, format_size
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.sampler.diskspace import DiskSpace
from epochfs.sidecar.store import Candidate, Store

log = logging.getLogger("epochfs.sampler")

CACHE_FULL = "cache full"
DISK_FULL = "disk full"


@dataclass(frozen=True)
class DiskFull:
    """A download or admission of ``candidate`` that found the node volume full (its key is kept
    and fetched again once there is room)."""

    candidate: Candidate
    error: BaseException
    released: bool = False
    """The admitter's: its reservation is already given back and it is no longer in flight, so
    the loop leaves both alone (the key may be in flight again by then, as another download)."""


class Room:
    """The loop's reservations against the effective capacity, and the backpressure it reports."""

    def __init__(self, *, store: Store, reservations: Reservations, disk: DiskSpace,
                 settings: SamplerSettings, write: Callable[[Callable[[], Any]], Any]) -> None:
        """``write``: the loop's store write (a full disk pauses sampling instead of ending it)."""
        self.store = store
        self.reservations = reservations
        self.disk = disk
        self.settings = settings
        self._write = write
        self._recorded_capacity = settings.capacity
        self.backpressure: str | None = None
        """Why the loop waits for room (:data:`CACHE_FULL`, :data:`DISK_FULL`), None while it
        does not."""

    def reserve(self, cand: Candidate, *, lookahead: bool) -> bool:
        """Reserve room for ``cand``; a look-ahead download only takes room that is free.

        Evicting for the next window could take samples of the window before it that were
        fetched ahead of their cut and are not in an epoch yet. An eviction is an index write: on
        a full volume it meets SQLITE_FULL, which is no room now (the loop's write pauses
        sampling), not a failed index (the 600 s soak: a cut made samples evictable while the
        volume was full, and the sampler exited 1).
        """
        ok = self._write(lambda: self.reservations.reserve(
            cand.size, capacity=self.disk.effective_capacity, evict=not lookahead))
        if self.reservations.capacity is not None:
            self._record_capacity(self.reservations.capacity)
        return bool(ok)

    def skip_unfittable(self, cand: Candidate) -> bool:
        """Skip ``cand`` (counted, logged) when it is bigger than the cache could hold on this
        volume even empty; True if so.

        The listing's object limit comes from --capacity, which may be more than the volume
        holds: such an object would wait for room forever, first in line, and no key after it
        would be fetched. One that fits once other samples are evicted still waits (that is
        backpressure)."""
        largest = self.disk.largest()
        if cand.size <= largest:
            return False
        log.warning("skipping %r: %d bytes is more than the cache can ever hold on its filesystem "
                    "(%d bytes: --capacity %d, filesystem %d, %d kept free)", cand.key, cand.size,
                    largest, self.disk.capacity, self.disk.fs_bytes, self.disk.margin)
        self._write(lambda: self.store.mark_skipped(cand.key))
        return True

    def full(self, *, waiting_on_own: bool) -> None:
        """No room for the next download: backpressure, unless downloads of this loop are in flight
        or being admitted (they will land, which is not the cache being full)."""
        if not waiting_on_own:
            self.set_backpressure(DISK_FULL if self.disk.limited else CACHE_FULL)

    def _record_capacity(self, capacity: int) -> None:
        """Tell the store when the disk bounds the cache below --capacity (or stops doing so), so
        that epochs are cut to the budget that really exists and status shows it."""
        if abs(capacity - self._recorded_capacity) <= self._recorded_capacity // 100:
            return
        self._recorded_capacity = capacity
        policy = dataclasses.replace(self.settings.policy(), capacity=max(1, capacity))
        self._write(lambda: self.store.configure(policy))

    def set_backpressure(self, reason: str | None) -> None:
        if reason == self.backpressure:
            return
        self.backpressure = reason
        self._write(lambda: self.store.set_backpressure(reason))
        if reason == CACHE_FULL:
            stats = self.store.stats()
            log.warning("backpressure: cache full (%s of %s) and nothing evictable; "
                        "waiting for a cut or an epoch to retire",
                        format_size(stats.cache_bytes), format_size(stats.capacity_bytes))
        elif reason is None:
            log.info("backpressure cleared")


__all__ = ["CACHE_FULL", "DISK_FULL", "DiskFull", "Room"]
