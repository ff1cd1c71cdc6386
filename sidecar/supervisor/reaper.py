"""Orphans reaped: processes the supervisor did not start that end up its children.

In the image the supervisor is PID 1 (``ENTRYPOINT epochfs sidecar``), so the kernel hands it every
orphan of the container: the sampler's listing child when the sampler dies (the child dies with
it, ``PR_SET_PDEATHSIG``), a helper of a killed FUSE server, anything ``kubectl exec`` left
behind. An orphan nobody waits for stays a zombie, holding a pid, for the pod's life: one per
sampler crash. Elsewhere (a dev machine, the tests) the supervisor makes itself a *child
subreaper* (:func:`set_subreaper`), so its children's orphans come to it all the same, not to the
host's init.

:func:`reap_orphans` waits for each zombie child by its pid, never ``waitpid(-1)``: a wait for any
child could take the exit status of one of the supervisor's own :class:`subprocess.Popen` children
before Popen reads it (Popen then reports status 0, and a crash looks like a clean exit). So a
zombie is left to Popen when its pid is among the ``known`` ones (the supervisor's children), or
when it is in the supervisor's own session: every process the supervisor starts is either a
known child (each runs in a session of its own) or a short command such as ``umount`` (in its
session, waited for by ``subprocess.run``, on any thread). Orphans come from the children's
sessions (the listing child is in the sampler's) or from ``kubectl exec`` (a session of its own).
The rule would leave unreaped only a process that one of those short commands left running,
and none of them (``mount``, ``umount``, ``fusermount3``) leaves one. Pids are not
reused while a zombie holds one, so the pid read in the scan is the process waited for. The
supervisor owns its process (``epochfs sidecar``): run inside another program, it would reap
that program's exited children of other sessions too.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
from collections.abc import Callable, Collection
from dataclasses import dataclass

from epochfs.sidecar import procfs

log = logging.getLogger("epochfs.supervisor")

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


@dataclass(frozen=True)
class Reaped:
    """An orphan waited for: its pid, name and exit status (as Popen gives it: a signal negated)."""

    pid: int
    name: str
    status: int

    def describe(self) -> str:
        how = (f"killed by signal {-self.status}" if self.status < 0 else f"exit status {self.status}")
        return f"pid {self.pid} ({self.name}), {how}"


def exit_words(status: int) -> str:
    """How a child ended, for a log line: ``exited with status 2``, or for a Popen status below 0
    ``was killed by signal 9 (SIGKILL: ...)``, where "status -9" said nothing of a signal, nor of
    the OOM killer that sends it at the container's memory limit."""
    if status >= 0:
        return f"exited with status {status}"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = "an unknown signal"
    why = ": a kill from outside, or the kernel's OOM killer at the memory limit" if -status == 9 else ""
    return f"was killed by signal {-status} ({name}{why})"


def _prctl() -> Callable[..., int] | None:
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # no libc prctl: not Linux
        return None
    return prctl


def is_subreaper() -> bool:
    """Whether this process is a child subreaper now (False where that cannot be asked)."""
    prctl = _prctl()
    value = ctypes.c_int(0)
    if prctl is None or prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
        return False
    return bool(value.value)


def set_subreaper(on: bool) -> bool:
    """Make this process a child subreaper (``on``) or not: orphans of its descendants then come
    to it, not to init. True when the kernel agreed; False (logged) where it cannot (not Linux,
    a seccomp filter): then only PID 1 gets orphans, which it still reaps."""
    prctl = _prctl()
    if prctl is None:
        log.warning("cannot become a child subreaper here (no prctl): orphans go to init")
        return False
    if prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        log.warning("cannot become a child subreaper (%s): orphans go to init", os.strerror(err))
        return False
    return True


def zombie_children(parent: int | None = None) -> list[procfs.Stat]:
    """The children of ``parent`` (this process by default) that have exited and wait to be
    reaped, from ``/proc``: state ``Z`` and that parent in each one's ``stat``."""
    parent = os.getpid() if parent is None else parent
    found = (procfs.stat(pid) for pid in procfs.children(parent))
    return [st for st in found if st is not None and st.state == "Z" and st.ppid == parent]


def reap_orphans(known: Collection[int]) -> list[Reaped]:
    """Wait for each zombie child of this process that it did not start: not in ``known`` (the
    pids of its own live Popen children, whose status is theirs to read) and not in its own
    session (see the module's docstring). Returns those reaped; never blocks."""
    own_session = os.getsid(0)
    reaped = []
    for zombie in zombie_children():
        if zombie.pid in known or zombie.session == own_session:
            continue
        try:
            pid, status = os.waitpid(zombie.pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else meanwhile
            continue
        if pid == zombie.pid:
            reaped.append(Reaped(pid=pid, name=zombie.name, status=os.waitstatus_to_exitcode(status)))
    return reaped


__all__ = ["Reaped", "exit_words", "is_subreaper", "reap_orphans", "set_subreaper", "zombie_children"]
