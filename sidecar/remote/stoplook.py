"""Waiting for a remote request that may never end, while looking at a stop.

A request to a store that accepted the connection and never answers blocks for the whole
``--read-timeout`` (up to an hour), and the blocked call cannot be interrupted from outside;
a pod's termination grace is seconds. So the start's requests run while another thread waits
for them here, looking at the stop every :data:`STOP_LOOK`, and the caller acts on a stop at
once: the listing's first request gives up its wait (:mod:`epochfs.sidecar.listing.firstrequest`),
the sampler's start closes the remote under its blocked read (:mod:`epochfs.sidecar.sampler.startstop`).
Here, below both, so the two share one poll and one interval.
"""

from __future__ import annotations

import threading

STOP_LOOK = 0.1
"""Seconds between looks at the stop while a request runs: a stop is acted on within this."""


def stopped_first(done: threading.Event, stop: threading.Event) -> bool:
    """Wait until ``done`` or ``stop`` is set: True when the stop came first (``done`` still unset
    at a look that found the stop set), False once ``done`` is set."""
    while not done.wait(STOP_LOOK):
        if stop.is_set():
            return True
    return False


__all__ = ["STOP_LOOK", "stopped_first"]
