"""The sampler's backpressure as live gauges of its own process, which need no room on the disk.

Why: ``epochfs_backpressure`` and ``epochfs_disk_full`` are read from the index at scrape time
(:class:`~epochfs.sidecar.metrics_scrape.StoreCollector`), and on a volume filled to its last
byte the index cannot be written: the sampler paused as "disk full" while both gauges said 0 for
as long as the volume stayed full. Under the supervisor these gauges live in the sampler's
multiprocess file, whose blocks were allocated before it wrote anything
(:mod:`epochfs.sidecar.metrics_files`), so setting them always works. The supervisor's exposition
takes the larger of the two sources (:data:`epochfs.sidecar.metrics_merge.EITHER`): the index's
record, which outlives the sampler, or the live sampler's word, which is dropped with its other
live gauges when it dies.

The gauges are made at the sampler's first pause, not at its start: prometheus-client is not
imported on the way to the first GET (tests/sampler/test_startup_imports.py). Made then, on a full
volume, they still need no room: the child's livemax file was allocated in full before anything
was written to it (:func:`epochfs.sidecar.metrics_files.reserve`), and prometheus-client adds
their values inside it. Until then they are absent, which the exposition reads as the index's
value alone.
"""

from __future__ import annotations

import threading
from typing import Any

from epochfs.sidecar.store.stats import DISK_FULL

BACKPRESSURE_HELP = "1 while sampling is paused (nothing evictable, or the disk is full), else 0."
DISK_FULL_HELP = "1 while sampling is paused because the cache's filesystem is full, else 0."
"""The help texts of the store's families of the same names (one family each in the exposition)."""


class PauseGauges:
    """``epochfs_backpressure`` and ``epochfs_disk_full`` of this process (livemax: a dead
    sampler's are dropped at its reaping)."""

    def __init__(self) -> None:
        from prometheus_client import Gauge

        self._backpressure: Any = Gauge("epochfs_backpressure", BACKPRESSURE_HELP,
                                        multiprocess_mode="livemax")
        self._disk_full: Any = Gauge("epochfs_disk_full", DISK_FULL_HELP, multiprocess_mode="livemax")
        self.show(None)

    def show(self, reason: str | None) -> None:
        """Sampling is paused for ``reason`` now (None: it is not)."""
        self._backpressure.set(0 if reason is None else 1)
        self._disk_full.set(1 if reason is not None and reason.startswith(DISK_FULL) else 0)


_lock = threading.Lock()
_gauges: PauseGauges | None = None


def pause_gauges() -> PauseGauges:
    """The process-wide :class:`PauseGauges` (made on first use: one registration per process)."""
    global _gauges
    with _lock:
        if _gauges is None:
            _gauges = PauseGauges()
        return _gauges


__all__ = ["BACKPRESSURE_HELP", "DISK_FULL", "DISK_FULL_HELP", "PauseGauges", "pause_gauges"]
