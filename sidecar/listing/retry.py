"""Reading again what the store throttled, in place, until it answers or the sampler stops.

Two reads come before the listing thread exists and so cannot lean on its pause: the ``--index``
header (:mod:`.indexfile`) and the pages that find the folders (:meth:`.paged.PagedSource.spans`).
A fleet asks for both at the same instant, so they are where a store throttles first. A sampler
that ended on such a SlowDown would be started again by the supervisor into the same throttle (the
fleet model counts 2,461 restarts of 1,000 flat-key nodes that way); reading the one request again
after a full-jitter pause, ``uniform(0, bound)`` with the bound doubling from the first to the
longest, asks the store far less and keeps what was read before it. Any other failure is raised.
The pause and the question are :mod:`epochfs.sidecar.remote.backoff`'s, as every caller's.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import TypeVar

from epochfs.sidecar.remote.backoff import Backoff, is_throttled

T = TypeVar("T")


def while_throttled(call: Callable[[], T], *, stop: threading.Event | None, rng: random.Random,
                    bounds: tuple[float, float], log: logging.Logger, what: str) -> T:
    """``call()``, called again after a full-jitter pause each time the store throttles it, until
    it answers or ``stop`` is set (then the last throttled error is raised; ``stop`` None: no
    retry). ``bounds``: the pause's first and longest bound. ``what`` names the request in the
    log line of each pause."""
    backoff = Backoff(*bounds)
    while True:
        try:
            return call()
        except Exception as e:
            if stop is None or stop.is_set() or not is_throttled(e):
                raise
            pause, bound = backoff.pause(rng)
            log.warning("%s: throttled (%s); trying again in %.1fs (full jitter up to %.1fs)", what, e,
                        pause, bound)
            if stop.wait(pause):
                raise


__all__ = ["while_throttled"]
