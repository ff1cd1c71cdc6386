"""A process's children and its ``stat`` line, from ``/proc``: what the metrics read to find the
sampler's listing child (:mod:`.metrics_scrape`) and the supervisor to find the orphans it reaps
(:mod:`.supervisor.reaper`).

Read as bytes: a process names itself (``prctl(PR_SET_NAME)``, 15 bytes of anything), so its
``comm`` and ``stat`` need not be UTF-8, and a name that is not must not stop the reader (the
supervisor's loop, a scrape). Each read may find the process gone: then it is left out.
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Stat:
    """The fields of ``/proc/<pid>/stat`` that the sidecar reads."""

    pid: int
    name: str
    """Its ``comm``, undecodable bytes replaced (U+FFFD)."""
    state: str
    """``R``, ``S``, ``Z`` (exited, not yet waited for), ..."""
    ppid: int
    session: int
    start: int
    """When it started, in clock ticks after boot: with the pid, names one process (a pid reused
    by a later process has another)."""


PROC = Path("/proc")


def stat(pid: int, proc: Path = PROC) -> Stat | None:
    """``pid``'s :class:`Stat` (from ``proc``, ``/proc`` but in tests), or None where it is gone
    (or its line cannot be read)."""
    try:
        raw = (proc / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    head, _, tail = raw.rpartition(b")")  # the name may hold spaces and parentheses
    fields = tail.split()
    try:
        return Stat(pid=pid, name=head.partition(b"(")[2].decode("utf-8", "replace"),
                    state=fields[0].decode("ascii", "replace"), ppid=int(fields[1]), session=int(fields[3]),
                    start=int(fields[19]))
    except (IndexError, ValueError):
        return None


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes: each thread's ``children`` file (a child belongs
    to the thread that started it), or where the kernel has none (without
    CONFIG_PROC_CHILDREN) every process whose parent ``pid`` is."""
    if not _has_children_files():
        return _children_by_scan(pid)
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tasks:
        try:
            found.extend(int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_bytes().split())
        except OSError:  # the thread ended meanwhile
            continue
    return found


def _children_by_scan(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes from every process's ``stat`` (its parent's pid):
    one read per process in the container, for kernels without the children files."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := stat(int(entry))) is not None and st.ppid == pid:
            found.append(st.pid)
    return found


@functools.cache
def _has_children_files() -> bool:
    """Whether this kernel has ``/proc/<pid>/task/<tid>/children`` (looked at once)."""
    return Path(f"/proc/self/task/{threading.get_native_id()}/children").exists()


__all__ = ["Stat", "children", "stat"]
