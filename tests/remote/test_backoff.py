"""The one full-jitter backoff and the one throttle predicate (sidecar/remote/backoff.py).

Every caller's pause comes from here (the downloader's retries, a throttled key, a throttled
discovery page or index header, a failed listing run, ``epochfs index``'s spans), so the bounds,
the jitter and the growth are checked once, with a seeded generator; each caller's own tests
check its use of them.
"""

from __future__ import annotations

import random

import pytest

from epochfs.sidecar.download import RetryPolicy
from epochfs.sidecar.listing.background import RETRY_MAX, RETRY_MIN, pause_bound
from epochfs.sidecar.remote import RemoteError, Throttled, Unavailable
from epochfs.sidecar.remote.backoff import Backoff, doubled, full_jitter, is_throttled, jitter_bound
from epochfs.sidecar.sampler.throttle import Deferred
from epochfs.sidecar.store import Candidate


def test_the_bound_doubles_from_the_first_up_to_the_longest() -> None:
    assert [jitter_bound(0.1, 1.0, n) for n in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert jitter_bound(0.0, 10.0, 7) == 0.0  # no pause at all, as RetryPolicy(base=0) asks
    assert jitter_bound(0.5, 30.0, -1) == 0.5  # never below the first
    # A count far past any real one: capped, never an OverflowError or an infinite pause.
    assert jitter_bound(0.1, 10.0, 10**6) == 10.0
    assert jitter_bound(1e300, 5.0, 2000) == 5.0
    assert doubled(0.75, 1.0) == 1.0 and doubled(0.25, 1.0) == 0.5


def test_full_jitter_stays_within_zero_and_the_bound_and_spreads_over_it() -> None:
    rng = random.Random(7)
    draws = [full_jitter(2.0, rng) for _ in range(2000)]
    assert all(0.0 <= d <= 2.0 for d in draws)
    # Spread over the whole interval (full jitter, not a fixed pause nor "equal jitter" above bound/2).
    assert min(draws) < 0.05 and max(draws) > 1.95
    assert sum(d < 1.0 for d in draws) == pytest.approx(1000, abs=120)
    assert full_jitter(0.0, rng) == 0.0
    assert 0.0 <= full_jitter(1.0) <= 1.0  # the module's generator without one


def test_a_carried_bound_grows_after_each_pause_up_to_the_longest() -> None:
    backoff = Backoff(0.5, 3.0)
    rng = random.Random(1)
    seen = [backoff.pause(rng) for _ in range(5)]
    assert [bound for _, bound in seen] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert all(0.0 <= pause <= bound for pause, bound in seen)
    with pytest.raises(ValueError):
        Backoff(2.0, 1.0)


def test_every_caller_draws_the_same_pauses() -> None:
    """The callers' pauses are the helper's, draw for draw, under the same seed."""
    policy = RetryPolicy(base=0.1, cap=10.0)
    for attempt in (1, 2, 5, 12):
        assert policy.delay(attempt, random.Random(attempt)) == full_jitter(
            jitter_bound(0.1, 10.0, attempt - 1), random.Random(attempt))
    deferred = Deferred(base=0.1, cap=10.0, clock=lambda: 0.0, rng=random.Random(3))
    cand = Candidate("k", "0" * 32, 1, "v")
    delays = [deferred.defer(cand) for _ in range(4)]
    expected = random.Random(3)
    assert delays == [full_jitter(jitter_bound(0.1, 10.0, n), expected) for n in range(4)]
    # The listing thread's bound: doubled after a run that committed nothing, kept after one
    # that did, back to the first after a quiet run.
    assert pause_bound(None, 0) == RETRY_MIN
    assert pause_bound(RETRY_MIN, 0) == doubled(RETRY_MIN, RETRY_MAX)
    assert pause_bound(RETRY_MAX, 0) == RETRY_MAX


def test_throttling_is_told_from_the_chain() -> None:
    assert is_throttled(Throttled("SlowDown"))
    wrapped = RemoteError("listing page")
    wrapped.__cause__ = Throttled("503 SlowDown")
    assert is_throttled(wrapped)
    assert not is_throttled(Unavailable("connection refused"))
    assert not is_throttled(ValueError("a bug"))
