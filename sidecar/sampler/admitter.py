"""The admitter: makes verified downloads visible in batches, off the scheduling thread.

Admission renames files and fsyncs their folders (a few ms per batch folder); doing it on a thread
of its own keeps the loop starting downloads meanwhile. A batch is the first download handed over
and whatever comes within ``ADMIT_LINGER`` of it, up to ``ADMIT_BATCH``: a batch's two index
commits cost the same at any size (its folder fsyncs grow with the fan-out folders it touches),
so small objects that finish one after another share them. After each
batch it asks the store to serve queued cut requests, whose condition may now hold.

Its backlog is bounded (:data:`ADMIT_BACKLOG`): the loop starts no download while that many wait
(:meth:`Admitter.full`), and the admitter wakes it (``on_room``) once a batch brings the backlog
below. Tiny objects download faster than a batch's commit admits them, and without the bound
verified downloads piled up in ``tmp/`` by the ten thousand, in no epoch and in no count, and a stop
then spent seconds admitting them. The loop never blocks on the admitter: a hand-over always
succeeds (the stop hands over what finishes in flight), so the backlog passes the bound by at most
the fetch window.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable

from epochfs.sidecar.download import LocalWriteError
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.store import Admission

log = logging.getLogger("epochfs.sampler")

ADMIT_BATCH = 512
"""Most verified downloads made visible in one store transaction."""
ADMIT_LINGER = 0.05
"""Seconds a batch waits for more downloads after its first. Each batch is two index commits
whatever its size, and an fsync of every fan-out folder it touched: taking only what was waiting, a
set of small objects was admitted one or two at a time (897 batches for 1,500 objects of 64 KiB,
~0.6 ms of CPU and ~4 ms of disk waits each, beside the downloads' own fsyncs). A sample becomes
visible this much later at most, and not at all once no download is left in flight (the last
of a set is admitted at once); a stop does not wait for it."""
LINGER_POLL = 0.005
"""Seconds between the looks at the downloads in flight while a batch waits for more."""
ADMIT_BACKLOG = 2 * ADMIT_BATCH
"""Verified downloads waiting for admission at which the loop starts no more: one batch being
committed and a full one ready behind it, so batches stay as large as the admitter takes them."""


def discard(temp: str | os.PathLike[str]) -> None:
    """Remove the temp file of a download that will not be admitted. A node volume gone read-only
    or failing refuses the removal too: one line, and the sampler goes on to report the failure
    that brought it here (an exception raised from here would hide it behind a traceback); the
    next start's recovery removes what is left in ``tmp/``."""
    try:
        os.unlink(temp)
    except FileNotFoundError:
        pass
    except OSError as e:
        log.error("could not remove the unadmitted download %s: %s", temp, e)


class Admitter:
    """One thread admitting verified downloads through the sampler's reservations."""

    def __init__(self, *, reservations: Reservations, on_batch: Callable[[list[Admission]], None],
                 on_failure: Callable[[list[Admission], BaseException], bool] | None = None,
                 on_room: Callable[[], None] | None = None, linger: float = ADMIT_LINGER,
                 pending: Callable[[], int] | None = None) -> None:
        self.reservations = reservations
        self.on_batch = on_batch
        """Called after each admitted batch (rates, queued cuts); its errors are logged only."""
        self.on_failure = on_failure
        """Called when a batch could not be admitted (its temp files already removed and its
        reservations released); True when the failure is handled (a full disk), False to stop."""
        self.on_room = on_room
        """Called (on the admitter's thread) when a batch brings a full backlog below the bound:
        the loop, waiting for room, starts downloads again at once."""
        self.linger = linger
        """Seconds a batch waits for more after its first (:data:`ADMIT_LINGER`)."""
        self.pending = pending
        """The downloads in flight, not yet handed over: a batch waits for more only while there
        are some (None: not known, it waits)."""
        self.fatal: BaseException | None = None
        """The error that stopped admissions (the node volume failed): the loop raises it."""
        self._q: queue.Queue[Admission | None] = queue.Queue()
        self._waiting: dict[str, Admission] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="admit", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def hand_over(self, admission: Admission) -> None:
        with self._lock:
            self._waiting[admission.key] = admission
        self._q.put(admission)

    def holds(self, key: str) -> bool:
        """``key`` is downloaded and waiting for its batch."""
        with self._lock:
            return key in self._waiting

    def busy(self) -> bool:
        with self._lock:
            return bool(self._waiting)

    def backlog(self) -> int:
        """Verified downloads waiting for admission, the batch being committed included."""
        with self._lock:
            return len(self._waiting)

    def full(self) -> bool:
        """The backlog is at its bound: the loop starts no download until ``on_room``."""
        with self._lock:
            return len(self._waiting) >= ADMIT_BACKLOG

    def finish(self, timeout: float = 60.0) -> None:
        """Admit what is waiting, end the thread, and undo what could not be admitted."""
        try:
            self._q.put(None)
            if self._thread.is_alive():
                self._thread.join(timeout=timeout)
        finally:
            with self._lock:
                left = list(self._waiting.values())
                self._waiting.clear()
            for a in left:  # only if admissions failed: nothing of them is visible
                discard(a.temp)
                self.reservations.release(a.size)

    def _next_batch(self) -> tuple[list[Admission], bool]:
        """The next batch: the first download handed over, and what comes within :attr:`linger`
        of it while downloads are in flight, up to :data:`ADMIT_BATCH`; True once the stop was
        handed over."""
        first = self._q.get()
        if first is None:
            return [], True
        batch = [first]
        deadline = time.monotonic() + self.linger
        while len(batch) < ADMIT_BATCH:
            left = deadline - time.monotonic()
            more = left > 0 and (self.pending is None or self.pending() > 0)  # may still come
            try:
                item = self._q.get(timeout=min(left, LINGER_POLL)) if more else self._q.get_nowait()
            except queue.Empty:
                if more:
                    continue
                break
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _run(self) -> None:
        done = False
        while not done:
            batch, done = self._next_batch()
            if not batch:
                continue
            try:
                self.reservations.admit(batch)
            except BaseException as e:
                for a in batch:
                    discard(a.temp)
                    self.reservations.release(a.size)
                if self.on_failure is not None and isinstance(e, Exception) and self.on_failure(batch, e):
                    continue
                if isinstance(e, OSError):
                    e = LocalWriteError(f"admitting {len(batch)} sample(s): {e}")
                self.fatal = self.fatal or e
                return
            finally:
                with self._lock:
                    was_full = len(self._waiting) >= ADMIT_BACKLOG
                    for a in batch:
                        self._waiting.pop(a.key, None)
                    room = was_full and len(self._waiting) < ADMIT_BACKLOG
                if room and self.on_room is not None:
                    self.on_room()
            try:
                self.on_batch(batch)
            except Exception as e:  # a cut that fails must not stop admissions
                log.error("after admitting a batch: %s", e)
