"""The reads the supervisor records in the store: epochs the torch client says it reads, and the
epochs of the object files opened on the node volume.

A read record keeps an epoch pinned for the in-use window (``--in-use-seconds``). The FUSE view
records its own (lookups, listings, folders held open); two kinds of reader it never sees are
recorded here:

- **the torch client's reports** (``POST /v1/client-report``): the epochs it reads, the one sign of a
  reader with the folder view. A report names its client (``client=<id>``) and every epoch that
  client reads now, so the epochs a client names are its *claim*: the claim stands while the
  client names them, and a report of the same client that no longer names an epoch (the one its
  loader sends at once when an epoch ends) drops that epoch from it. A renewer thread records a
  read of every claimed epoch each :data:`RENEW_EVERY` second, dated :data:`RENEW_AHEAD` seconds
  ahead: an epoch still read stays pinned whatever ``--in-use-seconds`` (a paused client names
  its epoch in a heartbeat every :data:`~epochfs.torchclient.report.HEARTBEAT` seconds, 30, and
  its claim stands :data:`CLAIM_SECONDS` after the last one, for a client that died without a
  word), and an epoch the client moved on from is pinned :data:`RENEW_AHEAD` seconds more, then
  for the window like any other read. Why not date each report's read a heartbeat ahead: a record
  cannot be taken back (the store keeps the later of two), so every epoch a client read would stay
  pinned 40 s, and with epochs shorter than that all would stay live, the cache full, nothing evicted.
  A report that names no client (an older client) is dated :data:`CLIENT_AHEAD` seconds ahead,
  its next heartbeat's and a debounce more;
- **opens of object files by their resolved paths**: a reader that resolved the epoch's links once
  (``os.path.realpath``, a file list of ``<cache>/objects-ro/...`` kept from an earlier walk) and
  opens those paths later goes past the view. The sidecar counts every open of an object file
  (:class:`~epochfs.sidecar.served.OpenCounter`, fanotify), and the samples opened between two
  looks name the epochs read (:meth:`~epochfs.sidecar.store.Store.epochs_opened`): samples the
  newest ``--keep-epochs`` hold need nothing, the others are covered by the epoch holding most of
  them, then the next: a reader of an old epoch names that epoch, not a newer one it shares files
  with, and two readers of two epochs name both. Those epochs' reads are recorded.

The reports without a client and the opens are debounced as the FUSE view's records are
(:func:`~epochfs.fuse.inuse.read_debounce`: at most one write per 10 s, a sixth of a shorter
window), and the store's write never waits for the sampler's lock longer than a reader's would: a
record that finds the index busy is made at the next look (or renewal).
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
"""Seconds ahead a read reported without a client id (an older client) is dated: its next
heartbeat's, and a debounce for one that comes late (the client's report thread wakes every 2 s; a
slow answer). Also how long a client's claim stands without a report (:data:`CLAIM_SECONDS`)."""

CLAIM_SECONDS = CLIENT_AHEAD
"""Seconds a client's claim stands after its last report: a paused client's heartbeat comes every
30 s; a client silent longer has died or lost the sidecar, and its epochs are released."""

RENEW_EVERY = 1.0
"""Seconds between two renewals of the claimed epochs' reads (one small write to the index)."""

RENEW_AHEAD = 5.0
"""Seconds ahead a claimed epoch's read is dated: four renewals in a row may be late or find the
index busy (a busy sampler, a full volume) before the epoch loses it. Also how long an epoch stays
pinned past its release (and the in-use window more): as long as the FUSE view keeps a folder
closed a moment ago (:data:`~epochfs.fuse.viewstate.HELD_MARGIN`), short enough that a full cache
turns over when epochs last seconds."""

WARN_EVERY = 60.0
"""Seconds between two warnings that a read could not be recorded (a renewal a second on a full
volume would otherwise log one a second); the others go to the debug log."""

MAX_NOTED = 1024
"""Epochs whose last reported read is kept for the debounce, at most: a report may name any epoch
number, and a dict of every one ever named grew with each report of new numbers (20 MB for 320k)."""

MAX_CLIENTS = 1024
"""Clients whose claims are kept at most; beyond, the one heard from least recently is dropped (a
trainer restarted in a loop makes a new client each time: its old claims end with it anyway)."""


class ReadRecords:
    """The supervisor's read records; thread-safe (the endpoints' threads report, the open
    counter's thread adds names and ticks)."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.monotonic,
                 renew_every: float | None = RENEW_EVERY) -> None:
        """``renew_every``: seconds between the renewer thread's turns (None: no thread; the
        caller calls :meth:`renew`)."""
        self._store = store
        self._clock = clock
        self._renew_every = renew_every
        self._renewer: threading.Thread | None = None
        self._claims: dict[str, tuple[frozenset[int], float]] = {}
        """Each client's claim: the epochs its last report named, and when it came."""
        self._lock = threading.Lock()
        self._names: set[str] = set()
        self._client_noted: dict[int, float] = {}
        self._unrecorded: dict[int, float] = {}
        """Epochs whose record found the index busy or full, and how far ahead to date it: recorded
        at the next look."""
        self._next_look = float("-inf")
        self._warned = float("-inf")
        self.looks = 0
        """Looks made at opened objects' epochs (each a query and, where due, a write)."""

    def client_epochs(self, epochs: Iterable[int], *, client: str | None = None) -> None:
        """The torch client reads ``epochs`` (its report says so). With ``client``: they are that
        client's claim now (renewed until a report of it names them no longer), an epoch no one
        claimed before recorded at once. Without (an older client): record a read of each dated
        :data:`CLIENT_AHEAD` ahead, at most one per epoch per
        :data:`~epochfs.fuse.inuse.MAX_READ_DEBOUNCE` seconds."""
        if client is not None:
            self._claim(client, frozenset(epochs))
            return
        now = self._clock()
        with self._lock:
            due = [n for n in epochs if now - self._client_noted.get(n, float("-inf")) >= MAX_READ_DEBOUNCE]
            for n in due:
                self._client_noted.pop(n, None)
                self._client_noted[n] = now  # last: the dict's order is by the time noted
            while len(self._client_noted) > MAX_NOTED:  # the oldest first: noted again at its next report
                del self._client_noted[next(iter(self._client_noted))]
        if due:
            self._record(due, ahead=CLIENT_AHEAD)

    def _claim(self, client: str, epochs: frozenset[int]) -> None:
        now = self._clock()
        with self._lock:
            new = epochs - self._claimed()
            self._claims.pop(client, None)  # re-inserted last: the dict's order is by last report
            if epochs:
                self._claims[client] = (epochs, now)
            while len(self._claims) > MAX_CLIENTS:
                del self._claims[next(iter(self._claims))]
            start = self._renewer is None and bool(self._claims) and self._renew_every is not None
            if start:
                self._renewer = threading.Thread(target=self._renew_loop, name="epochfs-client-pins",
                                                 daemon=True)
        if new:
            self._record(sorted(new), ahead=RENEW_AHEAD)
        if start:
            assert self._renewer is not None
            self._renewer.start()

    def _claimed(self) -> set[int]:
        """The epochs some client claims (under the lock)."""
        return set().union(*(epochs for epochs, _ in self._claims.values()))

    def claimed(self) -> list[int]:
        """The epochs some client claims now, sorted."""
        with self._lock:
            return sorted(self._claimed())

    def renew(self) -> list[int]:
        """Drop the claims of clients silent for :data:`CLAIM_SECONDS`, and record a read of every
        epoch still claimed, dated :data:`RENEW_AHEAD` ahead; the epochs renewed."""
        now = self._clock()
        with self._lock:
            for client, (_, heard) in list(self._claims.items()):
                if now - heard > CLAIM_SECONDS:
                    del self._claims[client]
            epochs = sorted(self._claimed())
        self._record(epochs, ahead=RENEW_AHEAD)
        return epochs

    def _renew_loop(self) -> None:
        """The renewer: runs while some client claims an epoch (the next claim starts another)."""
        assert self._renew_every is not None
        while True:
            time.sleep(self._renew_every)
            try:
                self.renew()
            except Exception:  # the index gone at the supervisor's exit: the next turn tries again
                log.debug("renewing the claimed epochs' reads", exc_info=True)
            with self._lock:
                if not self._claims:
                    self._renewer = None
                    return

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
            now = self._clock()
            loud = now - self._warned >= WARN_EVERY
            if loud:
                self._warned = now
            log.log(logging.WARNING if loud else logging.DEBUG, "recording a read of epochs %s: %s",
                    ", ".join(map(str, epochs)), e)
        with self._lock:
            for n in epochs:
                self._unrecorded[n] = max(ahead, self._unrecorded.get(n, 0.0))
