"""The sampler's answer to throttling: a fetch window (AIMD) and keys put back for later.

A throttled answer (S3 ``503 SlowDown``, HTTP 429, GCS ``rateLimitExceeded``) says the store wants
fewer requests from this node; it says nothing about the object. Retrying the object in its
download slot (as an outage is retried) does not lower the request rate, every slot keeps asking,
and giving it up after a few tries skipped it for good. So the sampler does what TCP does with a
congested link:

- :class:`FetchWindow` bounds the downloads in flight: halved on a throttled answer (at most once
  per ``cooldown``, so the answers of one burst count once), grown by one after a window's worth
  of successes, between 1 and ``--concurrency`` (additive increase, multiplicative decrease). A
  throttled key waiting for its delay holds its place in the window: a throttled answer comes
  back in one round trip, so without that a window of one would still ask ~50 times a second
  (the fleet model showed it), while with it the request rate falls with the delays;
- :class:`Deferred` holds the throttled keys, each fetched again after a full-jitter delay that
  doubles with the key's throttled answers in a row (``uniform(0, min(cap, base * 2**n))``), so
  nodes throttled at the same instant do not ask again at the same instant.

A store's throttling is per prefix or per account, and spreads over the keys asked; but a refusal
in throttling words may be about one object (a hot-object limit, an object under a restore, a
gateway answering 429 for one path). A key throttled :data:`ALONE_AFTER` times in a row, each time
after other keys came through since its previous throttled answer, is throttled *on its own*: its
answers no longer halve the window, it holds no place in the window while it waits, and its delay
keeps doubling past :data:`DEFER_CAP` up to :data:`ALONE_CAP`. It is still never skipped (a
throttled answer says nothing about the object), only asked rarely; once anything but throttling
answers it, it starts over. Throttling of the whole store throttles the others too, nothing comes
through between its answers, and the window answers it by halving.

Both are pure (no threads, no I/O): the clock and the random source are injected, and the loop
calls them from its one thread.
"""

from __future__ import annotations

import heapq
import itertools
import random
import time
from collections.abc import Callable

from epochfs.sidecar.remote.backoff import full_jitter, jitter_bound
from epochfs.sidecar.store import Candidate

THROTTLE_COOLDOWN = 0.1
"""Seconds after a halving in which further throttled answers do not halve the window again."""
DEFER_BASE = 0.1
"""Upper bound of the first full-jitter delay of a throttled key (seconds), doubled per answer."""
DEFER_CAP = 10.0
"""Longest upper bound of a throttled key's delay (seconds)."""
ALONE_AFTER = 3
"""Throttled answers in a row of one key, each after other keys came through, that make its
throttling its own: the first ones halve the window (they may be the start of the store's)."""
ALONE_CAP = 600.0
"""Longest upper bound of the delay of a key throttled on its own (seconds): asked a few times an
hour, so an object that the store refuses for a while is fetched soon after it stops."""


class FetchWindow:
    """How many downloads may be in flight: AIMD between 1 and ``limit`` (``--concurrency``)."""

    def __init__(self, limit: int, *, cooldown: float = THROTTLE_COOLDOWN,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if limit < 1 or cooldown < 0:
            raise ValueError("need limit >= 1 and cooldown >= 0")
        self.limit = limit
        self.cooldown = cooldown
        self.clock = clock
        self.size = limit
        self._successes = 0
        self._last_cut: float | None = None

    def throttled(self) -> bool:
        """A throttled answer: halve the window unless it was halved less than ``cooldown`` ago
        (the other answers of the same burst). True when it shrank."""
        now = self.clock()
        if self._last_cut is not None and now - self._last_cut < self.cooldown:
            return False
        self._last_cut = now
        self._successes = 0
        if self.size == 1:
            return False
        self.size = max(1, self.size // 2)
        return True

    def succeeded(self) -> bool:
        """A download came through: one more per window of successes. True when it grew."""
        if self.size >= self.limit:
            return False
        self._successes += 1
        if self._successes < self.size:
            return False
        self._successes = 0
        self.size += 1
        return True


class Deferred:
    """Throttled keys waiting for their full-jitter delay, soonest first."""

    def __init__(self, *, base: float = DEFER_BASE, cap: float = DEFER_CAP,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> None:
        if not 0 < base <= cap:
            raise ValueError("need 0 < base <= cap")
        self.base = base
        self.cap = cap
        self.clock = clock
        self.rng = rng or random.Random()
        self._heap: list[tuple[float, int, Candidate]] = []
        self._keys: set[str] = set()
        self._answers: dict[str, int] = {}
        self._seq = itertools.count()
        self._came_through = 0
        """Downloads that came through: what tells a key's throttling from the store's."""
        self._seen: dict[str, int] = {}
        """Each throttled key's :attr:`_came_through` at its last throttled answer."""
        self._lone: dict[str, int] = {}
        """Each throttled key's answers in a row that came after others came through."""
        self._since: dict[str, float] = {}
        """When each key throttled on its own was first throttled in its run of answers."""

    def __len__(self) -> int:
        return len(self._heap)

    def holds(self, key: str) -> bool:
        return key in self._keys

    def alone(self, key: str) -> bool:
        """``key``'s throttling is its own (:data:`ALONE_AFTER`): it does not halve the window."""
        return self._lone.get(key, 0) >= ALONE_AFTER

    def holding(self) -> int:
        """Waiting keys that hold a place in the fetch window (those not throttled on their own)."""
        return len(self._heap) - self.waiting_alone()

    def waiting_alone(self) -> int:
        """Waiting keys throttled on their own."""
        return sum(1 for key in self._keys if self.alone(key))

    def oldest_alone(self) -> float | None:
        """Seconds since the first throttled answer of the longest-throttled key on its own."""
        since = [self._since[key] for key in self._keys if self.alone(key) and key in self._since]
        return self.clock() - min(since) if since else None

    def defer(self, cand: Candidate, *, throttled: bool = True) -> float:
        """Put ``cand`` back after its throttled answer; returns its delay in seconds.
        ``throttled=False``: put back for another reason (a repair whose remote is down), with the
        same delays, never counted as throttled on its own."""
        key = cand.key
        n = self._answers.get(key, 0)
        self._answers[key] = n + 1
        if throttled:
            self._since.setdefault(key, self.clock())
            others = key not in self._seen or self._came_through > self._seen[key]
            self._lone[key] = self._lone.get(key, 0) + 1 if others else 0
            self._seen[key] = self._came_through
        cap = ALONE_CAP if self.alone(key) else self.cap
        delay = full_jitter(jitter_bound(self.base, max(cap, self.cap), n), self.rng)
        if key not in self._keys:
            self._keys.add(key)
            heapq.heappush(self._heap, (self.clock() + delay, next(self._seq), cand))
        return delay

    def came_through(self, key: str) -> None:
        """``key``'s download came through: a throttled key's next answer tells its own throttling."""
        self._came_through += 1
        self.fetched(key)

    def fetched(self, key: str) -> None:
        """``key`` came through (or failed for a reason of its own): its next throttle starts over."""
        self._answers.pop(key, None)
        self._seen.pop(key, None)
        self._lone.pop(key, None)
        self._since.pop(key, None)

    def due(self) -> Candidate | None:
        """A key whose delay has passed, or None."""
        if not self._heap or self._heap[0][0] > self.clock():
            return None
        _, _, cand = heapq.heappop(self._heap)
        self._keys.discard(cand.key)
        return cand

    def next_due_in(self) -> float | None:
        """Seconds until the next key is due (0 when one is), None when none waits."""
        if not self._heap:
            return None
        return max(0.0, self._heap[0][0] - self.clock())


__all__ = ["ALONE_AFTER", "ALONE_CAP", "DEFER_BASE", "DEFER_CAP", "THROTTLE_COOLDOWN", "Deferred",
           "FetchWindow"]
