"""Bytes received by the downloads in progress: what shows a large object's download moving.

The admitted counts (``fetched_bytes_total``, the progress line's rate) grow only once a download
is complete and admitted, so a 1 GiB shard at 50 MiB/s reads "0 B/s" and "0/1 samples" for its
twenty seconds. The downloader counts what each body has brought so far here, and the sampler
publishes the sum (``inflight_downloaded_bytes``) for ``epochfs status``, its rates and the metrics.

Counting is on the download's hot path (one read of the remote's body, up to a block of 1 MiB, at a
time), so it takes no lock: each worker thread adds to its own :class:`Received`, and a reader sums
them (a Python int another thread writes is read whole under the GIL; a sum may be a read behind).

The same reads hold every backend's downloads to the floor on a body's rate
(:class:`~epochfs.sidecar.remote.ratefloor.RateFloor`, the window ``--read-timeout``): a download
stalled there is abandoned (:class:`SlowBody`, a transient failure: retried, then skipped) with a
WARNING naming its key. At this level the floor sees a block's rate when the block's read returns
(two clock reads a block, from the vDSO); the http(s) connections hold each ``recv`` to it under
their buffer (:mod:`epochfs.sidecar.remote.httpconn`), so a trickle there is cut within a window,
whatever the block's size.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from epochfs.sidecar.remote.ratefloor import RateFloor, SlowBody

log = logging.getLogger("epochfs.download")


class Received:
    """The bytes one worker thread's download in progress has received (0 between downloads)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def counting(self, readinto: Callable[[memoryview], int], *, key: str = "", size: int = 0,
                 window: float = float("inf")) -> Callable[[memoryview], int]:
        """``readinto`` that adds what each read brings to this count, and raises :class:`SlowBody`
        when the reads of the body of ``key`` (``size`` bytes) fall below the floor over a window
        of ``window`` seconds (the body's end is never cut: it is there)."""
        floor = RateFloor(window)

        def counted(buf: memoryview) -> int:
            try:
                n = floor.read(readinto, buf, size - self.n)
            except SlowBody as e:
                log.warning("download of %r stalled (%s): abandoned, retried", key, e)
                raise
            if n:
                self.n += n
            return n or 0

        return counted


class InFlightBytes:
    """Every worker thread's :class:`Received`, summed on demand."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: list[Received] = []
        self._local = threading.local()

    def here(self) -> Received:
        """This thread's count, made (and listed, the one time the lock is taken) at its first use."""
        mine: Received | None = getattr(self._local, "count", None)
        if mine is None:
            mine = self._local.count = Received()
            with self._lock:
                self._counts.append(mine)
        return mine

    def total(self) -> int:
        """Bytes received so far by the downloads in progress; a download's leave when it ends."""
        with self._lock:
            counts = list(self._counts)
        return sum(c.n for c in counts)


__all__ = ["InFlightBytes", "Received"]
