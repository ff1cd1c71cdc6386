"""A forked listing child is reaped soon after it dies, not one 5 ms sleep later.

A listing that fits the discovery's first page ends its forked child before the sampler is made
(``sampler/command.py``): closing its socket, a SIGKILL and :meth:`.Forked.wait`, on the way to the
first object GET. The wait looked at the child at once (not dead yet: the kill was just sent) and
then slept 5 ms; it now polls as :meth:`subprocess.Popen.wait` does, from 0.5 ms up. Real forked
children here; the sleeps the wait asks for are recorded, never timed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from epochfs.sidecar.listing import child
from epochfs.sidecar.listing.child import Forked


@pytest.fixture
def waiting_child() -> Iterator[Forked]:
    """A real child blocked until it is killed (a read of a pipe no one writes)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    forked = Forked(pid)
    yield forked
    os.close(w)
    forked.kill()
    forked.wait()


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The sleeps :meth:`Forked.wait` asks for, each still slept (the child must get to die)."""
    asked: list[float] = []
    real = time.sleep

    def sleep(seconds: float) -> None:
        asked.append(seconds)
        real(seconds)

    monkeypatch.setattr(child.time, "sleep", sleep)
    return asked


def test_a_killed_child_is_looked_at_again_within_a_millisecond(waiting_child: Forked,
                                                                  sleeps: list[float]) -> None:
    waiting_child.kill()
    assert waiting_child.wait() == -signal.SIGKILL
    assert sleeps == [] or sleeps[0] <= 0.001, sleeps  # 0.005 before


def test_the_polls_grow_to_their_cap_and_the_timeout_still_holds(waiting_child: Forked,
                                                                 sleeps: list[float]) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        waiting_child.wait(timeout=1.0)
    assert sleeps[0] == child.WAIT_POLL_FIRST
    assert max(sleeps) == child.WAIT_POLL_MAX
    assert sleeps == sorted(sleeps)
    assert waiting_child.poll() is None  # alive: a timeout reaps nothing


def test_a_child_that_exits_by_itself_gives_its_status() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(3)
    assert Forked(pid).wait(timeout=30) == 3
