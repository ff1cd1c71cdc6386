"""Byte reservations of the downloads in flight: the sampler's half of the capacity rule.

``cache bytes + bytes in flight <= capacity`` must hold at every moment, so a download starts only
once its size is reserved here, evicting the oldest unpinned samples first when the cache is full.
Reservations live in the sampler process (the one writer) and end when the download is admitted or
fails. The total in flight is published in the index for ``epochfs status`` and the metrics, in the
same transaction as an admission so that no sample is ever counted twice.
"""

from __future__ import annotations

import threading

from epochfs.sidecar.store import Admission, Meta, Store


class Reservations:
    """The in-flight byte budget of one sampler over one store. Thread-safe.

    Bytes being admitted (``_admitting``) still count as in flight until the admission is in the
    index, but the lock is not held while it is written: an admission can wait for another
    connection's commit (the listers', a cut), and a reservation of the fetch loop must not wait
    behind it (docs/listing.md, "The listing and the fetches on one CPU"). Between the commit and
    the count's update the bytes count twice, never zero times."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._reserved = 0
        self._admitting = 0

    @property
    def reserved(self) -> int:
        """Bytes reserved and not yet in the cache's total (downloads, and admissions under way)."""
        return self._reserved + self._admitting

    def reserve(self, size: int, *, capacity: int | None = None) -> bool:
        """Reserve room for a download, evicting what may be evicted; False means backpressure."""
        cap = self.store.policy().capacity if capacity is None else capacity
        with self._lock:
            if size > cap:
                return False
            need = self.store.cache_bytes() + self.reserved + size - cap
            if need > 0:
                self.store.evict(need)
                need = self.store.cache_bytes() + self.reserved + size - cap
            if need > 0:
                return False
            self._reserved += size
            return True

    def release(self, size: int) -> None:
        """Give back a reservation whose download failed or was given up."""
        with self._lock:
            self._reserved = max(0, self._reserved - size)

    def admit(self, items: list[Admission]) -> None:
        """Admit downloads into the store; their reservations end in the same index transaction.
        On failure they are reservations again (the caller releases them)."""
        with self._lock:
            moved = min(self._reserved, sum(a.size for a in items))
            self._reserved -= moved
            self._admitting += moved
            left = self._reserved
        try:
            self.store.admit(items, inflight_bytes=left)
        except BaseException:
            with self._lock:
                self._admitting -= moved
                self._reserved += moved
            raise
        with self._lock:
            self._admitting -= moved

    def publish(self) -> None:
        """Write the bytes in flight where other processes (status, metrics) can read them."""
        with self._lock:
            self.store.set_meta(Meta.INFLIGHT_BYTES, str(self.reserved))
