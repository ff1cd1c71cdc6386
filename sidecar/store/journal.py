"""The recovery journal: the few object names a crash can have left out of step with the index.

Checking every object at start-up costs a ``stat`` of every sample's object and a listing of every
object file (a million of each at 1M samples). Given the order of writes, a crash can only leave out
of step the names that were between two steps:

* an *admission* renames objects into place and then commits their rows: a crash in between
  leaves objects the index does not know;
* an *eviction* (and a scrub's take-out) commits the deletion of rows and then unlinks the
  files: a crash in between leaves files whose rows are gone.

So those names are written down first, in the index itself (table ``recovery_journal``): an
admission commits its sample ids here *before* it renames anything (:meth:`Journal.before_install`,
one small write transaction per batch), and its rows' commit deletes them again (a trigger on
``INSERT INTO samples``, same transaction); a deletion from ``samples`` adds the id here in its
own transaction (a trigger on ``DELETE``: eviction, integrity and recovery need no change), and
the id is forgotten once its file is unlinked (:meth:`Journal.removed` keeps it in memory; the
next journal write deletes it, or the writer's clean stop). The journal thus holds, at any time,
the admissions in flight and the last deletions: a bounded window, whatever the cache's size.

A crash (``kill -9``, OOM) cannot lose a committed transaction, so the next start checks only the
names here (:func:`.recovery.recover`). What the journal cannot vouch for -- an index that lost
writes (the machine went down under a running writer: ``synchronous=NORMAL`` may lose the last
commits), or files deleted by hand -- is found by the full scan: at start after such a reboot,
and otherwise in the background (:mod:`.objectscan`).

The table and its triggers are made by recovery, right after a full scan: their presence means
"every change since that scan is journaled". An index without them (new, reset, or from an
older epochfs) gets a full scan at its next start; until then nothing is journaled.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable

from epochfs.sidecar.store.index import Index

TABLE = "recovery_journal"
_DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (sid TEXT PRIMARY KEY) WITHOUT ROWID",
    f"CREATE TRIGGER IF NOT EXISTS {TABLE}_deleted AFTER DELETE ON samples "
    f"BEGIN INSERT OR IGNORE INTO {TABLE}(sid) VALUES (old.sid); END",
    f"CREATE TRIGGER IF NOT EXISTS {TABLE}_admitted AFTER INSERT ON samples "
    f"BEGIN DELETE FROM {TABLE} WHERE sid = new.sid; END",
)


def exists(db: sqlite3.Connection) -> bool:
    """The journal is in place (every change since the last full scan is in it)."""
    return db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                      (TABLE,)).fetchone() is not None


def create(db: sqlite3.Connection) -> None:
    """Make the table and its triggers (inside a write transaction, after a full scan)."""
    for statement in _DDL:
        db.execute(statement)


def names(db: sqlite3.Connection, after: str, limit: int) -> list[str]:
    """Journaled sample ids after ``after`` in order, ``limit`` at most."""
    return [str(r[0]) for r in db.execute(f"SELECT sid FROM {TABLE} WHERE sid > ? ORDER BY sid LIMIT ?",
                                          (after, limit))]


def add(db: sqlite3.Connection, sids: list[str]) -> None:
    """Name ``sids`` in the journal (in the caller's transaction)."""
    db.executemany(f"INSERT OR IGNORE INTO {TABLE}(sid) VALUES(?)", [(s,) for s in sids])


def forget(db: sqlite3.Connection, sids: list[str]) -> None:
    db.executemany(f"DELETE FROM {TABLE} WHERE sid=?", [(s,) for s in sids])


def clear(db: sqlite3.Connection) -> None:
    db.execute(f"DELETE FROM {TABLE}")


def _missing(e: sqlite3.OperationalError) -> bool:
    return "no such table" in str(e)


class Journal:
    """What :class:`.objects.ObjectFiles` calls around its renames and unlinks, for one process.

    ``index`` returns the index in use now (it may be replaced under the process: a reset)."""

    def __init__(self, index: Callable[[], Index]) -> None:
        self._index = index
        self._lock = threading.Lock()
        self._removed: list[str] = []

    def before_install(self, sids: list[str]) -> None:
        """Commit ``sids`` to the journal before their objects are renamed into place; also
        forget the ids whose files were unlinked since the last call."""
        with self._lock:
            done, self._removed = self._removed, []
        try:
            with self._index().write() as db:
                if done:
                    forget(db, done)
                add(db, sids)
        except sqlite3.OperationalError as e:
            if not _missing(e):
                self.removed(done)
                raise
            # No journal in this index yet: its next start scans every object anyway.

    def removed(self, sids: list[str]) -> None:
        """These files are unlinked: their journal entries may go (at the next journal write)."""
        if sids:
            with self._lock:
                self._removed.extend(sids)

    def flush(self) -> None:
        """Forget the unlinked ids now (the writer's clean stop)."""
        with self._lock:
            done, self._removed = self._removed, []
        if not done:
            return
        try:
            with self._index().write() as db:
                forget(db, done)
        except sqlite3.OperationalError as e:
            if not _missing(e):
                raise

    def pending(self) -> int:
        """Unlinked ids not yet forgotten (tests and the log)."""
        with self._lock:
            return len(self._removed)
