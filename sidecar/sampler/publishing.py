"""What the sampler loop tells the other processes while it runs: the bytes in flight, the bytes its
downloads have received so far (``epochfs status``, ``status.json``, the metrics) and its progress
line.

A mixin of :class:`~.loop.Sampler` (the attributes below are set by its ``__init__``), apart so the
loop's module stays the loop, as :mod:`.repairs` and :mod:`.shutdown` are.

The admitted counts move only when a download is complete and admitted: a large object's download
(a 1 GiB shard at 50 MiB/s) would read "0 B/s" and "0/1 samples" for its whole length, and a
sampler of tiny objects would hide the thousands of verified downloads waiting for admission behind
"24 in flight". So the bytes received (:mod:`epochfs.sidecar.received`) are written to the index
beside the reservations, and the progress line counts both.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from epochfs.sidecar.metrics import process_metrics
from epochfs.sidecar.store import Meta

if TYPE_CHECKING:
    from epochfs.sidecar.download import Downloader
    from epochfs.sidecar.reservations import Reservations
    from epochfs.sidecar.sampler.admitter import Admitter
    from epochfs.sidecar.sampler.breaker import OutageBreaker
    from epochfs.sidecar.sampler.diskspace import DiskSpace
    from epochfs.sidecar.sampler.progress import Rates
    from epochfs.sidecar.sampler.room import Room
    from epochfs.sidecar.sampler.throttle import Deferred, FetchWindow
    from epochfs.sidecar.store import Candidate, Store

PUBLISH_EVERY = 0.25
"""Seconds between writes of the bytes received in flight (with the reservations), while they
change: a plain ``epochfs status`` takes its rates from two readings a second apart, and what a
download brought between them is counted within this much. Downloads of small objects end within
a read, so the figure stays 0 and nothing more is written; the reservations are written with each
admission and each progress line, as they are without downloads in progress."""


class Publishing:
    """Writes the figures in flight to the index and logs the progress line, from the loop's tick."""

    store: Store
    reservations: Reservations
    downloader: Downloader
    admitter: Admitter
    breaker: OutageBreaker
    room: Room
    disk: DiskSpace
    window: FetchWindow
    deferred: Deferred
    rates: Rates
    progress_every: float
    stop: threading.Event
    _inflight: dict[str, Candidate]
    _published: int = -1
    """The bytes received last written (none yet: what a killed run left is replaced)."""
    _published_at: float = float("-inf")

    if TYPE_CHECKING:
        def _write(self, fn: Callable[[], Any]) -> Any: ...
        def _count_waiting(self) -> tuple[int, int, int]: ...

    def _publish(self, now: float) -> None:
        """Every :data:`PUBLISH_EVERY` seconds, when it changed: the bytes the downloads in flight
        have received (``inflight_downloaded_bytes``), and the bytes reserved for them, which the
        status shows it of (``480.0 MiB of 1.0 GiB in flight downloaded``)."""
        if now - self._published_at < PUBLISH_EVERY or self.room.backpressure or self.disk.refusing:
            return  # paused, or a full volume: its last pages are the backpressure record's
        self._published_at = now
        received = self.downloader.received.total()
        if received == self._published:
            return
        self._published = received
        process_metrics().set_inflight_received(received)
        self._write(self.reservations.publish)
        self._write(partial(self.store.set_meta, Meta.INFLIGHT_DOWNLOADED, str(received)))

    def _log_progress(self, now: float) -> None:
        """The progress line, every ``progress_every`` seconds (the reservations written with it)."""
        if now - self.rates.last_time < self.progress_every:
            return
        self._write(self.reservations.publish)
        # The state epochfs_sampler_idle reports: an outage's pause is no idle (the gauge says 0).
        throttled, alone, held = self._count_waiting()
        state = ("backpressure" if self.room.backpressure
                 else "waiting for the remote" if self.breaker.paused()
                 else "idle" if not self._inflight and not len(self.deferred) else "fetching")
        self.rates.log_progress(now, state=state, inflight=len(self._inflight),
                                retried=self.downloader.retried, stats=self.store.stats(),
                                window=(self.window.size, self.window.limit),
                                throttled=throttled, admitting=self.admitter.backlog(),
                                received=self.downloader.received.total(), alone=alone,
                                oldest_alone=self.deferred.oldest_alone(), held=held)

    def _unpublish(self) -> None:
        """At the stop: nothing is received in flight any more (the reservations are the stop's)."""
        self._write(partial(self.store.set_meta, Meta.INFLIGHT_DOWNLOADED, None))
        process_metrics().set_inflight_received(0)


__all__ = ["PUBLISH_EVERY", "Publishing"]
