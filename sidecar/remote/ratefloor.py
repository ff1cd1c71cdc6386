"""A floor on a body's rate: a download that brings too little while it waits on the remote is
stalled, not slow.

Why: a socket's read timeout is a silence timeout; it starts again with every byte, so a server
that trickles (1 byte a second: a degraded node, a pacing middlebox, a slow-loris proxy) would hold
a download, and its slot, for as long as it likes. So a body's reads are held to
:data:`MIN_BODY_RATE`: over each window of ``--read-timeout`` seconds *spent inside the reads*,
fewer bytes than that rate is :class:`SlowBody`, a :class:`~.base.Transient` failure (retried,
then skipped). Only the time inside the reads counts: the caller's own pauses between them (the
``--max-rate`` limiter's sleeps, hashing, disk writes) are not the server's, and a limit of
100 KiB/s over 32 downloads (3 KiB/s each) must not read as a trickle. The first read's wait is
the time to the first byte, which the read timeout bounds; it is not counted either.

One :class:`RateFloor` a body; two clock reads a read, no lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from epochfs.sidecar.remote.base import Transient

MIN_BODY_RATE = 64
"""Bytes a second below which a download counts as stalled over a window of the read timeout.
Low, because the downloads in flight share the node's link: a slow link (an on-premises store
behind a capped uplink, a throttled egress) gives each of them its share, and a floor above that
share would cut them all, again and again, and fetch nothing (4 KiB/s did, over 32 downloads on a
link of 100 KiB/s). 64 B/s is a share of a link of 2 KiB/s over 32 downloads (64 KiB/s over 1,024),
and still well above a server that trickles a byte or a few a second (a slow-loris proxy, a
middlebox that paces instead of answering 503), which is what it is there to cut."""


class SlowBody(Transient):
    """A body that brought fewer than :data:`MIN_BODY_RATE` bytes a second over a window."""


class RateFloor:
    """The reads of one body, held to :data:`MIN_BODY_RATE` over windows of ``window`` seconds
    spent inside them (``inf``: never checked)."""

    __slots__ = ("_first", "_got", "_waited", "window")

    def __init__(self, window: float) -> None:
        self.window = window
        self._waited = 0.0
        self._got = 0
        self._first = True

    def read(self, readinto: Callable[[Any], int | None], buf: Any, left: int | None = None) -> int | None:
        """``readinto(buf)``, timed; raises :class:`SlowBody` at the end of a window that brought
        too little. Never for a read that ends the body: one that returns nothing, or brings the
        ``left`` bytes the body still had (where the caller knows them)."""
        start = time.monotonic()
        n = readinto(buf)
        self.note(n, time.monotonic() - start, left)
        return n

    def note(self, n: int | None, seconds: float, left: int | None = None) -> None:
        """A read of ``n`` bytes that waited ``seconds``: :meth:`read` for a caller that times
        its own reads (a socket's, on the hot path of every download)."""
        if self._first:
            self._first = False
            return
        self._waited += seconds
        self._got += n or 0
        if n and self._waited >= self.window and (left is None or n < left):
            if self._got < MIN_BODY_RATE * self._waited:
                raise SlowBody(f"stalled: {self._got} bytes in {self._waited:.1f}s of reading, under "
                               f"the floor of {MIN_BODY_RATE} bytes/s (a server that trickles)")
            self._waited, self._got = 0.0, 0


__all__ = ["MIN_BODY_RATE", "RateFloor", "SlowBody"]
