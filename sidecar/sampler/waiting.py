"""The keys the sampler's loop keeps waiting without fetching them: throttled keys (:mod:`.throttle`)
and the keys the outage breaker holds (:mod:`.breaker`), and what the loop says of them.

A mixin of :class:`~.loop.Sampler` (the attributes below are set by its ``__init__``), apart so the
loop's module stays the loop, as :mod:`.publishing` is. A key that waits is neither in flight nor
fetched nor skipped, so each kind is counted where the operator looks (the progress line,
``epochfs_keys_waiting``) and named in the log when it starts waiting: a key that waits for ever
out of sight is a key lost without a word.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from epochfs.sidecar.metrics import process_metrics
from epochfs.sidecar.sampler.breaker import give_up

if TYPE_CHECKING:
    from epochfs.sidecar.sampler.breaker import OutageBreaker
    from epochfs.sidecar.sampler.progress import Rates
    from epochfs.sidecar.sampler.throttle import Deferred, FetchWindow
    from epochfs.sidecar.store import Candidate, Store

log = logging.getLogger("epochfs.sampler")

WINDOW_LOG_EVERY = 10.0
"""Seconds between log lines about the fetch window shrinking (the shrinks between are counted)."""


class Waiting:
    """Throttled and held keys: the loop's handling of both, and their counts."""

    store: Store
    breaker: OutageBreaker
    window: FetchWindow
    deferred: Deferred
    rates: Rates
    _repairs: set[str]
    _shrinks: int = 0
    _window_logged: float = float("-inf")

    if TYPE_CHECKING:
        def _write(self, fn: Callable[[], Any]) -> Any: ...

    def _skip_held(self, failed: list[tuple[Candidate, str | None]]) -> None:
        """Skip keys whose downloads failed for reasons of their own (no outage)."""
        for cand, error in failed:
            log.warning("skipping %r: %s", cand.key, error)
            self._write(partial(give_up, self.store, cand.key))  # (counted failed there, once)
            self._repairs.discard(cand.key)
            self.rates.skipped += 1

    def _held_overdue(self) -> None:
        """Held keys past the breaker's deadline are fetched again (or skipped, the second time)
        even while other downloads keep the loop busy: none of them may have been sent to tell."""
        self._skip_held(self.breaker.overdue())

    def _throttled(self, cand: Candidate, error: str | None) -> None:
        """The store throttled ``cand``'s GET: never skipped, fetched again after a full-jitter
        delay; the fetch window halves (once per burst), logged at most every WINDOW_LOG_EVERY,
        unless the key is throttled on its own (:mod:`.throttle`): then only its delay grows."""
        was_alone = self.deferred.alone(cand.key)
        delay = self.deferred.defer(cand)
        log.debug("throttled %r (%s); again in %.2fs", cand.key, error, delay)
        if self.deferred.alone(cand.key):
            if not was_alone:
                log.warning("%r is throttled on its own (%s) while other keys come through: it no "
                            "longer narrows the fetch window and is asked again less and less often "
                            "(never skipped); next in %.0fs", cand.key, error, delay)
            return
        if not self.window.throttled():
            return
        process_metrics().set_fetch_window(self.window.size)
        self._shrinks += 1
        now = time.monotonic()
        if now - self._window_logged >= WINDOW_LOG_EVERY:
            log.warning("remote throttling (%s): fetch window %d of %d (%d shrink(s) since the last "
                        "line); throttled keys are kept and fetched again", error, self.window.size,
                        self.window.limit, self._shrinks)
            self._window_logged = now
            self._shrinks = 0

    def _count_waiting(self) -> tuple[int, int, int]:
        """Keys waiting: throttled (all), throttled on their own, held by the breaker; set in
        ``epochfs_keys_waiting`` as they are counted."""
        throttled, alone, held = len(self.deferred), self.deferred.waiting_alone(), self.breaker.held_count
        process_metrics().set_keys_waiting(throttled=throttled - alone, alone=alone, held=held)
        return throttled, alone, held


__all__ = ["WINDOW_LOG_EVERY", "Waiting"]
