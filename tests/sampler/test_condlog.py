"""A lasting condition is logged when it starts, at most once a minute while it lasts and changes,
and when it ends; a flapping one no faster than that (:mod:`epochfs.sidecar.sampler.condlog`).

The clock is the test's (a minute passes without waiting one); the volume under
:class:`DiskSpace` is a real directory.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from epochfs.sidecar.sampler.condlog import EVERY, ConditionLog
from epochfs.sidecar.sampler.diskspace import DiskSpace


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def tell(cond: ConditionLog, active: bool, *, material: bool = False) -> None:
    cond.update(active, material=material, start=lambda: "start", still=lambda: "still",
                end=lambda: "end")


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_start_still_once_a_minute_end(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    cond = ConditionLog(logging.getLogger("test.condlog"), clock=clock)
    for _ in range(100):
        tell(cond, True, material=True)
    assert _lines(caplog) == ["start"]
    clock.now += EVERY / 2
    tell(cond, True, material=True)
    clock.now += EVERY / 2
    tell(cond, True)  # the change half a minute ago is said now
    clock.now += 5 * EVERY
    tell(cond, True)  # nothing changed since: nothing said
    tell(cond, False)
    assert _lines(caplog) == ["start", "still", "end"]


def test_a_flapping_condition_is_said_no_faster_than_once_a_minute(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    cond = ConditionLog(logging.getLogger("test.condlog"), clock=clock)
    for _ in range(600):  # ten minutes of a condition that comes and goes every second
        tell(cond, True)
        clock.now += 0.5
        tell(cond, False)
        clock.now += 0.5
    assert 2 <= len(_lines(caplog)) <= 2 * 10 + 2, _lines(caplog)


def test_a_volume_that_refuses_writes_is_said_at_the_start_each_minute_and_the_end(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="epochfs.sampler")
    disk = DiskSpace(tmp_path, capacity=1)  # a budget the directory's filesystem always holds
    clock = Clock()
    disk.episode.clock = clock
    full = OSError(errno.ENOSPC, "No space left on device")
    for _ in range(50):
        disk.filled(full)
    clock.now += EVERY + 1
    disk.filled(full)
    disk.effective_capacity(0)  # measured again: room for the budget
    lines = _lines(caplog)
    assert len(lines) == 3, lines
    assert lines[0].startswith("the cache's filesystem is full ([Errno 28]"), lines
    assert "50 write(s) refused as full since the last line" in lines[1], lines
    assert lines[2].startswith("the cache's filesystem has room for --capacity 1 bytes again"), lines
