"""Which epochs readers are using, as the FUSE view tells the store: reads noted on the request
path and written later, and the folders held open in each epoch.

A read record (``Store.record_read``) keeps an epoch pinned for the in-use window, so a trainer's
epoch is not retired under it. Writing one takes the index's write lock, which a FUSE request must
never wait for: a request only notes the epoch here (debounced, no store call), and the refresher
writes the notes down (:meth:`EpochReads.flush`) off the request path. An epoch with a folder
open (``opendir`` without its ``releasedir`` yet) is held: the refresher renews its read record
however long the reader pauses (:meth:`~epochfs.fuse.view.View.renew_held`).

Apart from :mod:`.view` (the namespace, read from the store) because this is the view's one state
that readers change rather than the store, and its one write into the store.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Collection, Iterable

from epochfs.sidecar.store import EpochReader


def retired(epochs: Iterable[int], live: Collection[int]) -> list[int]:
    """Those of ``epochs`` that retired for good: not live, and older than the newest live epoch.
    Epoch numbers only grow, so such an epoch is never live again; one newer than every live epoch
    may have been cut since ``live`` was read (a cut on lookup), and is not counted. Per-epoch
    bookkeeping trims these, so it is bounded by the live epochs, not by every epoch ever read."""
    newest = max(live, default=None)
    return [n for n in epochs if newest is not None and n < newest and n not in live]


class EpochReads:
    """The reads noted and the folders held, per epoch. Thread-safe: FUSE calls it from many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_recorded: dict[int, float] = {}
        self._pending: set[int] = set()
        self._held: collections.Counter[int] = collections.Counter()

    def note(self, n: int, *, debounce: float) -> None:
        """Remember that epoch ``n`` was used; :meth:`flush` records it, at most once per
        ``debounce`` seconds (the first check takes no lock: this runs on every lookup)."""
        last = self._last_recorded.get(n)
        if last is not None and time.monotonic() - last < debounce:
            return
        with self._lock:
            self._pending.add(n)
            self._last_recorded[n] = time.monotonic()

    def forget_retired(self, live: Collection[int]) -> None:
        """Drop the debounce dates of epochs that retired (:func:`retired`) and have no folder
        held: else one date stays per epoch ever read, for the life of the mount. Only the date
        goes; a read still pending is written at the next flush."""
        with self._lock:
            for n in retired(list(self._last_recorded), live):
                if n not in self._held:
                    del self._last_recorded[n]

    def hold(self, n: int) -> None:
        """A folder of epoch ``n`` was opened."""
        with self._lock:
            self._held[n] += 1

    def release(self, n: int) -> None:
        """A folder handle :meth:`hold` counted is released."""
        with self._lock:
            self._held[n] -= 1
            if self._held[n] <= 0:
                del self._held[n]

    def held(self) -> list[int]:
        """Epochs with an open folder handle (a reader inside them), ascending."""
        with self._lock:
            return sorted(self._held)

    def flush(self, store: EpochReader, *, held_ahead: float = 0.0) -> list[int]:
        """Write the noted reads to ``store``; returns the epochs recorded. One the index could not
        take now (busy or full) stays noted for the next flush. A held epoch's read is dated
        ``held_ahead`` seconds ahead: renewed once per debounce and refresh, a read dated now
        lapses before the next renewal in a window shorter than that gap (``--in-use-seconds 0``
        retired an epoch with a folder open under its reader)."""
        with self._lock:
            pending = sorted(self._pending)
            held = set(self._held)
            self._pending.clear()
        now = time.time()
        done = [n for n in pending
                if store.record_read(n, now=now + held_ahead if n in held else None) is not False]
        if len(done) < len(pending):  # the index was busy or full: the next flush tries again
            with self._lock:
                self._pending.update(n for n in pending if n not in done)
        return done


__all__ = ["EpochReads", "retired"]
