"""What a snapshot-mode download may take of the cache between two cuts (:meth:`.Room.reserve`):
free room up to the epoch budget, and above it the turn's share of the headroom.

A cut takes the newest ``capacity x (1 - headroom)`` bytes (the epoch budget). Past that budget,
the bytes fetched above the newest epoch are the headroom the next cut's epoch turns into, and the
epochs still pinned hold the rest: a cache filling from a small epoch took its free room whole
(690 samples after one of 334, a budget of 768 of 1,024), the next cut took the newest 768, the two
epochs pinned all 1,024, nothing was fetched until the cut after, and that cut repeated the epoch
before it. So free room above the budget is held to the same share as the room a download evicts
for (:meth:`TurnShare.left`).

The share counts the bytes that came above the newest epoch and those of the downloads in flight;
a download that brings nothing (it failed, was cancelled or throttled, or a full disk refused its
admission) gives its part back (:meth:`TurnShare.given_back`). Kept spent, a burst of downloads
that evict for their room and then fail on a remote outage would use up the turn, and the next
try would be refused with room free: "cache full ... and nothing evictable"
(``epochfs_backpressure`` 1) through the outage, which is no backpressure and silences the alert
for a stalled sampler."""

from __future__ import annotations

from epochfs.sidecar.config import SamplerSettings
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.store import Store


def within_budget(used: int, size: int, capacity: int, headroom: float) -> bool:
    """Whether ``size`` more bytes beside ``used`` (cached and reserved) stay within the epoch
    budget of ``capacity`` (``capacity x (1 - headroom)``): such room is taken without the turn's
    limit, as an epoch cut then holds every sample."""
    return used + size <= int(capacity * (1.0 - headroom))


def bytes_after(store: Store, last: int, enough: int) -> int:
    """Bytes of the samples admitted after sample ``last``, summed until more than ``enough``."""
    total = 0
    while total <= enough:
        page = store.samples_after(last, limit=4096)
        if not page:
            break
        total += sum(s.size for s in page)
        last = page[-1].id
    return total


class TurnShare:
    """Snapshot mode: the bytes fetched or in flight above the newest epoch, against the turn's
    share. Used from the fetch loop's thread only."""

    def __init__(self, *, store: Store, reservations: Reservations, settings: SamplerSettings) -> None:
        self.store = store
        self.reservations = reservations
        self.settings = settings
        self._turn: tuple[int, int] | None = None
        """The newest epoch and the bytes counted above it (None: not summed yet)."""

    def left(self, size: int, capacity: int) -> bool:
        """Whether a download of ``size`` bytes may evict for its room (or take free room past
        the epoch budget): in snapshot mode with ``--keep-epochs`` K >= 2 and an epoch live, at
        most ``capacity x headroom / K`` bytes above the newest epoch before the next cut (at
        least one download per cut). ``capacity``: the budget in force.

        A cut takes the newest ``capacity x (1 - headroom)``; the epochs pinned beside it are the
        same window a turn or more older. Fetching the whole headroom after a cut made the newest
        two epochs pin the whole cache, so nothing was fetched until the next cut retired the
        older, and that cut repeated the epoch before it: every other epoch brought nothing new.
        With K epochs each shifted by ``x`` new bytes, the room left after a cut is ``capacity x
        headroom - (K - 1) x``, so ``x = capacity x headroom / K`` is fetched at every cut. Room
        that is free is taken without this limit up to the epoch budget (a cache still filling,
        :func:`within_budget`), and with no epoch (the fetch benchmark's empty cache) nothing
        limits the fetch. Asked only past that budget; the bytes above the newest epoch are summed
        once per newest epoch (with the reservations then in flight) and counted on from the
        reservations made and given back since."""
        keep = self.settings.keep_epochs
        if self.settings.schedule is not None or keep < 2:
            return True
        live = self.store.epochs()
        if not live:
            return True
        share = int(capacity * self.settings.headroom / keep)
        newest = live[-1].epoch
        if self._turn is None or self._turn[0] != newest:
            extent = self.store.epoch_extent(newest)
            if extent is None:
                return True
            self._turn = (newest, bytes_after(self.store, extent.last, share) + self.reservations.reserved)
        taken = self._turn[1]
        return taken == 0 or taken + size <= share

    def taken(self, size: int) -> None:
        """A download of ``size`` bytes was given its reservation: it counts against the turn."""
        if self._turn is not None:
            self._turn = (self._turn[0], self._turn[1] + size)

    def given_back(self, size: int) -> None:
        """A download of ``size`` bytes that held a reservation ended with nothing admitted: its
        part of the turn is free again.

        Every reservation in flight is in the count: made since it was summed (:meth:`taken`), or
        before (the sum adds what was reserved then). A turn summed anew since gives it back too;
        where the sum stopped early (more than the share already came) the count stays above the
        share, as it should."""
        if self._turn is not None:
            self._turn = (self._turn[0], max(0, self._turn[1] - size))


__all__ = ["TurnShare", "bytes_after", "within_budget"]
