"""The download rate limit: token-bucket arithmetic on an injected clock (no timing in tests)."""

from __future__ import annotations

import threading

import pytest

from epochfs.sidecar.ratelimit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_the_rate() -> None:
    clock = Clock()
    rl = RateLimiter(rate=1000, burst=500, clock=clock)
    assert rl.reserve(500) == 0.0, "the burst goes at once"
    assert rl.reserve(1000) == pytest.approx(1.0), "the next 1000 bytes wait one second"
    clock.now += 1.0  # the caller waited
    assert rl.reserve(250) == pytest.approx(0.25)


def test_long_run_rate_never_exceeds_the_limit() -> None:
    clock = Clock()
    rl = RateLimiter(rate=10_000, burst=1000, clock=clock)
    sent = 0
    start = clock.now
    for _ in range(500):
        clock.now += rl.reserve(700)  # wait exactly as told
        sent += 700
    elapsed = clock.now - start
    assert sent / elapsed <= 10_000 * 1.01 + 1000 / elapsed


def test_idle_time_refills_only_up_to_the_burst() -> None:
    clock = Clock()
    rl = RateLimiter(rate=100, burst=50, clock=clock)
    rl.reserve(50)
    clock.now += 3600
    assert rl.reserve(50) == 0.0
    assert rl.reserve(100) == pytest.approx(1.0)


def test_take_is_cancelled_by_stop() -> None:
    rl = RateLimiter(rate=1, burst=1)
    stop = threading.Event()
    stop.set()
    assert rl.take(1, stop) is True, "the burst needs no wait"
    assert rl.take(1000, stop) is False, "a wait is cut short by the stop flag"


@pytest.mark.parametrize("kwargs", [{"rate": 0}, {"rate": -5}, {"rate": 10, "burst": 0}])
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RateLimiter(**kwargs)
