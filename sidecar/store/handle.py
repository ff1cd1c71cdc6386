"""The index a process uses, kept pointing at the real ``index.sqlite``.

A SQLite connection keeps the files it opened, so if the index is moved aside (another process
reset a damaged one) or its write-ahead log is deleted (by hand, by a cleaner), the connection
goes on in a world of its own: its writes land in a log no new opener sees, and every new opener
fails ("disk I/O error") while the old log's frames are still listed in the shared memory file.
Before each use the handle checks the files (two ``stat`` calls) and follows such a change at
once, logging it in one line:

* **write-ahead log deleted**: this connection still holds the deleted log, so it checkpoints
  it (``wal_checkpoint(TRUNCATE)``: every committed transaction copied into ``index.sqlite``)
  and then reopens; nothing committed is lost and new openers work again. The same when a new,
  empty log is already at the path (a new opener's failed attempt makes one) while the shared
  memory still lists frames it cannot hold (:meth:`Index.frames_elsewhere`);
* **log or index replaced** otherwise (another process saved the log first, or a reset): reopen;
* **index deleted**: nothing to reopen; :meth:`IndexHandle.lost` says so, and the sampler exits so
  that its next start rebuilds the index from the epochs' members files, as a reset does (epoch
  numbers continue above the high-water mark); a reset's new index in its place is followed.

Opening for a writer (``create``) resets an index that SQLite reports as damaged at open
(:mod:`.reset`: a fresh index rebuilt from the live epochs' members files takes its place), and
an index file without schema (an empty file...) beside a cache's epochs or objects, which SQLite
opens without a word and the schema would make a new index of (:class:`.index.BlankIndex`), and
so a missing index beside them (deleted: a fresh one would lose every epoch and cached sample to
the recovery); a reader refuses either, writing nothing (``status`` and ``verify`` report the
damage). A new cache (nothing in it but ``objects/``'s marker) gets a fresh index, silently;
:meth:`IndexHandle.reset` does the same after a failed integrity check
(:mod:`.checkup`). Either clears the :mod:`.checkmark` marker: the damage went with the old index.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from epochfs.sidecar.store import checkmark, reset
from epochfs.sidecar.store.foreign import blank_damage
from epochfs.sidecar.store.index import BlankIndex, Index, is_corruption
from epochfs.sidecar.store.records import StoreError

log = logging.getLogger("epochfs.store")


OPEN_WAIT = 3.0
"""Seconds an opener waits while the index's deleted write-ahead log is still being saved."""
_SHORT_READ = 522  # SQLITE_IOERR_SHORT_READ: the log the shared memory lists is not at the path


def _corrupt(e: StoreError) -> bool:
    cause = e.__cause__
    return cause is not None and is_corruption(cause)


def _log_elsewhere(e: StoreError) -> bool:
    return getattr(e.__cause__, "sqlite_errorcode", None) == _SHORT_READ


class IndexHandle:
    """The current :class:`Index` of one cache folder for one process. Thread-safe."""

    def __init__(self, path: Path, *, create: bool) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._lost_logged = False
        self._unopened: str | None = None
        """What the last failed reopen met (logged once until it changes or a reopen succeeds)."""
        # A writer-side opener (the sidecar's processes open with ``create``) may migrate an older
        # schema; a reader (``epochfs status``) never writes at open.
        self._migrate = create
        self._index = self._open(create=create)

    def _blank(self, what: str) -> str | None:
        """Whether this index file without schema, or no file (``what`` it is), is damage: it is
        when the cache holds what only an index with its schema came before
        (:func:`.foreign.blank_damage`)."""
        return blank_damage(self.path.parent, what)

    def _new_index(self) -> Index:
        return Index(self.path, migrate=self._migrate, blank=self._blank)

    def _open(self, *, create: bool) -> Index:
        try:
            return self._open_or_reset(create=create)
        except BlankIndex as e:
            if not create:
                raise  # status, verify, cut: report it (exit 2), never write over it
            problem = e.problem
        with reset.reset_lock(self.path.parent):
            try:
                return self._new_index()  # another process rebuilt it meanwhile
            except BlankIndex as e:
                problem = e.problem
            reset.replace(self.path.parent, problem, migrate=self._migrate)
            checkmark.clear(self.path.parent)
            return self._replaced()

    def _replaced(self) -> Index:
        """The index a reset just put in place, opened without asking ``blank``: when the rebuild
        failed that is an empty index made here (the reset's promise, never a start that fails)."""
        return Index(self.path, migrate=self._migrate)

    def _open_or_reset(self, *, create: bool) -> Index:
        deadline = time.monotonic() + OPEN_WAIT
        while True:
            try:
                return self._new_index()
            except StoreError as e:
                if _log_elsewhere(e) and time.monotonic() < deadline:
                    time.sleep(0.05)  # a process that holds the deleted log saves it at its next use
                    continue
                if not create or not _corrupt(e):
                    raise
                problem = str(e.__cause__)
                break
        with reset.reset_lock(self.path.parent):
            try:
                return self._new_index()  # another process reset it meanwhile
            except StoreError as e:
                if not _corrupt(e):
                    raise
            reset.replace(self.path.parent, problem, migrate=self._migrate)
            checkmark.clear(self.path.parent)  # the damage it asked to repair went with the old index
            return self._replaced()

    def get(self) -> Index:
        """The index to use now, reopened first if its files changed under it."""
        ix = self._index
        what = ix.changed()
        if what is None or (what == "index missing" and self._lost_logged):
            return ix
        return self._follow(ix, what)

    def _follow(self, ix: Index, what: str) -> Index:
        with self._lock:
            if self._index is not ix:
                return self._index  # another thread followed it
            if what == "index missing":
                log.error("the cache index %s was deleted under this process; it goes on with the "
                          "index it has open until it restarts", self.path)
                self._lost_logged = True
                return ix
            saved = ""
            if what == "wal missing" or ix.frames_elsewhere():
                what = "write-ahead log deleted"
                try:
                    _, frames, done = ix.checkpoint()
                    saved = f"; {done} of its {frames} frame(s) saved into the index by a checkpoint"
                except Exception as e:  # reopening is still the only way on
                    saved = f"; saving the deleted log failed ({e})"
            try:
                new = self._new_index()
            except StoreError as e:
                failure = str(e)  # (what changed may alternate: the failed open's -wal comes and goes)
                if failure != self._unopened:  # asked before every use: said once, not each time
                    log.error("the cache index %s changed (%s) and cannot be reopened: %s",
                              self.path, what, e)
                    self._unopened = failure
                return ix
            self._unopened = None
            log.log(logging.ERROR if saved else logging.WARNING,
                    "the cache index %s changed under this process (%s)%s; reopened",
                    self.path, what.replace("wal ", "write-ahead log "), saved)
            # The old connection is left to the garbage collector: a thread may still hold it.
            self._index = new
            return new

    def lost(self) -> bool:
        """The index file was deleted under this process (it should restart)."""
        return self._index.changed() == "index missing"

    def reset(self, problem: str) -> Path:
        """Move this (damaged) index aside and open a fresh one, rebuilt from the epochs' members
        files (:mod:`.reset`); returns where the old one went."""
        with self._lock, reset.reset_lock(self.path.parent):
            self._index.close()
            aside = reset.replace(self.path.parent, problem, migrate=self._migrate)
            checkmark.clear(self.path.parent)
            self._index = Index(self.path, migrate=self._migrate)
            return aside

    def close(self) -> None:
        self._index.close()
