"""The outage breaker: tell a remote that is down from an object that is bad.

A failure that points at the remote as a whole (connection refused or reset, timeout, a 5xx
that is not throttling, a refusal of the credentials themselves: S3's ``InvalidAccessKeyId``,
``ExpiredToken``...) on ``OUTAGE_AFTER`` objects in a row means the remote is down: skipping those keys
would lose them for good, so the breaker keeps them for later and pauses new downloads, with a
pause that doubles up to a bound. Throttling (S3 ``SlowDown``, 429) is not an outage and never
reaches the breaker: the fetch window answers it (:mod:`.throttle`).

Only an answer to a request sent after a failure tells anything about that failure: a download
whose response came before the remote went down finishes afterwards (its body still being read,
slowly under ``--max-rate``, or for a large object): counted as answers, the 32 downloads in
flight would reset the streak between the first failures and have the failed keys skipped. So the
loop tells the breaker when each download is sent (:meth:`OutageBreaker.sent`), and a completion
(a success, or a failure of another kind: the remote answered) clears only the failures that came
before its download was sent (:meth:`OutageBreaker.succeeded`); the streak is the failures no
later answer has cleared.

The keys of the run-up (given up before the streak was long enough to tell) are held, neither
fetched nor skipped, until it tells: the outage keeps them with the rest. A held key whose failure
a later answer cleared may have met an outage too short to tell (a few seconds of connection
refused): it is fetched once more (:attr:`OutageBreaker._retried`), and skipped only when an answer
sent after that second failure clears it again: its failures were its own. With nothing else
left to fetch, no answer can come to tell: the held keys are fetched once more
(:meth:`OutageBreaker.retry_held`), their new failures count on toward the streak, so a remote
still down under several keys opens the breaker and keeps them; a key held again then is skipped
(a lone bad object at the end of a listing is not fetched for ever).

Downloads that keep the loop busy without telling anything (a key throttled again and again, a
large object still streaming) would hold a key for ever out of sight, neither fetched nor
skipped: so a key held longer than ``hold_for`` (:func:`hold_for`) is handled as with nothing
else left (:meth:`OutageBreaker.overdue`), whatever else is in flight. Each held key is named in
the log when it is held, and counted (:attr:`OutageBreaker.held_count`: the progress line,
``epochfs_keys_waiting{reason="held"}``).

The breaker tells its owner of each pause of an outage and of its end through the callback it is
built with (:class:`OutageChange`): the loop records them in the index (:mod:`.outagerecord`), where
the supervisor's ``/readyz``, ``status.json`` and ``epochfs status`` read the cause, and in the
``epochfs_remote_outage`` gauge. The log's lines are for people; nothing reads them back.

A key the breaker does not keep is given up (:func:`give_up`): skipped, and only then counted as
failed (``epochfs_remote_objects_total{result="failed"}``), as the store counts ``failed_total``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from epochfs.sidecar.metrics_sampler import process_metrics
from epochfs.sidecar.remote.base import CredentialsRefused
from epochfs.sidecar.store import Candidate
from epochfs.sidecar.store.outage import CAUSES

if TYPE_CHECKING:
    from epochfs.sidecar.store import Store

log = logging.getLogger("epochfs.sampler")

OUTAGE_AFTER = 5
"""Consecutive objects given up on remote-wide errors that make the sampler treat the remote as
down: it then pauses and keeps the keys instead of skipping them."""
OUTAGE_PAUSE = (2.0, 60.0)
"""First and longest pause while the remote is down (doubling in between)."""


def hold_for(attempts: int, read_timeout: float) -> float:
    """How long a key is held at most: the time another key's download takes to fail on a remote
    that is down (its attempts, each ending within ``--read-timeout`` of silence), so that the keys
    sent meanwhile have told an outage by then; at least the first outage pause."""
    return max(OUTAGE_PAUSE[0], attempts * read_timeout)


@dataclass(frozen=True)
class Held:
    """A key of the run-up: failed as unavailable at ``at`` (monotonic), the streak short of an outage."""

    cand: Candidate
    error: str | None
    at: float


@dataclass(frozen=True)
class OutageChange:
    """What the breaker reports at each pause of an outage (``cause`` set) and at its end
    (``cause`` None: the remote answered)."""

    cause: str | None
    """A key of :data:`~epochfs.sidecar.store.outage.CAUSES`, or None when the outage is over."""
    objects: int = 0
    """Objects that failed in a row."""
    error: str = ""
    """The failure that made this pause (unredacted: the recorder redacts it)."""


class OutageBreaker:
    """Counts remote-wide failures in a row; keeps keys and pauses while the remote is down.
    Used from the sampler's loop thread only; ``on_change`` is called on that thread at each
    pause and at the end of an outage (:class:`OutageChange`)."""

    def __init__(self, *, after: int = OUTAGE_AFTER, pause: tuple[float, float] = OUTAGE_PAUSE,
                 on_change: Callable[[OutageChange], None] | None = None,
                 hold_for: float = OUTAGE_PAUSE[1]) -> None:
        if after < 1 or not 0 < pause[0] <= pause[1] or hold_for <= 0:
            raise ValueError("need after >= 1, 0 < first pause <= longest pause and hold_for > 0")
        self.hold_for = hold_for
        self._on_change = on_change or (lambda change: None)
        self.after = after
        self.first_pause, self.longest_pause = pause
        self._streak = 0
        self._failed_at: deque[float] = deque(maxlen=after)
        """When the streak's last failures came: enough to tell whether an answer leaves an outage."""
        self._pause = self.first_pause
        self.paused_until = 0.0
        self._kept: deque[Candidate] = deque()
        self._kept_keys: set[str] = set()
        self._held: dict[str, Held] = {}
        self._sent: dict[str, float] = {}
        """When each download in flight was sent: what its answer can tell about."""
        self._retried: set[str] = set()
        """Keys whose failure a later answer cleared once, fetched again: cleared again, skipped."""

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

    @property
    def held_count(self) -> int:
        """Keys held now: neither in flight, fetched nor skipped."""
        return len(self._held)

    def sent(self, key: str, now: float | None = None) -> None:
        """The download of ``key`` starts now: its answer tells about the failures before it."""
        self._sent[key] = time.monotonic() if now is None else now

    def retry_held(self) -> list[tuple[Candidate, str | None]]:
        """Nothing else left to fetch, so no answer will come to tell: a held key is fetched once
        more first (its failure stays in the streak, so a remote still down under several keys
        opens the breaker and keeps them). One already fetched again so, and held again, is
        returned to be skipped: a lone object that fails every GET would otherwise be fetched for
        ever, with the outage's pauses, since nothing else is fetched to tell it from an outage."""
        held, self._held = list(self._held.values()), {}
        return self._fetch_again_or_skip(held)

    def overdue(self, now: float | None = None) -> list[tuple[Candidate, str | None]]:
        """The held keys held ``hold_for`` seconds and more, handled as :meth:`retry_held` handles
        them all: other downloads keep the loop busy, but none sent since may come to tell."""
        now = time.monotonic() if now is None else now
        late = [h for h in self._held.values() if now - h.at >= self.hold_for]
        for h in late:
            del self._held[h.cand.key]
        return self._fetch_again_or_skip(late)

    def _fetch_again_or_skip(self, held: list[Held]) -> list[tuple[Candidate, str | None]]:
        skip: list[tuple[Candidate, str | None]] = []
        for h in held:
            if h.cand.key in self._retried:
                self._retried.discard(h.cand.key)
                skip.append((h.cand, h.error))
            else:
                self._retried.add(h.cand.key)
                self.keep(h.cand)
        return skip

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

    def failed(self, cand: Candidate, error: str | None, now: float | None = None) -> bool:
        """A remote-wide failure of ``cand``, never skipped here: True when it is kept (the remote
        is down), False when it is held until the streak tells (:attr:`_held`)."""
        now = time.monotonic() if now is None else now
        self._sent.pop(cand.key, None)
        self._streak += 1
        self._failed_at.append(now)
        if not self.open:
            self._held[cand.key] = Held(cand, error, now)
            log.info("holding %r (%s): fetched again when later answers tell its failure from an "
                        "outage of the remote, within %.0fs", cand.key, error, self.hold_for)
            return False
        for held in self._held.values():  # the run-up was the outage's
            self.keep(held.cand)
        self._held = {}
        self.keep(cand)
        if now >= self.paused_until:
            cause = _cause(error)
            log.warning("%s (%d objects in a row: %s); pausing %.0fs, keys kept", CAUSES[cause],
                        self._streak, error, self._pause)
            self._on_change(OutageChange(cause, self._streak, error or ""))
            self.paused_until = now + self._pause
            self._pause = min(self.longest_pause, self._pause * 2)
        return True

    def succeeded(self, key: str) -> list[tuple[Candidate, str | None]]:
        """The remote answered the download of ``key`` (it came through, or failed for a reason
        of its own). Returns the held keys to be skipped: those whose failure came before this
        download was sent, and had been cleared so once already."""
        self._retried.discard(key)
        sent = self._sent.pop(key, None)
        if sent is None:  # not sent through :meth:`sent` (a repair in place): tells nothing
            return []
        self._clear_failures_before(sent)
        return self._clear_held_before(sent)

    def _clear_failures_before(self, sent: float) -> None:
        """Drop from the streak the failures that came before ``sent``: the remote answered after
        them. An outage with as many failures since stays open."""
        later = [t for t in self._failed_at if t >= sent]
        if len(later) == len(self._failed_at) == self.after:
            return
        was_open = self.open
        self._streak = len(later)
        self._failed_at = deque(later, maxlen=self.after)
        if not self.open:
            if was_open:
                log.info("remote reachable again")
                self._on_change(OutageChange(None))
            self._pause = self.first_pause

    def _clear_held_before(self, sent: float) -> list[tuple[Candidate, str | None]]:
        """Held keys that failed before ``sent``: fetched once more (an outage too short to tell
        may have failed them), or skipped when that was their second failure cleared so."""
        skip: list[tuple[Candidate, str | None]] = []
        for key, held in list(self._held.items()):
            if held.at >= sent:
                continue
            del self._held[key]
            if key in self._retried:
                self._retried.discard(key)
                skip.append((held.cand, held.error))
            else:
                self._retried.add(key)
                self.keep(held.cand)
        return skip


def _cause(error: str | None) -> str:
    """The outage's cause: the credentials when the store refuses them (the remote reads them
    again meanwhile: a rotated Secret is taken up), else the remote."""
    if error is not None and f"{CredentialsRefused.__name__}:" in error:
        return "credentials_refused"
    return "remote_unavailable"


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
