"""How long until epoch 0: the fetch rate from readings of the status document, and the words
that say it, shared by ``epochfs status`` (:mod:`epochfs.sidecar.status`) and ``/readyz``
(:mod:`epochfs.sidecar.supervisor.health`), which sit side by side in the layers and may not
import each other.

The status document holds counters, not rates: a rate needs two readings. ``status --watch``
has them (its redraws), ``/readyz`` keeps the readings of its own calls (:class:`FetchRate`), and a
plain ``epochfs status`` before the first cut reads twice, :data:`ESTIMATE_SECONDS` apart.
"""

from __future__ import annotations

import collections
import threading

from epochfs.sidecar.config import format_size

ESTIMATE_SECONDS = 1.0
"""Seconds between the two readings of a plain ``epochfs status`` before the first cut."""


def per_second(nbytes: float) -> str:
    """A byte rate in the unit that fits: ``512 B/s``, ``3.4 KiB/s``, ``2.1 MiB/s``."""
    return f"{format_size(int(nbytes))}/s"


def estimate(have: int, target: int, samples_per_s: float | None, bytes_per_s: float | None,
             inflight: tuple[int, int] | None = None) -> str:
    """``, ~20 s at 2.7 samples/s (2.1 MiB/s)``: the time left until ``target`` samples at the
    rate given; "" when there is no rate (one reading, or no fetch since the last) or nothing left.

    ``inflight``: the bytes the downloads in flight have received and the bytes they reserve (the
    status document's ``inflight_downloaded_bytes`` and ``inflight_bytes``), given where
    ``bytes_per_s`` counts the received ones. With bytes coming and no sample landing (a large
    object's download: "0/1 samples" for minutes) the line tells those downloads' progress and
    their time left instead: ``, downloading at 50.0 MiB/s: 480.0 MiB of 1.0 GiB in flight
    received, ~11 s left for those``."""
    if have >= target:
        return ""
    if not samples_per_s or samples_per_s <= 0:
        received, reserved = inflight or (0, 0)
        if not bytes_per_s or bytes_per_s <= 0 or reserved <= received:
            return ""
        return (f", downloading at {per_second(bytes_per_s)}: {format_size(received)} of "
                f"{format_size(reserved)} in flight received, ~{(reserved - received) / bytes_per_s:.0f} s "
                "left for those")
    return (f", ~{(target - have) / samples_per_s:.0f} s at {samples_per_s:.1f} samples/s "
            f"({per_second(bytes_per_s or 0.0)})")


class FetchRate:
    """Samples and bytes fetched per second over the last :attr:`WINDOW` seconds, from readings
    of the status counters (``fetched_total``, ``fetched_bytes_total``) at the times given.

    One reading at or before the window's start is kept, so that readings as far apart as a
    kubelet's probes (10 s by default) still give a rate; a counter that went back (a wiped
    cache) starts over; a reading older than the newest is left out. Thread-safe: ``/readyz``
    answers on several worker threads."""

    WINDOW = 10.0
    MIN_SPAN = 1.0
    """Seconds two readings must span to give a rate (closer ones are mostly rounding)."""

    def __init__(self) -> None:
        self._readings: collections.deque[tuple[float, int, int]] = collections.deque()
        self._lock = threading.Lock()

    def record(self, now: float, fetched: int, fetched_bytes: int) -> tuple[float, float] | None:
        """Add a reading; (samples/s, bytes/s) over the readings kept, or None before two
        readings span :attr:`MIN_SPAN` seconds."""
        with self._lock:
            readings = self._readings
            if readings and now < readings[-1][0]:
                # Taken before the newest (two /readyz answers at once, read before the lock):
                # it adds nothing, and clearing on it lost the estimate for the next second.
                (t0, n0, b0), (t1, n1, b1) = readings[0], readings[-1]
                span = t1 - t0
                return ((n1 - n0) / span, (b1 - b0) / span) if span >= self.MIN_SPAN else None
            if readings and fetched < readings[-1][1]:
                readings.clear()
            readings.append((now, fetched, fetched_bytes))
            while len(readings) >= 2 and readings[1][0] <= now - self.WINDOW:
                readings.popleft()
            t0, n0, b0 = readings[0]
            span = now - t0
            if span < self.MIN_SPAN:
                return None
            return (fetched - n0) / span, (fetched_bytes - b0) / span


__all__ = ["ESTIMATE_SECONDS", "FetchRate", "estimate", "per_second"]
