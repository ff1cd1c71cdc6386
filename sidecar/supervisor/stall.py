"""Is the folder publisher hung? Its ``status.json`` and its CPU time, watched together.

The publisher rewrites ``.epochfs/status.json`` every second (``FolderPublisher.status_seconds``)
at the end of a step, so a file that stopped changing is its first sign of a hang: a stopped
process, a deadlock, a write blocked on the folder's volume. It is not enough alone: one step can
take far longer than a second without anything wrong (an epoch written whole, as the first cut
after a restart is: seconds at 100k entries, tens of seconds at a million, more on a slow volume;
a recovery that removes a large leftover tree), and a full volume pauses the status rewrite on
purpose (the pause is recorded in the index and tried again every 2 s). A kill there would only
start that work again, and again. So a run counts as hung only when, for :data:`HUNG_AFTER`
seconds, neither did its ``status.json`` change nor did any of its threads run at all
(:func:`work_done`): a busy step and a paused publisher's retries run on the CPU, a hung one does
not. A spinning loop that never writes its status is not caught: it is not what a hang looks like.

The supervisor's watch (:meth:`~.watch.MountWatch._watch_publisher`) feeds a :class:`StallWatch`
each tick and kills a run it calls hung.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

HUNG_AFTER = 30.0
"""Seconds without a ``status.json`` rewrite (due every second) and without a moment of CPU time
before a publisher is hung: 30 rewrites missed, as ``epochfs status`` calls the file STALE after
30 s, and room for a loaded node, where a step waits for the CPU but still gets some of it."""

STUCK_AFTER = 10.0
"""Seconds after its SIGKILL a hung publisher still runs before the log says it is stuck in the
kernel (a SIGKILL ends a stopped or deadlocked process at once; a call blocked in the kernel
first has to return)."""

PROC = Path("/proc")

Work = tuple[int, int, int]
"""What :func:`work_done` reads: compared between readings, never added up."""


def work_done(pid: int, proc: Path = PROC) -> Work | None:
    """How much ``pid`` has run so far: the nanoseconds and time slices its threads ran (each
    thread's ``schedstat``; 0 where the kernel keeps none) and its user + system time in clock
    ticks (``stat``, every kernel). Any change means one of its threads ran; a stopped process, or
    one whose every thread waits on a lock or on I/O that never returns, changes none of them. None
    where ``/proc`` cannot tell (the process gone)."""
    base = proc / str(pid)
    try:
        raw = (base / "stat").read_bytes()
        tasks = os.listdir(base / "task")
    except OSError:
        return None
    fields = raw.rpartition(b")")[2].split()
    try:
        ticks = int(fields[11]) + int(fields[12])
    except (IndexError, ValueError):
        return None
    ran = slices = 0
    for tid in tasks:
        try:
            numbers = (base / "task" / tid / "schedstat").read_bytes().split()
            ran, slices = ran + int(numbers[0]), slices + int(numbers[2])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile; no schedstat
            continue
    return ran, slices, ticks


StatusKey = tuple[int, int] | None
"""``status.json``'s inode and mtime (each rewrite is a new file renamed over it); None: missing."""


@dataclass
class StallWatch:
    """One publisher run's last signs of life, read each tick; a new pid starts them afresh. And,
    once a run was killed hung, the ``status.json`` it left: the view counts as published again
    only once a later run has rewritten it (:meth:`proven`)."""

    after: float = HUNG_AFTER
    pid: int | None = None
    status: StatusKey = None
    status_seen: float = 0.0
    """When (monotonic) ``status.json`` last changed, or the run was first seen."""
    work: Work | None = None
    work_seen: float = 0.0
    """When (monotonic) the run's CPU time last moved, or the run was first seen."""
    left: StatusKey | tuple[()] = ()
    """The ``status.json`` a run killed hung left (``()``: no such run since the last proof)."""

    def observe(self, pid: int | None, status: StatusKey, now: float) -> float | None:
        """Record a tick's reading of run ``pid`` (None: no run); the seconds it has been hung
        when it is (nothing changed for :attr:`after` seconds), else None."""
        if pid is None:
            self.pid = None
            return None
        work = work_done(pid)
        if pid != self.pid:
            self.pid, self.status, self.status_seen, self.work, self.work_seen = pid, status, now, work, now
            return None
        if status != self.status:
            self.status, self.status_seen = status, now
        if work != self.work:
            self.work, self.work_seen = work, now
        still = now - max(self.status_seen, self.work_seen)
        return still if still >= self.after else None

    killed_at: float | None = None
    """When (monotonic) the run watched was killed hung; None once :meth:`stuck` said so."""

    def killed(self, status: StatusKey, now: float) -> None:
        """The run watched was killed hung, leaving ``status``."""
        self.left, self.killed_at = status, now

    def stuck(self, now: float) -> bool:
        """True once, :data:`STUCK_AFTER` seconds after the kill of a run that still runs (asked
        only while it does)."""
        if self.killed_at is None or now - self.killed_at < STUCK_AFTER:
            return False
        self.killed_at = None
        return True

    def proven(self, status: StatusKey) -> bool:
        """Whether ``status`` shows a publisher at work: no run was killed hung, or a later one
        has rewritten the file since (then forgotten: True from now on)."""
        if self.left != () and status == self.left:
            return False
        self.left = ()
        return True


def status_key(path: Path) -> StatusKey:
    """``path``'s :data:`StatusKey` (None while it is not a file)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (st.st_ino, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


__all__ = ["HUNG_AFTER", "STUCK_AFTER", "StallWatch", "StatusKey", "Work", "status_key", "work_done"]
