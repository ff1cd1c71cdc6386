"""The sampler's cuts: every ``--cut-interval`` seconds, and those asked for (``epochfs cut``, the
FUSE server's cut on lookup) served as soon as samples land.

Apart from the fetch loop (:mod:`.loop`) because it is a schedule of its own: the loop calls
:meth:`CutSchedule.tick` on each turn, and :meth:`CutSchedule.serve_requests` both after each
admitted batch (on the admitter's thread, so a waiting cut sees the samples that let it happen)
and while nothing is in flight. An epoch identical to the newest one is only cut under
backpressure, where pushing the oldest pinned epoch out is what frees room.

A cut the cache's full volume refuses (the high-water mark or the index cannot grow) is no crash
and no silence: the loop is told at once (``on_full``: it measures the volume, and a pause under
way is then "disk full", the way out being room, not a cut), and the log says
``cannot cut epoch N now: the cache's volume is full`` when it starts, at most once a minute while
it lasts, and when a cut is made again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from epochfs.sidecar.metrics import process_metrics
from epochfs.sidecar.sampler.condlog import ConditionLog
from epochfs.sidecar.sampler.diskspace import is_disk_full
from epochfs.sidecar.store import MAX_EPOCH, Store

log = logging.getLogger("epochfs.sampler")


class CutSchedule:
    """Cuts of ``store`` every ``interval`` seconds (0: none) and on request; store writes go
    through ``write`` (the loop's: a full disk pauses instead of ending the sampler)."""

    def __init__(self, store: Store, interval: float, write: Callable[[Callable[[], Any]], Any], *,
                 on_full: Callable[[BaseException], None] | None = None) -> None:
        """``on_full``: told the error of an interval cut the full volume refused (the loop's
        room measures the volume again at once); None: the refusal is only logged."""
        self.store = store
        self.interval = interval
        self._write = write
        self._on_full = on_full
        self._refusals = ConditionLog(log)
        """The lines of interval cuts the full volume refuses: one per interval while it lasts."""
        self._refused = 0
        """Interval cuts refused since the last line about them."""
        self._refused_error = ""
        self._used_up = False  # every epoch number cut: said once, no cut tried again
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
            n = self._cut()
            if n is not None:
                self._samples_at_cut = samples
                log.info("cut epoch %d (every %.0fs)", n, self.interval)

    def _cut(self) -> int | None:
        """The interval's cut (None: its condition does not hold, or the full volume refused it).

        A refusal is told to ``on_full`` and logged here rather than left to the loop's write,
        which only notes a write the volume refused: a paused sampler would otherwise say "cache
        full; waiting for a cut" for as long as another tenant keeps the volume full, with no
        line about the cuts that fail and ``epochfs_disk_full`` at 0 (no alert fires)."""
        if self._used_up or self.store.next_epoch() > MAX_EPOCH:
            # A cut of the largest number (`epochfs cut --far`) leaves none for the next: the
            # store's refusal was a ValueError that ended the sampler at every tick, restarted for
            # ever. Sampling goes on; the epochs there stay readable.
            if not self._used_up:
                log.error("no epoch is cut at the interval any more: epoch %d, the largest epoch "
                          "number, is cut already; sampling goes on (a new cache starts the numbers "
                          "again)", MAX_EPOCH)
            self._used_up = True
            return None
        try:
            n = self.store.cut()
        except Exception as e:
            if not is_disk_full(e):
                raise
            self._refused += 1
            self._refused_error = str(e)
            self._tell_refusals(refused=True, end=None)
            if self._on_full is not None:
                self._on_full(e)
            return None
        if n is not None:
            self._tell_refusals(refused=False, end=n)
        return n

    def _tell_refusals(self, *, refused: bool, end: int | None) -> None:
        """Whether the full volume refuses the interval's cuts now; ``end``: the epoch cut."""
        self._refusals.update(refused, material=refused, start=self._refused_line, still=self._still_line,
                              end=lambda: f"cuts resume: epoch {end} cut, the cache's volume has room again")

    def _refused_line(self) -> str:
        self._refused = 0
        return (f"cannot cut epoch {self.store.next_epoch()} now: the cache's volume is full "
                f"({self._refused_error}); the cut is tried again every {self.interval:.0f}s until "
                "room returns (said at most once a minute while it lasts)")

    def _still_line(self) -> str:
        refused, self._refused = self._refused, 0
        return (f"cannot cut epoch {self.store.next_epoch()} now: the cache's volume is still full "
                f"({self._refused_error}); {refused} interval cut(s) refused since the last line")

    def _adds(self, samples: int) -> bool:
        """The next epoch would differ from the newest one. Snapshot mode: a sample was admitted
        after the newest epoch's cut, asked of the store: ``samples``, the loop's count of what
        the admitter took, also counts downloads dropped at admission (fetched again while
        cached, held back), which would cut a copy of the newest epoch. Schedule mode: the next
        window holds a sample the newest epoch does not, asked of the store: its windows grow
        over samples fetched ahead of them, so the timer stopped cutting once every sample had
        arrived while the windows still grew (``epochfs cut`` then cut the next one at once).
        Asked through ``write``: measuring the window ahead writes to the index (None on a full
        disk: the count decides)."""
        adds = self._write(self.store.next_window_adds)
        if adds is None:  # snapshot mode, or the window could not be measured
            adds = self._write(self.store.arrived_since_newest)
        return samples != self._samples_at_cut if adds is None else adds


__all__ = ["CutSchedule"]
