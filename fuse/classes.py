"""``.epochfs/classes.json``: the class index of every folder, the same in every epoch of the cache.

The list of folders lives in the store (:mod:`epochfs.sidecar.store.classes`: it only grows, so no
index ever changes); this module keeps it up to date from what the view shows and renders it in
the layout's format (:func:`epochfs.torchclient.layout.format_classes`):

* before ``classes.json`` is served (:meth:`ClassesFile.render`), the folders of every live epoch
  not yet recorded are recorded (the store's ``through`` mark says which are), so each folder a
  reader finds in ``epoch-N/`` has its index once ``epoch-N`` has been looked up;
* at each refresh of the view (:meth:`ClassesFile.tick`), the folders that the running listing's
  discovery found (its parts: the same on every node whatever its shard) are recorded as soon as a
  listing begins: the first record, sorted, then holds every class folder the remote has, not
  only those this node's first epoch happens to hold (and where the discovery named none, the
  first record takes the folders of every key listed so far:
  :func:`~epochfs.sidecar.store.classes.catalog_folders`).

Both the FUSE view and the folder view serve it through :class:`~epochfs.fuse.view.View`.

Waiting for the write lock (:meth:`ClassesFile.render`). A record needs the index's write lock,
which the sampler may hold for seconds; a request that needs it waits in one of the FUSE loop's
request threads, and those are few (libfuse's default is 10). So:

* one record at a time (single flight): the first request that needs it records, every request
  that comes meanwhile waits for that record and shares its outcome (one series of bounded tries
  on the store's connection, not one per reader; the others' requests use it in between);
* at most :data:`MAX_WAITING` requests wait at once, and the loop has that many threads more than
  the rest needs (:data:`epochfs.fuse.lowlevel.LOOP_THREADS`), so the waiters never take every
  thread; a request beyond the cap answers EIO at once, as one that waited in vain does;
* the wait watches the server's stop (:meth:`ClassesFile.end_waits_when`): libfuse's loop ends
  only once its request threads return, so a stop ends the wait (EIO) instead of waiting it out.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable

from epochfs.fuse.tree import EpochTree
from epochfs.sidecar.store import EpochReader
from epochfs.sidecar.store import classes as store_classes
from epochfs.sidecar.store.index import is_busy
from epochfs.torchclient.layout import format_classes

log = logging.getLogger("epochfs.fuse")

MAX_WAITING = 64
"""Requests that may wait for a record at once (the reader of the flight and those sharing it).
Every rank of a trainer opens ``classes.json`` at an epoch boundary (a few requests each, one at a
time): 64 is far above a node's readers, and the FUSE loop gets as many threads more than it needs
for the rest (:data:`epochfs.fuse.lowlevel.LOOP_THREADS`). Each waiter is a thread asleep."""


class RecordUnavailable(RuntimeError):
    """A request for classes.json that gets no record (EIO), for a reason said in one line: the
    server's error translation logs it without a traceback, at most once a minute, where any
    other error is logged with its traceback (64 waiters each logged one)."""


class RecordBusy(RecordUnavailable):
    """:data:`MAX_WAITING` requests wait for a record already: this one is not kept (EIO)."""


class RecordAbandoned(RecordUnavailable):
    """The server stops: a waiting record is given up (EIO) so that the loop can end."""


class RecordFailed(RecordUnavailable):
    """The record this request waited for failed (its error chained, logged by its maker's
    request): EIO, as for its maker."""


class _Flight:
    """One record in progress: the requests that need it wait for :attr:`done` and share
    :attr:`error` (None: recorded)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None


def _never() -> bool:
    return False


class ClassesFile:
    """Keeps the store's class folders up to date and renders ``classes.json`` (thread-safe)."""

    def __init__(self, store: EpochReader) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._listing: tuple[int, int] | None = None
        self._rendered: tuple[tuple[int, int, int], store_classes.ClassFolders, bytes] | None = None
        self._seen: tuple[int, int, int] | None = None
        self._pending: list[str] = []
        self._flight: _Flight | None = None  # the record in progress (under _lock)
        self._waiting = 0  # requests waiting for a record (under _lock)
        self._ended: Callable[[], bool] = _never

    def end_waits_when(self, ended: Callable[[], bool] | None) -> None:
        """From now on a waiting record gives up once ``ended()`` is true (None: never). The
        low-level adapter passes "libfuse's session has exited" (a stop signal, or the kernel
        ending the connection) for the loop's life: the loop ends only once its request threads
        return, so they must not wait on."""
        self._ended = ended or _never

    def _file_key(self) -> tuple[int, int, int]:
        try:
            st = os.stat(store_classes.folder_path(self.store.root))
        except FileNotFoundError:
            return (0, 0, 0)
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _current(self) -> tuple[store_classes.ClassFolders, bytes]:
        key = self._file_key()
        cached = self._rendered
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        value = store_classes.read(self.store.root)
        text = format_classes(value.folders).encode()
        self._rendered = (key, value, text)
        return value, text

    def mtime(self, default: float) -> float:
        """When the recorded folders last changed (``default`` before any record): the same on
        every server over the cache, and it moves only when the file does."""
        key = self._file_key()
        return key[1] / 1e9 if key != (0, 0, 0) else default

    def render(self, live: Iterable[int], tree: Callable[[int], EpochTree]) -> bytes:
        """``classes.json`` with the folders of every epoch of ``live`` recorded (``tree``: an
        epoch's tree; an epoch retired meanwhile is passed over). Waits for the record in
        progress, or makes it (the module's docstring says why it is one at a time); raises
        RecordBusy beyond :data:`MAX_WAITING` waiters, RecordAbandoned when the server stops,
        the store's busy error when the write lock stayed taken for RECORD_WAIT (RecordFailed
        chaining it, in the requests that waited for that record)."""
        live = list(live)
        while True:
            with self._lock:
                value, text = self._current()
                todo = sorted(n for n in live if n > value.through)
                if not todo:
                    return text
                if self._waiting >= MAX_WAITING:
                    raise RecordBusy(f"classes.json: {self._waiting} requests wait for the index's write "
                                     "lock already (the sampler writes); this one is not kept")
                self._waiting += 1
                flight = self._flight
                leads = flight is None
                if flight is None:
                    flight = self._flight = _Flight()
            try:
                if leads:
                    return self._fly(flight, value, todo, tree)
                flight.done.wait()  # the leader always sets it (_fly's finally)
            finally:
                with self._lock:
                    self._waiting -= 1
            if flight.error is not None:
                raise RecordFailed(f"classes.json: the record this request waited for failed: "
                                   f"{flight.error!r}") from flight.error
            # Recorded: once more from the top (an epoch of ``live`` the flight did not cover,
            # cut since it began, makes this request lead the next one).

    def _fly(self, flight: _Flight, value: store_classes.ClassFolders, todo: list[int],
             tree: Callable[[int], EpochTree]) -> bytes:
        """Record the folders of ``todo`` for every request that waits on ``flight``."""
        try:
            found = list(self.store.listed_class_folders())
            if not value.folders:  # the first record: every class listed so far, sorted together
                found += self.store.cataloged_class_folders()
            through = None
            for n in todo:
                try:
                    found += tree(n).folder_paths()
                except LookupError:
                    continue  # retired meanwhile: nobody reads it any more
                through = n
            self._record(found, through)
            with self._lock:
                return self._current()[1]
        except BaseException as e:
            flight.error = e
            raise
        finally:
            with self._lock:
                self._flight = None
            flight.done.set()

    def _record(self, found: list[str], through: int | None) -> None:
        """The record, in bounded tries for the write lock (the store's own 250 ms ones) up to
        RECORD_WAIT in all, the connection let go between them for the server's other requests;
        the server's stop is looked at before each try."""
        deadline = time.monotonic() + store_classes.RECORD_WAIT
        while True:
            if self._ended():
                raise RecordAbandoned("classes.json: the server stops; the record of the new epochs' "
                                      "folders is not waited for")
            try:
                self.store.record_class_folders(found, through=through, wait=0.0)
                return
            except sqlite3.OperationalError as e:
                if not is_busy(e) or time.monotonic() >= deadline:
                    raise
            time.sleep(store_classes.READER_RETRY)  # paces the tries: not a wait for an event

    def _record_now(self, found: list[str]) -> bool:
        """One bounded try to record ``found`` (a refresh does not wait out the sampler's write);
        False when it must be tried again. Not one of the renders' flights: the record is one
        write transaction that merges with what the file holds, so a render's record beside it
        loses nothing."""
        try:
            self.store.record_class_folders(found, wait=0.0)
        except sqlite3.OperationalError as e:
            if not is_busy(e):
                raise
            return False
        return True

    def tick(self) -> bool:
        """Record the running listing's folders when a listing began (or split its parts); True
        when the recorded folders changed since the last tick (the kernel must drop the file's
        cached size)."""
        mark = self.store.listing_mark()
        if mark != self._listing or self._pending:
            # The folders of a try that found the index busy are kept: the listing may end (and
            # its parts, which name them, go) before the next tick.
            found = self._pending + (self.store.listed_class_folders() if mark != self._listing else [])
            self._pending = []
            if found and not self._record_now(found):
                self._pending = found  # tried again at the next tick
            self._listing = mark
        key = self._file_key()
        changed = self._seen is not None and key != self._seen
        self._seen = key
        return changed
