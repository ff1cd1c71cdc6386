"""What a snapshot-mode download may take of the cache between two cuts (:meth:`.Room.reserve`):
free room up to the epoch budget, and above it the turn's share of the headroom.

A cut takes the newest ``capacity x (1 - headroom)`` bytes (the epoch budget). Past that budget,
the bytes fetched above the newest epoch are the headroom the next cut's epoch turns into, and the
epochs still pinned hold the rest: a cache filling from a small epoch took its free room whole
(690 samples after one of 334, a budget of 768 of 1,024), the next cut took the newest 768, the two
epochs pinned all 1,024, nothing was fetched until the cut after, and that cut repeated the epoch
before it. So free room above the budget is held to the same share as the room a download evicts
for (:meth:`.Room._turn_share_left`)."""

from __future__ import annotations

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


__all__ = ["bytes_after", "within_budget"]
