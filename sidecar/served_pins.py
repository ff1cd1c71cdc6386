"""The reads the supervisor records in the store: epochs the torch client says it reads, and the
epochs of the object files opened on the node volume.

A read record keeps an epoch pinned for the in-use window (``--in-use-seconds``). The FUSE view
records its own (lookups, listings, folders held open); two kinds of reader it never sees are
recorded here:

- **the torch client's reports** (``POST /v1/report``): the epochs it reads, the one sign of a
  reader with the folder view. A paused client names its epoch in a heartbeat every
  :data:`~epochfs.torchclient.report.HEARTBEAT` seconds (30), so its read is dated that far
  ahead (and a debounce more, for a late one): the epoch stays while the client reports it,
  whatever ``--in-use-seconds`` (a window under 30 s lost a paused reader's epoch between two
  heartbeats), and for the window after its last report;
- **opens of object files by their resolved paths**: a reader that resolved the epoch's links once
  (``os.path.realpath``, a file list of ``<cache>/objects-ro/...`` kept from an earlier walk) and
  opens those paths later goes past the view. The sidecar counts every open of an object file
  (:class:`~epochfs.sidecar.served.OpenCounter`, fanotify), and the samples opened between two
  looks name the epochs read (:meth:`~epochfs.sidecar.store.Store.epochs_opened`): samples the
  newest ``--keep-epochs`` hold need nothing, the others are covered by the epoch holding most of
  them, then the next: a reader of an old epoch names that epoch, not a newer one it shares files
  with, and two readers of two epochs name both. Those epochs' reads are recorded.

Both are debounced as the FUSE view's records are (:func:`~epochfs.fuse.inuse.read_debounce`: at
most one write per 10 s, a sixth of a shorter window), and the store's write never waits for the
sampler's lock longer than a reader's would: a record that finds the index busy is made at the
next look.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from epochfs.fuse.inuse import MAX_READ_DEBOUNCE, read_debounce
from epochfs.sidecar.store import Store
from epochfs.torchclient.report import HEARTBEAT

log = logging.getLogger("epochfs.served")

MAX_NAMES = 4096
"""Distinct opened samples looked up per look (one indexed query each): a reader of an old epoch
opens thousands of its files between two looks, so the first few thousand find its epoch, and a
look costs the index at most this many lookups, however fast the readers open files."""


CLIENT_AHEAD = HEARTBEAT + MAX_READ_DEBOUNCE
"""Seconds ahead a client-reported read is dated: its next heartbeat's, and a debounce for one
that comes late (the client's report thread wakes every 2 s; a slow answer)."""


class ReadRecords:
    """The supervisor's read records; thread-safe (the endpoints' threads report, the open
    counter's thread adds names and ticks)."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._names: set[str] = set()
        self._client_noted: dict[int, float] = {}
        self._unrecorded: dict[int, float] = {}
        """Epochs whose record found the index busy or full, and how far ahead to date it: recorded
        at the next look."""
        self._next_look = float("-inf")
        self.looks = 0
        """Looks made at opened objects' epochs (each a query and, where due, a write)."""

    def client_epochs(self, epochs: Iterable[int]) -> None:
        """The torch client reads ``epochs`` (its report says so): record a read of each, at most
        one per epoch per :data:`~epochfs.fuse.inuse.MAX_READ_DEBOUNCE` seconds."""
        now = self._clock()
        with self._lock:
            due = [n for n in epochs if now - self._client_noted.get(n, float("-inf")) >= MAX_READ_DEBOUNCE]
            for n in due:
                self._client_noted[n] = now
        if due:
            self._record(due, ahead=CLIENT_AHEAD)

    # ---------------------------------------------------------------- OpenedObjects (served.py)
    def wanted(self) -> bool:
        return len(self._names) < MAX_NAMES

    def add(self, names: list[str]) -> None:
        with self._lock:
            room = MAX_NAMES - len(self._names)
            self._names.update(names[:room] if room < len(names) else names)

    def tick(self) -> None:
        """Look up the epochs of the samples opened since the last look and record their reads:
        the first opens after a quiet moment at once, then once per debounce at most."""
        now = self._clock()
        if now < self._next_look or not (self._names or self._unrecorded):
            return  # a quiet moment is not a look: the next open is looked up at once
        self._next_look = now + read_debounce(self._store.policy().in_use_seconds)
        with self._lock:
            names, self._names = self._names, set()
            left, self._unrecorded = self._unrecorded, {}
        try:
            opened = self._store.epochs_opened(sorted(names)) if names else set()
        except Exception as e:  # the index unreadable now: the names wait for the next look
            log.warning("looking up the epochs of %d opened object(s): %s", len(names), e)
            self.add(sorted(names))
            opened = set()
        self.looks += 1
        due = dict.fromkeys(opened, 0.0)
        due.update(left)  # one the client reported keeps its date ahead
        for ahead in sorted(set(due.values())):
            self._record(sorted(n for n, a in due.items() if a == ahead), ahead=ahead)

    def _record(self, epochs: list[int], *, ahead: float = 0.0) -> None:
        """Record reads of ``epochs`` dated ``ahead`` seconds from now; kept for the next look when
        the index cannot take them now."""
        if not epochs:
            return
        try:
            if self._store.record_reads(epochs, now=time.time() + ahead):
                return
        except Exception as e:  # the index damaged or gone meanwhile: the supervisor says so elsewhere
            log.warning("recording a read of epochs %s: %s", ", ".join(map(str, epochs)), e)
        with self._lock:
            for n in epochs:
                self._unrecorded[n] = max(ahead, self._unrecorded.get(n, 0.0))
