"""The admitter: makes verified downloads visible in batches, off the scheduling thread.

Admission renames files and fsyncs their folders (a few ms per batch folder); doing it on a thread
of its own keeps the loop starting downloads meanwhile. It takes whatever is waiting, up to
``ADMIT_BATCH``, so batches grow with the download rate and stay small when it is low. After each
batch it asks the store to serve queued cut requests, whose condition may now hold.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable

from epochfs.sidecar.download import LocalWriteError
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.store import Admission

log = logging.getLogger("epochfs.sampler")

ADMIT_BATCH = 512
"""Most verified downloads made visible in one store transaction."""


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
                 on_failure: Callable[[list[Admission], BaseException], bool] | None = None) -> None:
        self.reservations = reservations
        self.on_batch = on_batch
        """Called after each admitted batch (rates, queued cuts); its errors are logged only."""
        self.on_failure = on_failure
        """Called when a batch could not be admitted (its temp files already removed and its
        reservations released); True when the failure is handled (a full disk), False to stop."""
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
        first = self._q.get()
        batch: list[Admission] = [] if first is None else [first]
        done = first is None
        while len(batch) < ADMIT_BATCH:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                break
            if item is None:
                done = True
                break
            batch.append(item)
        return batch, done

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
                    for a in batch:
                        self._waiting.pop(a.key, None)
            try:
                self.on_batch(batch)
            except Exception as e:  # a cut that fails must not stop admissions
                log.error("after admitting a batch: %s", e)
