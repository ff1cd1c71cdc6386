"""CPU and time accounting of the benchmarks: CPU seconds of this process, its reaped children or
any process (from /proc), :func:`timed`, :func:`mb_per_s` (decimal MB, 1e6 bytes, in every
benchmark) and :class:`Rates`.

Apart from :mod:`.harness` (processes, mounts, S3, scratch), which re-exports these names: every
benchmark calls them as ``harness.<name>``. Standard library only.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def cpu_seconds(pid: int | None, *, children: bool = True) -> float:
    """utime + stime of a process from /proc, with ``children`` those of its reaped children too
    (nan without a pid; OSError once the process is gone)."""
    if pid is None:
        return float("nan")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(x) for x in fields[11:(15 if children else 13)])
    return ticks / os.sysconf("SC_CLK_TCK")


def self_cpu() -> float:
    """User + system CPU seconds of this process (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def children_cpu() -> float:
    """User + system CPU seconds of this process's terminated and waited-for children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()`` and the seconds it took (``time.perf_counter``)."""
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def mb_per_s(nbytes: float, seconds: float) -> float:
    """Decimal megabytes (1e6 bytes) per second."""
    return nbytes / seconds / 1e6


class Rates:
    """For a result class (a dataclass with ``bytes`` and ``seconds`` fields): its rates."""

    bytes: int
    seconds: float

    @property
    def mb_per_s(self) -> float:
        return mb_per_s(self.bytes, self.seconds)

    def per_s(self, count: float) -> float:
        return count / self.seconds
