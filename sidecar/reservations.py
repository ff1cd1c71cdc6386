"""Byte reservations of the downloads in flight: the sampler's half of the capacity rule.

``cache bytes + bytes in flight <= capacity`` must hold at every moment, so a download starts only
once its size is reserved here, evicting the oldest unpinned samples first when the cache is full.
Reservations live in the sampler process (the one writer) and end when the download is admitted or
fails. The total in flight is published in the index for ``epochfs status`` and the metrics, in the
same transaction as an admission so that no sample is ever counted twice.

The cache's total ("cache bytes") is the index's running counter. The fetch loop reserves once per
object, and reading that counter each time (a query and two ``stat`` calls of the index's files)
was a fifth of the loop's CPU at 64 KiB an object, so the total is kept here as well: read from the
index at the first reservation after :meth:`Reservations.reconcile` (the loop calls it every
``LOOK_EVERY``), then moved by this sampler's own admissions (what :meth:`.Store.admit` says it
added) and evictions (read again after each). It is never below the index's counter: a change by
another process only lowers it (``epochfs verify``, a rebuild), and a read that may or may not
include an admission being committed that moment is dropped once that commit ends, not guessed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

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
        self._cache: int | None = None
        """The cache's total as last read or moved here; None: read it at the next use."""
        self._committing = 0
        """Admissions whose index commit is under way (their bytes may or may not be in a read)."""
        self._unsure = False
        """``_cache`` was read while an admission was being committed: dropped when it ends."""
        self.capacity: int | None = None
        """The budget the last :meth:`reserve` was judged against."""

    @property
    def reserved(self) -> int:
        """Bytes reserved and not yet in the cache's total (downloads, and admissions under way)."""
        return self._reserved + self._admitting

    def cache_bytes(self) -> int:
        """The cache's total as these reservations count it (at least the index's counter)."""
        with self._lock:
            return self._cached()

    def _cached(self) -> int:
        """Under the lock: the kept total, read from the index when there is none."""
        if self._cache is None:
            self._read()
        assert self._cache is not None
        return self._cache

    def _read(self) -> None:
        """Under the lock: take the index's counter as the total."""
        self._cache = self.store.cache_bytes()
        self._unsure = self._committing > 0

    def reconcile(self) -> None:
        """Read the index's counter again at the next use (changes by other processes, a rebuilt
        index)."""
        with self._lock:
            self._cache = None

    def reserve(self, size: int, *, capacity: int | Callable[[int], int] | None = None,
                evict: bool = True) -> bool:
        """Reserve room for a download, evicting what may be evicted; False means backpressure.

        ``capacity``: the budget, or a function of the cache's bytes (admitted samples only: what
        is reserved is not on the disk yet) that gives it (the sampler's
        :class:`~epochfs.sidecar.sampler.diskspace.DiskSpace`); None: the
        policy's. ``evict=False`` takes only room that is free."""
        if capacity is None:
            capacity = self.store.policy().capacity
        with self._lock:
            cached = self._cached()
            used = cached + self.reserved
            cap = capacity(cached) if callable(capacity) else capacity
            self.capacity = cap
            if size > cap:
                return False
            need = used + size - cap
            if need > 0 and evict:
                self.store.evict(need)
                self._read()
                need = self._cached() + self.reserved + size - cap
            if need > 0:
                return False
            self._reserved += size
            return True

    def trim(self, capacity: int) -> int:
        """Evict what may be evicted until the cache and its reservations fit ``capacity`` (the
        configured ``--capacity``, never one the disk's free space bounded: a volume another
        tenant fills would have every sample evicted); returns the bytes freed. Room is
        otherwise made only for a download, so a cache started again with a lower
        ``--capacity`` and nothing left to fetch kept every sample above the new budget."""
        with self._lock:
            over = self._cached() + self.reserved - capacity
            if over <= 0:
                return 0
            freed = self.store.evict(over)
            self._read()
            return freed

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
            self._committing += 1
            left = self._reserved
        added = 0
        try:
            added = self.store.admit(items, inflight_bytes=left)
        except BaseException:
            with self._lock:
                self._admitting -= moved
                self._reserved += moved
                self._committed(0)
                self._cache = None  # what the failed commit left is read, not assumed
            raise
        with self._lock:
            self._admitting -= moved
            self._committed(added)

    def _committed(self, added: int) -> None:
        """Under the lock: an admission's commit ended, ``added`` bytes in the index's total."""
        self._committing -= 1
        if self._unsure:
            self._cache, self._unsure = None, False
        elif self._cache is not None:
            self._cache += added

    def publish(self) -> None:
        """Write the bytes in flight where other processes (status, metrics) can read them: the
        reservations alone, not the admissions under way, whose commit may already have put their
        bytes in the cache's total (a reading would count them twice and a full cache show over
        its budget). Until its commit an admission's bytes are in neither figure: a reading may
        show less in flight than there is, never ``cache_bytes + inflight_bytes`` over capacity."""
        with self._lock:
            self.store.set_meta(Meta.INFLIGHT_BYTES, str(self._reserved))
