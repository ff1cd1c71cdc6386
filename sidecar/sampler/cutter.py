"""The sampler's cuts: every ``--cut-interval`` seconds, and those asked for (``epochfs cut``, the
FUSE server's cut on lookup) served as soon as samples land.

Apart from the fetch loop (:mod:`.loop`) because it is a schedule of its own: the loop calls
:meth:`CutSchedule.tick` on each turn, and :meth:`CutSchedule.serve_requests` both after each
admitted batch (on the admitter's thread, so a waiting cut sees the samples that let it happen)
and while nothing is in flight. An epoch identical to the newest one is only cut under
backpressure, where pushing the oldest pinned epoch out is what frees room.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from epochfs.sidecar.metrics import process_metrics
from epochfs.sidecar.store import Store

log = logging.getLogger("epochfs.sampler")


class CutSchedule:
    """Cuts of ``store`` every ``interval`` seconds (0: none) and on request; store writes go
    through ``write`` (the loop's: a full disk pauses instead of ending the sampler)."""

    def __init__(self, store: Store, interval: float, write: Callable[[Callable[[], Any]], Any]) -> None:
        self.store = store
        self.interval = interval
        self._write = write
        self.last = time.monotonic()
        """When the last cut was made (on request or by the interval)."""
        # A restart counts its arrivals from 0: where none came after the newest epoch's cut, the
        # first tick cuts no copy of it (else each restart spends a number, pushing an epoch out).
        self._samples_at_cut = -1 if store.arrived_since_newest() else 0

    def serve_requests(self) -> None:
        """Cut the epochs asked for whose samples have landed."""
        for n, waited in self.store.process_cut_requests():
            log.info("cut epoch %d on request (waited %.1fs)", n, waited)
            process_metrics().cut_waited(waited)
            self.last = time.monotonic()

    def tick(self, now: float, *, samples: int, backpressure: bool) -> None:
        """The interval's cut when due; ``samples`` admitted so far (the same as at the last
        cut: no new epoch unless under ``backpressure`` or none exists yet)."""
        if self.interval <= 0 or now - self.last < self.interval:
            return
        self.last = now
        if backpressure or self._adds(samples) or self.store.newest_epoch() is None:
            n = self._write(self.store.cut)
            if n is not None:
                self._samples_at_cut = samples
                log.info("cut epoch %d (every %.0fs)", n, self.interval)

    def _adds(self, samples: int) -> bool:
        """The next epoch would differ from the newest one. Snapshot mode: a sample arrived since
        the last cut (its epoch is the newest samples). Schedule mode: the next window holds a
        sample the newest epoch does not, asked of the store: its windows grow over samples
        fetched ahead of them, so the timer stopped cutting once every sample had arrived while
        the windows still grew (``epochfs cut`` then cut the next one at once). Asked through
        ``write``: measuring the window ahead writes to the index (None on a full disk: the
        count decides)."""
        adds = self._write(self.store.next_window_adds)
        return samples != self._samples_at_cut if adds is None else adds


__all__ = ["CutSchedule"]
