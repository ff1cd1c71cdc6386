"""The one poll of a stop while a start's request runs (sidecar/remote/stoplook.py), which the
listing's first request and the sampler's start both wait with: a stop set while the request
still runs is seen; a request that ended is its caller's outcome, even with a stop set beside it
(the listing's first request then hands back the request's own result or error)."""

from __future__ import annotations

import threading

from epochfs.sidecar.remote.stoplook import STOP_LOOK, stopped_first


def test_a_stop_set_while_the_request_runs_is_seen() -> None:
    done, stop = threading.Event(), threading.Event()
    setter = threading.Thread(target=stop.set)
    setter.start()
    try:
        assert stopped_first(done, stop) is True
    finally:
        setter.join()
    assert not done.is_set()


def test_an_ended_request_is_not_a_stop() -> None:
    done, stop = threading.Event(), threading.Event()
    done.set()
    assert stopped_first(done, stop) is False


def test_an_ended_request_wins_over_a_stop_set_beside_it() -> None:
    done, stop = threading.Event(), threading.Event()
    done.set()
    stop.set()
    assert stopped_first(done, stop) is False


def test_the_request_ending_on_another_thread_ends_the_wait() -> None:
    done, stop = threading.Event(), threading.Event()
    ender = threading.Thread(target=done.set)
    ender.start()
    try:
        assert stopped_first(done, stop) is False
    finally:
        ender.join()


def test_the_stop_is_looked_at_a_few_times_a_second() -> None:
    """A pod's termination grace is seconds: the look must come well inside it."""
    assert 0 < STOP_LOOK <= 0.5
