"""The floor on a body's rate counts the time spent waiting on the remote, not the caller's own
pauses between reads.

Why: the floor timed the gap between reads, which holds the ``--max-rate`` limiter's sleeps, the
hashing and the disk writes. With ``--max-rate 100Ki`` over the default 32 downloads (~3 KiB/s
each, under the 4 KiB/s floor) every object of more than ~96 KiB was abandoned as "a server that
trickles", retried and skipped, from a store answering at once. Both places the floor is held are
checked: the downloader's reads of a body (:mod:`epochfs.sidecar.received`) and a connection's
socket reads (:mod:`epochfs.sidecar.remote.httpconn`).
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable

import pytest

from epochfs.sidecar.received import Received
from epochfs.sidecar.remote.httpconn import _FlooredRaw
from epochfs.sidecar.remote.ratefloor import SlowBody

WINDOW = 0.2


def _instant(data: bytes, piece: int) -> Callable[[memoryview], int]:
    """A body that answers every read at once, ``piece`` bytes at a time."""
    body = io.BytesIO(data)
    return lambda buf: body.readinto(buf[:piece])


def _waiting(data: bytes, piece: int, wait: float) -> Callable[[memoryview], int]:
    """A body whose every read waits ``wait`` seconds on the remote for ``piece`` bytes."""
    body = io.BytesIO(data)

    def readinto(buf: memoryview) -> int:
        time.sleep(wait)  # the remote trickling: the wait is inside the read
        return body.readinto(buf[:piece])
    return readinto


def test_the_callers_pauses_between_reads_are_not_the_remotes() -> None:
    """Reads that return at once, the caller pausing 0.1 s between them (a rate limit: 100 bytes
    in 0.1 s is 1 KB/s, under the floor), over many windows: never stalled."""
    counted = Received().counting(_instant(bytes(1000), 100), key="k", size=1000, window=WINDOW)
    buf = memoryview(bytearray(100))
    got = 0
    for _ in range(10):
        got += counted(buf)
        time.sleep(0.1)  # the caller's own pause (what the limiter does between reads)
    assert got == 1000


def test_a_remote_that_trickles_inside_its_reads_is_stalled() -> None:
    counted = Received().counting(_waiting(bytes(1000), 1, 0.05), key="k", size=1000, window=WINDOW)
    buf = memoryview(bytearray(100))
    with pytest.raises(SlowBody, match="stalled"):  # 20 bytes a second
        for _ in range(100):
            counted(buf)


def test_the_read_that_ends_the_body_is_never_cut() -> None:
    """A slow last read brings the body's last bytes: it is there, nothing to retry."""
    counted = Received().counting(_waiting(bytes(30), 10, 0.12), key="k", size=30, window=WINDOW)
    buf = memoryview(bytearray(10))
    assert [counted(buf) for _ in range(3)] == [10, 10, 10]


def test_a_connections_socket_reads_count_only_their_own_wait() -> None:
    class _Raw:
        """A socket's reads (``recv_into``) and its ``makefile``."""

        def __init__(self, read: Callable[[memoryview], int]) -> None:
            self.recv_into = read

        def makefile(self, mode: str, buffering: int) -> io.BytesIO:
            return io.BytesIO()

    fast = _FlooredRaw(_Raw(_instant(bytes(1000), 100)), WINDOW)
    buf = memoryview(bytearray(100))
    for _ in range(10):
        assert fast.readinto(buf) == 100
        time.sleep(0.1)
    slow = _FlooredRaw(_Raw(_waiting(bytes(1000), 1, 0.05)), WINDOW)
    with pytest.raises(SlowBody):
        for _ in range(100):
            slow.readinto(buf)


def test_a_share_of_a_slow_shared_link_is_not_a_trickle() -> None:
    """32 downloads over a link of 100 KiB/s get ~3 KiB/s each, steadily: a slow link, not a
    server that trickles (a floor of 4 KiB/s cut them all, every window, and fetched nothing)."""
    counted = Received().counting(_waiting(bytes(3200), 160, 0.05), key="k", size=3200, window=WINDOW)
    buf = memoryview(bytearray(160))
    assert sum(counted(buf) for _ in range(20)) == 3200  # 3.2 KB/s over 1 s, five windows
