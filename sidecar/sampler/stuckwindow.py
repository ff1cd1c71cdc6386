"""Schedule mode: the backpressure reason, and the one ERROR line, for an epoch's window that can
never be cached beside the kept epochs (:meth:`.Room.full`).

Its download found no room after everything evictable was evicted, so the rest of the window waits
for an epoch to retire; but while no more epochs are live than --keep-epochs, the next to retire
goes only at the next cut, and that cut waits for the whole window. No epoch would be cut again:
said once per epoch as an ERROR with the ways out, and in the status as the reason for the
backpressure. (Live epochs beyond --keep-epochs retire once out of their in-use window: that is a
wait, not this; so is an epoch retired within --retire-grace, whose samples come free after it.)
"""

from __future__ import annotations

import logging

from epochfs.sidecar.config import SamplerSettings, format_size
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.stats import CACHE_FULL

log = logging.getLogger("epochfs.sampler")


class StuckWindows:
    """The windows found stuck, each logged once. Used from the fetch loop's thread only."""

    def __init__(self, *, store: Store, reservations: Reservations, settings: SamplerSettings) -> None:
        self.store = store
        self.reservations = reservations
        self.settings = settings
        self._logged: set[int] = set()
        """The epochs whose stuck window was logged."""

    def reason(self, target: int) -> str | None:
        """The reason to show when epoch ``target``'s window can never be cached (None: it can)."""
        live = [e.epoch for e in self.store.epochs()]
        if len(live) > self.settings.keep_epochs or self.store.retired_in_grace():
            return None  # an epoch retires once out of its in-use window, or its grace frees room
        kept = f"{live[0]}-{live[-1]}" if len(live) > 1 else (str(live[0]) if live else "none")
        if target not in self._logged:
            self._logged.add(target)
            self._log(target, kept)
        return f"{CACHE_FULL}: epoch {target}'s window cannot fit beside the kept epochs ({kept})"

    def _log(self, target: int, kept: str) -> None:
        """The ERROR line with the ways out. The figure is the whole cache: the kept epochs'
        samples and those fetched for the window since the newest cut (nothing else is left once
        eviction found no room)."""
        log.error("schedule mode is stuck: epoch %d's window cannot be cached beside the kept "
                  "epoch(s) %s (--keep-epochs %d): the cache holds %s of --capacity %s, the "
                  "samples they pin and those of epoch %d's window fetched so far; none retires "
                  "before epoch %d is cut, and that cut waits for the whole window, so no epoch "
                  "is cut again. Raise --capacity or --headroom, lower the schedule's growth or "
                  "--keep-epochs, or cut it now from what is cached with `epochfs cut --force`",
                  target, kept, self.settings.keep_epochs,
                  format_size(self.reservations.cache_bytes()),
                  format_size(self.settings.capacity), target, target)


__all__ = ["StuckWindows"]
