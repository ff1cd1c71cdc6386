"""The SQLite index of a cache folder: connections, transactions, typed meta keys and counters
(the tables and their migrations: :mod:`.schema`; the names of meta keys: :mod:`.meta`).

Two processes (the sampler, which writes, and the FUSE server, which reads and asks for cuts) open
the same ``index.sqlite`` in WAL mode, so readers never block the writer and vice versa. Writes use
``BEGIN IMMEDIATE`` so writers serialize across processes instead of failing on lock upgrades;
reads use a deferred ``BEGIN`` and so never take the write lock.

Opening an index whose schema is current is reads only (one deferred read of the version): a
reader (``epochfs status``, the FUSE server, the supervisor's readiness) opens it while the sampler
holds the write lock for as long as it likes. Only a missing schema (a fresh index) or an older
one takes the write lock, and an older one is migrated only by an opener that may (``migrate``:
the sidecar's processes, which open with ``create``), never by ``epochfs status`` or ``verify``.
A file that was there without a schema, or a missing one, is made a fresh index only when the
opener's ``blank`` says so; else it is damage (:class:`BlankIndex`: an empty or deleted index
beside a cache's epochs), and a missing one is not even made (SQLite's open would make it).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from epochfs.sidecar.store import checkmark, keptfds
from epochfs.sidecar.store.dburi import uri
from epochfs.sidecar.store.meta import Meta
from epochfs.sidecar.store.records import NO_ROOM_BYTES, NoRoom, StoreError
from epochfs.sidecar.store.schema import (
    SCHEMA_VERSION,
    SEEN_INDEX,
    create,
    migrate_1_to_2,
    migrate_2_to_3,
    migrate_3_to_4,
    migrate_4_to_5,
    migrate_5_to_6,
    migrate_epochs_2_to_3,
)

INDEX_NAME = "index.sqlite"
WAL_SUFFIX = "-wal"
SHM_SUFFIX = "-shm"
"""2: samples record ``digest`` (md5 of the bytes admitted) and ``verified`` (what checked them).
3: catalog rows record ``seen`` (the listing that last saw them: a relist drops the rows it did not
see), the ``listing_parts`` table holds each lister's progress (a listing resumes after a restart),
and ``pos`` is no longer numbered (windows are ranges of the rank order); an epoch may be a range
of the admission order (``epochs.first_sample``) instead of one ``epoch_samples`` row per sample
(epochs cut before keep their rows: NULL ``first_sample``).
4: samples record their key's catalog ``rank``, and a schedule-mode window is its bounds in the
sampling order (``epochs.lo_rank``, ``lo_key``, ``hi_rank``, ``hi_key``) with ``max_sample``, less
the few samples in ``epoch_excluded``, instead of one ``epoch_samples`` row per sample.

A change of the schema bumps this number with a migration: an index whose version is current is
opened without running the schema (no write), so a table added without a bump would be missing."""

BUSY_MS = 30000
"""How long a statement waits for another process's write lock before "database is locked"."""
READER_WAIT_MS = 250
"""How long a reader's bookkeeping write (:meth:`Index.write_now`) waits for the write lock."""
_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED


def is_busy(exc: BaseException) -> bool:
    """True when another connection holds the lock (the statement may succeed later)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _BUSY_CODES
    return "database is locked" in str(exc)
_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB (named in the sqlite3 module from 3.11)


def is_corruption(exc: BaseException) -> bool:
    """True when SQLite says the index file itself is damaged (malformed, not a database), as
    opposed to busy, locked, full or unreadable, which a reset would not mend."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _CORRUPT_CODES
    text = str(exc)
    return "malformed" in text or "not a database" in text

_WRITERS: dict[str, threading.RLock] = {}
_WRITERS_LOCK = threading.Lock()


def _writers(path: Path) -> threading.RLock:
    """This process's lock for the writers of ``path`` (one per index file, whatever the
    connections): see :meth:`Index.write`."""
    with _WRITERS_LOCK:
        return _WRITERS.setdefault(os.path.realpath(path), threading.RLock())


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def free_bytes(folder: Path) -> int | None:
    """Bytes an unprivileged writer may still use on ``folder``'s volume (None: unknown)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


Blank = Callable[[str], str | None]
"""Asked with what an index file without schema is (``an empty file``..., or :data:`MISSING`):
None when it is a new index to make, else the damage in words (:class:`.handle.IndexHandle` says
which)."""
MISSING = "missing"
"""What :data:`Blank` is asked with when there is no index file at all."""


class BlankIndex(StoreError):
    """An index file without epochfs's schema where the cache says it had one (the opener's
    ``blank``): damage, which a reader reports and the sampler's start rebuilds (:mod:`.reset`),
    never a fresh index made over the cache's epochs and objects."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: damaged: {problem}; the sampler's next start rebuilds it from the "
                         "epochs' members files")
        self.problem = problem


class Index:
    """One connection to ``index.sqlite`` with its lock. Thread-safe within a process."""

    def __init__(self, path: Path, *, migrate: bool = True, blank: Blank | None = None) -> None:
        """Open ``path``. ``migrate``: this opener may upgrade an older schema (else StoreError).
        ``blank``: asked, when a file that was there holds no schema or there is no file, whether
        that is damage (:class:`BlankIndex`, nothing written, no file made) rather than a new index
        to make."""
        self.path = path
        self.wal = path.with_name(path.name + WAL_SUFFIX)
        self.lock = threading.RLock()
        self.writers = _writers(path)
        existed = os.path.lexists(path)
        if not existed and blank is not None and (problem := blank(MISSING)) is not None:
            raise BlankIndex(path, problem)  # before the connection, which would make the file
        try:
            # "rw" where a file was there: one deleted since is not made again (dburi's why).
            self.db = sqlite3.connect(uri(path, "rw" if existed else "rwc"), uri=True, timeout=30.0,
                                      isolation_level=None, check_same_thread=False)
            # The file this connection has: one put in its place while the schema is made (a reset
            # of what another opener took for a blank index) is followed at the first use.
            index_id = _file_id(path)
            self.db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
            self.db.execute("PRAGMA synchronous=NORMAL")
            version = self._version()
            if version is None and existed and blank is not None:
                self._refuse_blank(blank)
            if version != SCHEMA_VERSION:
                self._prepare(migrate=migrate)
        except sqlite3.DatabaseError as e:
            if existed and not os.path.lexists(path) and blank is not None \
                    and (problem := blank(MISSING)) is not None:
                raise BlankIndex(path, problem) from e  # deleted between the look and the open
            free = free_bytes(path.parent)
            if free is not None and free < NO_ROOM_BYTES and not is_corruption(e):
                raise NoRoom(f"{path}: the cache's volume is full ({free} bytes free), so the "
                             f"index cannot be opened ({e}); waiting for room") from e
            self._corrupted(e)
            raise StoreError(f"{path}: {e}") from e
        # What this connection opened: a file put in its place, or a write-ahead log deleted
        # under it, is seen by :meth:`changed` (the connection keeps the files it opened).
        self.opened = (index_id, _file_id(self.wal))

    def changed(self) -> str | None:
        """None while the index and its write-ahead log are the files this connection opened;
        otherwise what happened: ``index missing``, ``index replaced``, ``wal missing`` or ``wal
        replaced``. Two stat calls: cheap enough to ask before every use."""
        index, wal = _file_id(self.path), _file_id(self.wal)
        if index != self.opened[0]:
            return "index missing" if index is None else "index replaced"
        if wal != self.opened[1] and self.opened[1] is not None:
            return "wal missing" if wal is None else "wal replaced"
        return None

    def frames_elsewhere(self) -> bool:
        """True when the shared-memory index lists more log frames than the write-ahead log file
        now at the path holds: the frames live in a log that was deleted, which only connections
        opened before the deletion (this one) can still read. False when the file holds them (a
        checkpoint by another process already saved them) or the header cannot be read."""
        try:
            # Never open() and close(): the close would drop our connections' locks on it.
            header = keptfds.read_head(self.path.with_name(self.path.name + SHM_SUFFIX), 48)
            wal_size = os.stat(self.wal).st_size if self.wal.exists() else 0
        except OSError:
            return False
        if len(header) < 48:
            return False
        page = int.from_bytes(header[14:16], sys.byteorder)
        frames = int.from_bytes(header[16:20], sys.byteorder)
        page = 65536 if page == 1 else page
        return frames > 0 and wal_size < 32 + frames * (24 + page)

    def checkpoint(self) -> tuple[int, int, int]:
        """Copy every committed page of this connection's write-ahead log into the index file and
        truncate the log (``PRAGMA wal_checkpoint(TRUNCATE)``): (busy, log frames, checkpointed)."""
        with self.lock:
            busy, frames, done = self.db.execute("PRAGMA wal_checkpoint(FULL)").fetchone()
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return int(busy), int(frames), int(done)

    def integrity(self) -> str:
        """``PRAGMA integrity_check``: "ok", or SQLite's description of the damage. It reads every
        page (39 s at 10M samples): the sampler's start runs it only when asked to
        (:mod:`.checkup`), the background check on a read-only connection of its own."""
        with self.lock:
            rows = self.db.execute("PRAGMA integrity_check").fetchall()
        return "; ".join(str(r[0]) for r in rows[:5])

    def _corrupted(self, exc: BaseException) -> None:
        """A statement failed because the file is damaged: ask for a full check and repair at the
        sampler's next start (:mod:`.checkmark`), whichever process saw it."""
        if isinstance(exc, sqlite3.DatabaseError) and is_corruption(exc):
            checkmark.mark(self.path.parent, f"{type(exc).__name__}: {exc}")

    def _refuse_blank(self, blank: Blank) -> None:
        """Raise :class:`BlankIndex` when ``blank`` calls this file without schema damage; what it
        is comes from this connection and a ``stat`` (another descriptor of the file, closed,
        would drop this process's locks on it, those of the connections it has open too)."""
        tables = self.db.execute("SELECT count(*) FROM sqlite_master WHERE type='table'").fetchone()[0]
        what = ("an empty file" if os.stat(self.path).st_size == 0 else
                "an SQLite database with no tables" if not tables else
                "an SQLite database without epochfs's schema version")
        problem = blank(what)
        if problem is not None:
            self.db.close()
            raise BlankIndex(self.path, problem)

    def _version(self) -> int | None:
        """The recorded schema version, in one deferred read (None: no schema yet)."""
        with self.read() as db:
            return self._version_in(db)

    def _prepare(self, *, migrate: bool) -> None:
        """Make a fresh index, or migrate an older one (``migrate``); refuse a newer one. Under the
        write lock, looking again first (another process may have done it meanwhile)."""
        mode = str(self.db.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        if mode != "wal":
            self.db.execute("PRAGMA journal_mode=WAL")
        with self.write() as db:
            version = self._version_in(db)
            if version is None:
                create(db)
                db.execute(SEEN_INDEX)
                self.put(Meta.SCHEMA_VERSION, str(SCHEMA_VERSION))
                return
            if version > SCHEMA_VERSION:  # a rollback: refused before any write, kept for the newer version
                raise StoreError(f"{self.path}: written by a newer epochfs (index schema {version}; "
                                 f"this version reads up to {SCHEMA_VERSION}): run the newer version on it, "
                                 "or give this one another --cache (an empty folder: it starts cold)")
            if version == SCHEMA_VERSION:
                return
            if not migrate:
                raise StoreError(f"{self.path}: schema version {version}; the sampler upgrades it to "
                                 f"{SCHEMA_VERSION} at its next start")
            create(db)  # tables added since (CREATE IF NOT EXISTS)
            if version == 1:
                migrate_1_to_2(db)
            migrate_2_to_3(db)
            migrate_epochs_2_to_3(db)
            migrate_3_to_4(db)
            migrate_4_to_5(db)
            migrate_5_to_6(db)
            self.put(Meta.SCHEMA_VERSION, str(SCHEMA_VERSION))

    @staticmethod
    def _version_in(db: sqlite3.Connection) -> int | None:
        try:
            row = db.execute("SELECT value FROM meta WHERE name=?", (Meta.SCHEMA_VERSION.value,)).fetchone()
        except sqlite3.OperationalError as e:
            if "no such table" not in str(e):
                raise
            return None
        return None if row is None else int(row[0])

    def close(self) -> None:
        with self.lock:
            self.db.close()

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the lock; IMMEDIATE so writers serialize across processes.

        The writers of this process queue first on one lock per index file (``writers``), before
        their connection's lock: a writer that waits for another connection's write transaction in
        this process (the listers write the catalog through their own, ``epochfs sample``) waits
        there, not in SQLite's busy handler with its connection's lock held, so the readers of its
        connection are not held up behind the other connection's commit."""
        with self.writers, self._transaction("BEGIN IMMEDIATE") as db:
            yield db

    @contextlib.contextmanager
    def write_now(self, wait_ms: int = READER_WAIT_MS) -> Iterator[sqlite3.Connection]:
        """A write transaction for a reader's small bookkeeping (a read record, a cut on lookup):
        it waits at most ``wait_ms`` for the write lock, then raises an OperationalError that
        :func:`is_busy` recognizes, so a FUSE request never waits out the sampler's long write."""
        with self.lock:
            self.db.execute(f"PRAGMA busy_timeout={int(wait_ms)}")
            try:
                with self._transaction("BEGIN IMMEDIATE") as db:
                    yield db
            finally:
                self.db.execute(f"PRAGMA busy_timeout={BUSY_MS}")

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """One consistent read (a deferred transaction: it never takes the write lock)."""
        with self._transaction("BEGIN") as db:
            yield db

    @contextlib.contextmanager
    def _transaction(self, begin: str) -> Iterator[sqlite3.Connection]:
        with self.lock:
            try:
                self.db.execute(begin)
            except sqlite3.DatabaseError as e:
                self._corrupted(e)
                raise
            try:
                yield self.db
            except BaseException as e:
                self._corrupted(e)
                with contextlib.suppress(sqlite3.Error):  # a damaged page may fail the rollback too
                    self.db.execute("ROLLBACK")
                raise
            else:
                try:
                    self.db.execute("COMMIT")
                except sqlite3.DatabaseError as e:
                    self._corrupted(e)
                    raise

    def query(self, sql: str, args: tuple[object, ...] = ()) -> list[Any]:
        """A single statement outside an explicit transaction (autocommit read)."""
        with self.lock:
            try:
                return self.db.execute(sql, args).fetchall()
            except sqlite3.DatabaseError as e:
                self._corrupted(e)
                raise

    def get(self, key: Meta) -> str | None:
        with self.lock:
            try:
                row = self.db.execute("SELECT value FROM meta WHERE name=?", (key.value,)).fetchone()
            except sqlite3.DatabaseError as e:
                self._corrupted(e)
                raise
        return None if row is None else str(row[0])

    def put(self, key: Meta, value: str) -> None:
        """Set a meta value; call inside :meth:`write`."""
        self.db.execute(
            "INSERT INTO meta(name, value) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET value=excluded.value",
            (key.value, value),
        )

    def bump(self, name: str, by: int) -> None:
        """Add ``by`` to a counter; call inside :meth:`write`."""
        self.db.execute(
            "INSERT INTO counters(name, value) VALUES(?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value=value+excluded.value",
            (name, by),
        )

    def set_counter(self, name: str, value: int) -> None:
        """Set a running total; call inside :meth:`write`."""
        self.db.execute(
            "INSERT INTO counters(name, value) VALUES(?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value=excluded.value",
            (name, value),
        )

    def counter(self, name: str) -> int:
        row = self.query("SELECT value FROM counters WHERE name=?", (name,))
        return int(row[0][0]) if row else 0
