"""``reaper``'s scan on real zombies: forked children that exit and are not waited for.

An orphan (a child in a session of its own, the sampler's case) is reaped with its status; a
known pid and a child in this process's own session are left to whoever started them, with their
status intact. Made a child subreaper, this process gets a grandchild orphaned by its parent and
reaps it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from common import wait_until

from epochfs.sidecar.supervisor.reaper import (
    Reaped,
    is_subreaper,
    reap_orphans,
    set_subreaper,
    zombie_children,
)

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


def fork(body: Callable[[], int]) -> int:
    """A forked child that runs ``body`` and exits with what it returns (never back into pytest)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = body()
        finally:
            os._exit(code)
    return pid


def new_session_exit(code: int) -> Callable[[], int]:
    def body() -> int:
        os.setsid()
        return code
    return body


def killed_in_new_session() -> int:
    os.setsid()
    os.kill(os.getpid(), signal.SIGKILL)
    return 1


@pytest.fixture
def forked() -> Iterator[list[int]]:
    """Pids forked by the test; any left unreaped are waited for at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def zombies() -> set[int]:
    return {z.pid for z in zombie_children()}


def test_orphans_are_reaped_and_known_pids_and_own_session_are_left(forked: list[int]) -> None:
    orphan = fork(new_session_exit(7))
    killed = fork(killed_in_new_session)
    known = fork(new_session_exit(5))
    own_session = fork(lambda: 3)
    forked += [orphan, killed, known, own_session]
    wait_until(lambda: set(forked) <= zombies(), timeout=10, what="the four children exited")
    names = {z.pid: z.name for z in zombie_children()}
    # Only this test's: a zombie another test left in another session would be reaped too.
    reaped = [r for r in reap_orphans({known}) if r.pid in forked]
    assert sorted(reaped, key=lambda r: r.pid) == sorted(
        [Reaped(orphan, names[orphan], 7), Reaped(killed, names[killed], -signal.SIGKILL)],
        key=lambda r: r.pid)
    assert Reaped(killed, "x", -9).describe() == f"pid {killed} (x), killed by signal 9"
    # The others are still there, their statuses theirs to read.
    assert {known, own_session} <= zombies() and not {orphan, killed} & zombies()
    assert os.waitstatus_to_exitcode(os.waitpid(known, 0)[1]) == 5
    assert os.waitstatus_to_exitcode(os.waitpid(own_session, 0)[1]) == 3
    assert not [r for r in reap_orphans(()) if r.pid in forked]  # nothing of ours left: never blocks


def test_a_name_that_is_not_utf8_is_read_and_reaped(forked: list[int]) -> None:
    """A process names itself (``prctl(PR_SET_NAME)``) with any bytes: the scan must not stop at
    one that is not UTF-8 (it runs in the supervisor's loop and in every metrics scrape)."""
    def named() -> int:
        os.setsid()
        ctypes.CDLL(None).prctl(15, b"bad\xff\xfe")  # PR_SET_NAME
        return 6

    pid = fork(named)
    forked.append(pid)
    wait_until(lambda: pid in zombies(), timeout=10, what="the named child exited")
    [zombie] = [z for z in zombie_children() if z.pid == pid]
    assert zombie.name == "bad\ufffd\ufffd"
    assert [(r.pid, r.name, r.status) for r in reap_orphans(()) if r.pid == pid] == [
        (pid, "bad\ufffd\ufffd", 6)]


def test_a_subreaper_gets_and_reaps_an_orphaned_grandchild(forked: list[int]) -> None:
    report_r, report_w = os.pipe()  # the child tells the grandchild's pid through it

    def child() -> int:
        os.setsid()
        os.close(report_r)
        held_r, held_w = os.pipe()  # the grandchild exits once this end closes: at the child's exit

        def grandchild() -> int:
            os.close(held_w)
            os.close(report_w)
            os.read(held_r, 1)
            return 4

        pid = fork(grandchild)
        os.write(report_w, f"{pid}\n".encode())
        return 0

    was = is_subreaper()
    assert set_subreaper(True) and is_subreaper()
    try:
        pid = fork(child)
        forked.append(pid)
        os.close(report_w)
        with os.fdopen(report_r) as r:
            grandchild = int(r.readline())
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        forked.remove(pid)
        wait_until(lambda: grandchild in zombies(), timeout=10,
                   what="the orphaned grandchild a zombie child of this process")
        reaped = reap_orphans(())
        assert [(r.pid, r.status) for r in reaped if r.pid == grandchild] == [(grandchild, 4)]
    finally:
        if not was:
            set_subreaper(False)
    assert is_subreaper() == was
