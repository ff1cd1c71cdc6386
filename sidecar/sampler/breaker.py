"""The outage breaker: tell a remote that is down from an object that is bad.

A failure that points at the remote as a whole (connection refused or reset, timeout, a 5xx
that is not throttling) on ``OUTAGE_AFTER`` objects in a row means the remote is down: skipping those keys
would lose them for good, so the breaker keeps them for later and pauses new downloads, with a
pause that doubles up to a bound. One success closes it again. The keys of the run-up (given up
before the streak was long enough to tell) are held, neither fetched nor skipped, until it
tells: the outage keeps them with the rest, and a success or a failure of another kind (the
remote is up: their failures were their own) hands them back to be skipped
(:meth:`OutageBreaker.succeeded`), as does a loop with nothing else to fetch
(:meth:`OutageBreaker.release`): skipped at once, a 10 s outage would lose them. Throttling
(S3 ``SlowDown``, 429) is not an outage and never reaches the breaker: the fetch window answers
it (:mod:`.throttle`).

A key the breaker does not keep is given up (:func:`give_up`): skipped, and only then counted as
failed (``epochfs_remote_objects_total{result="failed"}``), as the store counts ``failed_total``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from epochfs.sidecar.metrics_sampler import process_metrics
from epochfs.sidecar.store import Candidate

if TYPE_CHECKING:
    from epochfs.sidecar.store import Store

log = logging.getLogger("epochfs.sampler")

OUTAGE_AFTER = 5
"""Consecutive objects given up on remote-wide errors that make the sampler treat the remote as
down: it then pauses and keeps the keys instead of skipping them."""
OUTAGE_PAUSE = (2.0, 60.0)
"""First and longest pause while the remote is down (doubling in between)."""


class OutageBreaker:
    """Counts remote-wide failures in a row; keeps keys and pauses while the remote is down.
    Used from the sampler's loop thread only."""

    def __init__(self, *, after: int = OUTAGE_AFTER, pause: tuple[float, float] = OUTAGE_PAUSE) -> None:
        if after < 1 or not 0 < pause[0] <= pause[1]:
            raise ValueError("need after >= 1 and 0 < first pause <= longest pause")
        self.after = after
        self.first_pause, self.longest_pause = pause
        self._streak = 0
        self._pause = self.first_pause
        self.paused_until = 0.0
        self._kept: deque[Candidate] = deque()
        self._kept_keys: set[str] = set()
        self._held: dict[str, tuple[Candidate, str | None]] = {}
        """The run-up's keys: failed as unavailable while the streak was short of an outage."""

    @property
    def open(self) -> bool:
        """The remote counts as down."""
        return self._streak >= self.after

    def paused(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) < self.paused_until

    def is_kept(self, key: str) -> bool:
        return key in self._kept_keys or key in self._held

    @property
    def holding(self) -> bool:
        """Keys of a run-up are held, waiting for the streak to tell an outage from bad objects."""
        return bool(self._held)

    def release(self) -> list[tuple[Candidate, str | None]]:
        """The held keys and their errors, handed back to be skipped (no outage was recognised)."""
        held, self._held = list(self._held.values()), {}
        return held

    def next_kept(self, busy: Callable[[str], bool]) -> Candidate | None:
        """A key kept through an outage, to fetch again first (passing over busy ones)."""
        while self._kept:
            cand = self._kept.popleft()
            self._kept_keys.discard(cand.key)
            if not busy(cand.key):
                return cand
        return None

    def keep(self, cand: Candidate) -> None:
        """Keep ``cand`` to fetch again first (its download could not finish for a reason of the
        node's, such as a full disk)."""
        if cand.key not in self._kept_keys:
            self._kept.append(cand)
            self._kept_keys.add(cand.key)

    def failed(self, cand: Candidate, error: str | None) -> bool:
        """A remote-wide failure of ``cand``, never skipped here: True when it is kept (the remote
        is down), False when it is held until the streak tells (:attr:`_held`)."""
        self._streak += 1
        if not self.open:
            self._held[cand.key] = (cand, error)
            return False
        for held, _ in self.release():  # the run-up was the outage's
            self.keep(held)
        self.keep(cand)
        now = time.monotonic()
        if now >= self.paused_until:
            log.warning("remote unavailable (%d objects in a row: %s); pausing %.0fs, keys kept",
                        self._streak, error, self._pause)
            self.paused_until = now + self._pause
            self._pause = min(self.longest_pause, self._pause * 2)
        return True

    def succeeded(self) -> list[tuple[Candidate, str | None]]:
        """An object came through (or failed for a reason of its own): the remote is up. Returns
        the held keys, to be skipped (their failures were their own)."""
        if self.open:
            log.info("remote reachable again")
        self._streak = 0
        self._pause = self.first_pause
        return self.release()


def give_up(store: Store, key: str) -> bool:
    """Skip ``key`` for good: its downloads kept failing (retries spent, or a failure not worth
    another try) and the loop keeps it for no outage nor pending repair. Counted as failed here, at
    the decision, not when the download gave up: the loop keeps many of those (an outage's keys,
    24 "failed" against 4 skipped in a reviewer's 60 s outage). Counted as the store counts
    ``skipped_total`` and ``failed_total``, once per key (a relist's retry that fails again with the
    object unchanged is not counted again, :data:`~epochfs.sidecar.store.catalog.SKIP_COUNTED`), so
    ``failed`` never passes ``skipped`` and equals status.json's ``failed_total``. Returns whether
    it was counted."""
    counted = store.mark_skipped(key, failed=True)
    if counted:
        process_metrics().remote_failed()
    return counted
