"""CPU sets for a benchmark's store and tools (``bench fetch --pin STORE:TOOLS``).

On a small machine a local S3 server (moto, itself Python) shares the cores with the tool it
serves, so a comparison of two tools also measures how much CPU each leaves the server: a tool
that spends more of its CPU beside the server slows the server's answers to it. A remote store runs
on machines of its own. Pinning the server to some CPUs and the tools to the others takes that
coupling out; every tool gets the same CPUs, so the comparison stays fair.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def cpu_list(text: str) -> set[int]:
    """``0``, ``0,2`` or ``0-3`` (as taskset and cpusets write them) as a set of CPU numbers;
    ValueError naming what is wrong."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"{text!r} is no CPU list (e.g. 0, 0,2 or 0-3)")
        lo, hi = int(first), int(last) if dash else int(first)
        if hi < lo:
            raise ValueError(f"{part!r}: the range ends before it starts")
        cpus.update(range(lo, hi + 1))
    return cpus


def pin_split(text: str) -> tuple[set[int], set[int]]:
    """``STORE:TOOLS`` as two disjoint CPU sets, each of CPUs this process may run on."""
    store, colon, tools = text.partition(":")
    if not colon:
        raise ValueError(f"{text!r}: give the store's CPUs and the tools', as STORE:TOOLS (e.g. 0:1)")
    try:
        a = cpu_list(store)
    except ValueError as e:
        raise ValueError(f"{text!r}: the store's CPUs: {e}") from None
    try:
        b = cpu_list(tools)
    except ValueError as e:
        raise ValueError(f"{text!r}: the tools' CPUs: {e}") from None
    if a & b:
        raise ValueError(f"{text!r}: the store's and the tools' CPUs overlap ({sorted(a & b)})")
    allowed = os.sched_getaffinity(0)
    if not (a | b) <= allowed:
        raise ValueError(f"{text!r}: CPU(s) {sorted((a | b) - allowed)} are not available here "
                         f"(this process may use {sorted(allowed)})")
    return a, b


def pin_process(pid: int, cpus: set[int]) -> int:
    """Pin every thread of ``pid`` to ``cpus`` (threads it starts later inherit it); returns how
    many were pinned. A thread that ended meanwhile is passed over."""
    pinned = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
            pinned += 1
        except ProcessLookupError:
            continue
    return pinned


@contextlib.contextmanager
def pinned(store_pid: int, store: set[int], tools: set[int]) -> Iterator[None]:
    """The store's process on ``store``, and the calling thread on ``tools`` for the length of the
    ``with`` block, so that every tool process and thread it starts there runs on them (Linux
    pins a thread; its children inherit it). The calling thread's CPUs are given back at the end
    (a benchmark run inside a test or a notebook must not leave it pinned); a thread started
    inside the block keeps the tools' CPUs."""
    own = os.sched_getaffinity(0)
    pin_process(store_pid, store)
    os.sched_setaffinity(0, tools)
    try:
        yield
    finally:
        os.sched_setaffinity(0, own)
