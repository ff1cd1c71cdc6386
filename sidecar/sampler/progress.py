"""The sampler's progress line: what this run fetched, at what rate, and what the cache holds."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from epochfs.sidecar.config import format_size
from epochfs.sidecar.status_estimate import per_second
from epochfs.sidecar.store import Stats

log = logging.getLogger("epochfs.sampler")


@dataclass
class Rates:
    """Counters of this run, and where the last progress line left them."""

    started: float
    samples: int = 0
    nbytes: int = 0
    skipped: int = 0
    last_time: float = 0.0
    last_bytes: int = 0
    last_samples: int = 0

    def log_progress(self, now: float, *, state: str, inflight: int, retried: int, stats: Stats,
                     window: tuple[int, int] = (0, 0), throttled: int = 0, admitting: int = 0,
                     received: int = 0, alone: int = 0, oldest_alone: float | None = None,
                     held: int = 0) -> None:
        """One line since the last one; rates over the interval between the two. ``window``: the
        fetch window and --concurrency; ``throttled``: keys waiting after a throttled answer, of
        them ``alone`` throttled on their own, the oldest for ``oldest_alone`` seconds; ``held``:
        keys the outage breaker holds (neither in flight, fetched nor skipped);
        ``admitting``: verified downloads waiting for admission (in no epoch and no count yet;
        said when there are any);
        ``received``: the bytes the downloads in flight have received so far, counted in the byte
        rate, so a large object's download reads as moving before it lands (a completed one's
        bytes leave that figure when they join the admitted ones: a rate never goes below 0). The
        byte rate in the unit that fits, as ``epochfs status`` writes it (a slow remote read
        "0.0 MB/s" at 40 KiB/s, as if nothing came)."""
        dt = max(now - self.last_time, 1e-9)
        nbytes = self.nbytes + received
        byte_rate = max(0, nbytes - self.last_bytes) / dt
        rate = (self.samples - self.last_samples) / dt
        self.last_time, self.last_bytes, self.last_samples = now, nbytes, self.samples
        log.info(
            "%s: %d sample(s) fetched this run (%.0f/s, %s), %d in flight (window %d/%d%s), "
            "%s%d skipped, %d retried, %d throttled%s%s; "
            "cache %s / %s, %d sample(s), epochs %s",
            state, self.samples, rate, per_second(byte_rate), inflight, *window,
            f"; {format_size(received)} received" if received else "",
            f"{admitting} downloaded waiting for admission, " if admitting else "", self.skipped,
            retried, throttled,
            f" ({alone} on their own, the oldest for {oldest_alone or 0:.0f}s)" if alone else "",
            f", {held} held" if held else "",
            format_size(stats.cache_bytes), format_size(stats.capacity_bytes), stats.samples,
            [e["epoch"] for e in stats.epochs] or "none",
        )
