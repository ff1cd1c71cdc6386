"""The fetch window (AIMD) and the throttled keys' full-jitter delays, with an injected clock."""

from __future__ import annotations

import random

import pytest
from store_helpers import sid_of

from epochfs.sidecar.sampler.throttle import ALONE_AFTER, Deferred, FetchWindow
from epochfs.sidecar.store import Candidate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def cand(key: str) -> Candidate:
    return Candidate(key, sid_of(key), 1, "v")


def test_the_window_halves_once_per_burst_and_never_below_one() -> None:
    clock = Clock()
    w = FetchWindow(32, clock=clock)
    assert w.size == 32
    assert w.throttled() and w.size == 16
    clock.now += 0.05  # the same burst: answers of the downloads already in flight
    assert not w.throttled() and w.size == 16
    clock.now += 0.06  # over 100 ms after the halving: another one
    assert w.throttled() and w.size == 8
    for _ in range(10):
        clock.now += 0.1
        w.throttled()
    assert w.size == 1
    clock.now += 1
    assert not w.throttled() and w.size == 1


def test_the_window_grows_by_one_per_window_of_successes_up_to_the_limit() -> None:
    clock = Clock()
    w = FetchWindow(4, clock=clock)
    w.throttled()
    clock.now += 1
    w.throttled()
    assert w.size == 1
    grown = [w.succeeded() for _ in range(1 + 2 + 3)]  # 1 success at 1, 2 at 2, 3 at 3
    assert grown == [True, False, True, False, False, True] and w.size == 4
    assert not any(w.succeeded() for _ in range(50)) and w.size == 4  # never above --concurrency


def test_a_throttle_starts_the_count_of_successes_over() -> None:
    clock = Clock()
    w = FetchWindow(8, clock=clock)
    w.throttled()  # 4
    assert [w.succeeded() for _ in range(3)] == [False] * 3
    clock.now += 1
    w.throttled()  # 2: the three successes before it do not count
    assert [w.succeeded() for _ in range(2)] == [False, True] and w.size == 3


def test_bad_windows_are_refused() -> None:
    with pytest.raises(ValueError):
        FetchWindow(0)
    with pytest.raises(ValueError):
        Deferred(base=0)


def test_deferred_keys_come_back_after_a_full_jitter_delay_that_doubles() -> None:
    clock = Clock()
    d = Deferred(base=0.1, cap=1.0, clock=clock, rng=random.Random(1))
    delays = []
    for _ in range(6):
        delays.append(d.defer(cand("a")))
        assert d.holds("a")
        clock.now += 2  # past any delay (the cap is 1 s)
        got = d.due()
        assert got is not None and got.key == "a" and not d.holds("a")
    bounds = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert all(0 <= x <= b for x, b in zip(delays, bounds, strict=True))
    d.fetched("a")  # fetched: its next throttle starts from the first bound again
    assert d.defer(cand("a")) <= 0.1


def test_deferred_keys_are_due_soonest_first_and_once() -> None:
    clock = Clock()
    d = Deferred(base=1.0, cap=1.0, clock=clock, rng=random.Random(7))
    delays = {k: d.defer(cand(k)) for k in "abcde"}
    d.defer(cand("a"))  # already waiting: not twice
    assert len(d) == 5
    clock.now += 1.0
    order = []
    while (c := d.due()) is not None:
        order.append(c.key)
    assert order == sorted(delays, key=delays.__getitem__)
    assert d.next_due_in() is None


def test_a_key_throttled_in_a_row_while_others_come_through_is_throttled_on_its_own() -> None:
    clock = Clock()
    d = Deferred(base=0.1, cap=1.0, clock=clock, rng=random.Random(3))
    for i in range(ALONE_AFTER):
        assert not d.alone("a")
        d.defer(cand("a"))
        clock.now += 2
        assert d.due() is not None
        d.came_through(f"other{i}")  # another key came through between its answers
    assert d.alone("a") and d.waiting_alone() == 0  # alone, and not waiting now
    d.defer(cand("a"))
    assert d.waiting_alone() == 1 and d.holding() == 0  # holds no place in the window


def test_a_key_put_back_for_another_reason_is_never_throttled_on_its_own() -> None:
    """A repair whose remote is down is put back with the throttled keys' delays: the delays stay
    within the cap, and it is no key throttled on its own (no 600 s waits, not in that count)."""
    clock = Clock()
    d = Deferred(base=0.1, cap=1.0, clock=clock, rng=random.Random(3))
    delays = []
    for i in range(3 * ALONE_AFTER):
        delays.append(d.defer(cand("a"), throttled=False))
        clock.now += 2
        assert d.due() is not None
        d.came_through(f"other{i}")
    assert not d.alone("a") and max(delays) <= 1.0
