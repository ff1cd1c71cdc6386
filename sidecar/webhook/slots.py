"""The review slots: at most ``MAX_IN_FLIGHT`` reviews decided at once, the next ones queued briefly.

Why a queue and not a 429 at once: a JobSet, a large Indexed Job or a Ray autoscaler creates its
pods in parallel batches, and the API server calls the webhook for each at the same moment. A
review takes milliseconds, so one that waits for a slot is answered well inside the webhook
configuration's ``timeoutSeconds``; a 429 at once fails the pod (with ``failurePolicy: Fail``) unless
the API server retries it, and client-go retries a 429 only when it carries ``Retry-After``. So a
review waits up to :data:`QUEUE_SECONDS` (a third of the API server's own timeout when shorter),
and only then, or when :data:`MAX_WAITING` reviews already wait, is it answered 429 with
``Retry-After: 1``. The slots belong to the server's event loop (an ``asyncio.Semaphore``: waiters
are served in their order of arrival).
"""

from __future__ import annotations

import asyncio
import re

MAX_IN_FLIGHT = 16
"""Admission requests decided at once (each in a worker thread); the next ones wait for a slot
instead of piling up threads and memory."""
QUEUE_SECONDS = 3.0
"""The longest a review waits for a slot before its 429: well inside the chart's
``webhook.timeoutSeconds`` (10 s), so the API server still has time to retry it."""
MAX_WAITING = 256
"""Reviews waiting for a slot at once; the next one is answered 429 at once. The bodies of
waiting reviews also count in the server's bound on bodies held (``MAX_READING_BYTES``)."""
RETRY_AFTER = "1"
"""``Retry-After`` of a 429, in seconds: client-go's REST client (the API server's, to call
webhooks) retries a 429 only when it carries one."""

_DURATION_RE = re.compile(r"([0-9]+(?:\.[0-9]*)?)(h|ms|us|µs|ns|m|s)")


def api_timeout(text: str | None) -> float | None:
    """The API server's ``timeout`` query parameter of a webhook call (client-go writes the
    configuration's ``timeoutSeconds`` there as a Go duration: ``10s``, ``1m0s``, ``2.5s``) in
    seconds, or None when absent or not a duration."""
    if not text or len(text) > 32:
        return None
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    total, end = 0.0, 0
    for m in _DURATION_RE.finditer(text):
        if m.start() != end:
            return None
        total += float(m.group(1)) * scale[m.group(2)]
        end = m.end()
    return total if end == len(text) and total > 0 else None


def queue_wait(limit: float, timeout_param: str | None) -> float:
    """How long one review may wait for a slot: ``limit``, or a third of the API server's timeout
    for this call when that is shorter (it needs the rest to read the 429 and retry)."""
    timeout = api_timeout(timeout_param)
    return limit if timeout is None else min(limit, timeout / 3)


class Slots:
    """``size`` slots and a queue of at most ``max_waiting`` reviews, on one event loop."""

    def __init__(self, size: int = MAX_IN_FLIGHT, max_waiting: int = MAX_WAITING) -> None:
        self.size = size
        self.max_waiting = max_waiting
        self.waiting = 0
        """Reviews waiting for a slot now."""
        self._free = asyncio.Semaphore(size)

    async def take(self, wait: float) -> bool:
        """True once a slot is taken (give it back with :meth:`release`); False when none frees
        within ``wait`` seconds, or the queue is full."""
        if not self._free.locked():
            await self._free.acquire()  # a free slot and nobody ahead: taken without waiting
            return True
        if self.waiting >= self.max_waiting or wait <= 0:
            return False
        self.waiting += 1
        try:
            # A slot handed over as the wait ends is kept (wait_for returns it) or given back by
            # the semaphore's own cancellation: none is lost.
            await asyncio.wait_for(self._free.acquire(), wait)
            return True
        except asyncio.TimeoutError:  # TimeoutError from Python 3.11, a class of its own on 3.10
            return False
        finally:
            self.waiting -= 1

    def release(self) -> None:
        self._free.release()
