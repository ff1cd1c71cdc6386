"""A token bucket shared by the download threads: ``--max-rate`` bytes per second in all.

Each thread takes tokens for the block it just read; when the bucket runs dry the thread reserves
what it needs (the bucket goes negative) and waits outside the lock for the deficit to refill, so
waiting threads queue fairly and the long-run rate never exceeds the limit. The clock and the wait
are injectable so tests check the arithmetic without timing anything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class RateLimiter:
    """At most ``rate`` bytes per second over time, with bursts up to ``burst`` bytes."""

    def __init__(
        self,
        *,
        rate: float,
        burst: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(rate / 10, 64 * 1024))
        if self.burst <= 0:
            raise ValueError("burst must be positive")
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = self.burst
        self._last = clock()

    def reserve(self, nbytes: int) -> float:
        """Take ``nbytes`` of tokens; returns the seconds the caller must wait before going on."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= nbytes
            return max(0.0, -self._tokens / self.rate)

    def take(self, nbytes: int, stop: threading.Event) -> bool:
        """Wait until ``nbytes`` may go; False when ``stop`` was set meanwhile."""
        delay = self.reserve(nbytes)
        return not (delay > 0 and stop.wait(delay))
