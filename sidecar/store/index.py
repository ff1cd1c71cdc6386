"""The SQLite index of a cache folder: schema, transactions, typed meta keys and counters.

Two processes (the sampler, which writes, and the FUSE server, which reads and asks for cuts) open
the same ``index.sqlite`` in WAL mode, so readers never block the writer and vice versa. Writes use
``BEGIN IMMEDIATE`` so writers serialize across processes instead of failing on lock upgrades;
reads use a deferred ``BEGIN`` and so never take the write lock.

Opening an index whose schema is current is reads only (one deferred read of the version): a
reader (``epochfs status``, the FUSE server, the supervisor's readiness) opens it while the sampler
holds the write lock for as long as it likes. Only a missing schema (a fresh index) or an older
one takes the write lock, and an older one is migrated only by an opener that may (``migrate``:
the sidecar's processes, which open with ``create``), never by ``epochfs status`` or ``verify``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import threading
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any

from epochfs.sidecar.store import checkmark
from epochfs.sidecar.store.records import SIZE_ONLY, StoreError

INDEX_NAME = "index.sqlite"
WAL_SUFFIX = "-wal"
SHM_SUFFIX = "-shm"
SCHEMA_VERSION = 3
"""2: samples record ``digest`` (md5 of the bytes admitted) and ``verified`` (what checked them).
3: catalog rows record ``seen`` (the listing that last saw them: a relist drops the rows it did not
see), the ``listing_parts`` table holds each lister's progress (a listing resumes after a restart),
and ``pos`` is no longer numbered (windows are ranges of the rank order); an epoch may be a range
of the admission order (``epochs.first_sample``) instead of one ``epoch_samples`` row per sample
(epochs cut before keep their rows: NULL ``first_sample``).

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

SCHEMA = """  -- statements split at semicolons: none inside a comment
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS catalog (
    key TEXT PRIMARY KEY,          -- the remote key (relative to the remote root)
    path TEXT NOT NULL,            -- the path shown inside epoch-N/ (equal to key since schema 1)
    sid TEXT NOT NULL,             -- sample id: names the object file
    size INTEGER NOT NULL,
    version TEXT NOT NULL,         -- ETag / generation / mtime tag
    rank INTEGER NOT NULL,         -- position key in the sampling order (keyed hash of seed, key)
    pos INTEGER,                   -- unused since schema 3 (was: position numbered after listing)
    skipped INTEGER NOT NULL DEFAULT 0,
    seen INTEGER NOT NULL DEFAULT 0  -- the listing generation that last saw the key (schema 3)
);
CREATE INDEX IF NOT EXISTS catalog_rank ON catalog(rank);
CREATE TABLE IF NOT EXISTS listing_parts (
    part INTEGER PRIMARY KEY,      -- one lister's share of the key space in the running listing
    prefix TEXT NOT NULL,          -- the listing prefix (relative to the remote root)
    start TEXT NOT NULL,           -- list keys after this one ('' = from the prefix's start)
    stop TEXT,                     -- keys from this one on belong to the next part (NULL = none)
    after TEXT NOT NULL,           -- the last key committed: a restart resumes after it
    done INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT,   -- admission order: eviction takes the smallest first
    sid TEXT NOT NULL UNIQUE,
    key TEXT NOT NULL UNIQUE,
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    checksum TEXT NOT NULL,        -- what the manifest shows: md5:<hex> of verified bytes, or size-only
    version TEXT NOT NULL,
    admitted_at REAL NOT NULL,
    digest TEXT NOT NULL DEFAULT '',   -- md5 hex of the bytes admitted: the scrub's reference
    verified TEXT NOT NULL DEFAULT ''  -- what verified them against the remote (etag-md5, crc64nvme...)
);
CREATE TABLE IF NOT EXISTS epochs (
    n INTEGER PRIMARY KEY,
    cut_at REAL NOT NULL,
    samples INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    new INTEGER NOT NULL,
    evicted INTEGER NOT NULL,
    max_sample INTEGER NOT NULL,   -- highest samples.id when cut: later samples are pending
    last_read REAL NOT NULL,       -- 0 until a reader records a read
    retired INTEGER NOT NULL DEFAULT 0,
    first_sample INTEGER           -- set: the epoch is the samples with first_sample <= id <= max_sample,
                                   -- NULL: the epoch is its rows in epoch_samples
);
-- Only epochs that are not a range of the admission order (schedule-mode windows, epochs cut by
-- schema 2) have rows here.
CREATE TABLE IF NOT EXISTS epoch_samples (
    epoch INTEGER NOT NULL,
    sample INTEGER NOT NULL,
    PRIMARY KEY (epoch, sample)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS epoch_samples_sample ON epoch_samples(sample);
CREATE TABLE IF NOT EXISTS cut_requests (n INTEGER PRIMARY KEY, requested_at REAL NOT NULL);
"""


class Meta(str, Enum):
    """Every key of the ``meta`` table, so a misspelt key is a NameError, not a silent miss."""

    SCHEMA_VERSION = "schema_version"
    CAPACITY = "capacity"
    KEEP_EPOCHS = "keep_epochs"
    MIN_SAMPLES = "min_samples"
    HEADROOM = "headroom"
    IN_USE_SECONDS = "in_use_seconds"
    SCHEDULE = "schedule"
    INFLIGHT_BYTES = "inflight_bytes"
    """Bytes reserved by downloads in flight, published by the sampler for status and metrics."""
    BACKPRESSURE = "backpressure"
    CATALOG_OBJECTS = "catalog_objects"
    CATALOG_SKIPS_COUNTED = "catalog_skips_counted"
    """Listing skips already added to ``skipped_total`` (a relisting must not count them twice)."""
    LISTING_GENERATION = "listing_generation"
    """The generation of the listing that is running or last ran (rows it saw carry it)."""
    LISTING_COMPLETE = "listing_complete"
    """The generation of the newest listing that went to the end (absent: none did yet)."""
    LISTING_SOURCE = "listing_source"
    """Where the running listing reads keys: ``list`` or the index URL (a change starts afresh)."""
    SAMPLER_REMOTE = "sampler_remote"
    SAMPLER_SEED = "sampler_seed"
    SAMPLER_SHARD = "sampler_shard"
    SIDECAR_TOTALS = "sidecar_totals"
    """The supervisor's own counters (served, client reports), kept across restarts."""
    INDEX_CHECKED_AT = "index_checked_at"
    """When the last full ``integrity_check`` of this index began (unix time; :mod:`.checkup`)."""
    INDEX_CHECK_RESULT = "index_check_result"
    """What it found: "ok", or the damage (then :mod:`.checkmark` forces a repair at the next start)."""


COUNTER_NAMES = (
    "fetched_total",
    "fetched_bytes_total",
    "evicted_total",
    "evicted_bytes_total",
    "skipped_total",
    "cuts_total",
    "corrupt_objects_total",
)
"""Counters that only grow; ``cache_bytes`` and ``cache_samples`` are running totals beside them."""


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


class Index:
    """One connection to ``index.sqlite`` with its lock. Thread-safe within a process."""

    def __init__(self, path: Path, *, migrate: bool = True) -> None:
        """Open ``path``. ``migrate``: this opener may upgrade an older schema (else StoreError)."""
        self.path = path
        self.wal = path.with_name(path.name + WAL_SUFFIX)
        self.lock = threading.RLock()
        try:
            self.db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
            self.db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
            self.db.execute("PRAGMA synchronous=NORMAL")
            if self._version() != SCHEMA_VERSION:
                self._prepare(migrate=migrate)
        except sqlite3.DatabaseError as e:
            self._corrupted(e)
            raise StoreError(f"{path}: {e}") from e
        # What this connection opened: a file put in its place, or a write-ahead log deleted
        # under it, is seen by :meth:`changed` (the connection keeps the files it opened).
        self.opened = (_file_id(path), _file_id(self.wal))

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
            with open(self.path.with_name(self.path.name + SHM_SUFFIX), "rb") as f:
                header = f.read(48)
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
                _create(db)
                db.execute(_SEEN_INDEX)
                self.put(Meta.SCHEMA_VERSION, str(SCHEMA_VERSION))
                return
            if version > SCHEMA_VERSION:
                raise StoreError(f"{self.path}: schema version {version}, "
                                 f"this epochfs reads {SCHEMA_VERSION}")
            if version == SCHEMA_VERSION:
                return
            if not migrate:
                raise StoreError(f"{self.path}: schema version {version}; the sampler upgrades it to "
                                 f"{SCHEMA_VERSION} at its next start")
            _create(db)  # tables added since (CREATE IF NOT EXISTS)
            if version == 1:
                _migrate_1_to_2(db)
            _migrate_2_to_3(self)
            _migrate_epochs_2_to_3(db)
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
        """One write transaction under the lock; IMMEDIATE so writers serialize across processes."""
        with self._transaction("BEGIN IMMEDIATE") as db:
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


_SEEN_INDEX = "CREATE INDEX IF NOT EXISTS catalog_seen ON catalog(seen)"


def _migrate_2_to_3(ix: Index) -> None:
    """Schema 2 numbered ``pos`` after a complete listing (its index goes) and had no listing
    generations: every row counts as seen by listing 0, complete when the catalog was numbered."""
    db = ix.db
    columns = {str(r[1]) for r in db.execute("PRAGMA table_info(catalog)")}
    if "seen" not in columns:
        db.execute("ALTER TABLE catalog ADD COLUMN seen INTEGER NOT NULL DEFAULT 0")
    db.execute("DROP INDEX IF EXISTS catalog_pos")
    db.execute(_SEEN_INDEX)
    ix.put(Meta.LISTING_GENERATION, "0")
    if ix.get(Meta.CATALOG_OBJECTS) is not None:
        ix.put(Meta.LISTING_COMPLETE, "0")


def _migrate_1_to_2(db: sqlite3.Connection) -> None:
    """Schema 1 recorded ``md5:<hex>`` of whatever arrived, verified or not. Keep that md5 as the
    scrub's digest; the manifest keeps vouching for it only where the ETag was that same md5 (the
    downloader had checked it), and says ``size-only`` for the rest (multipart ETags, files...)."""
    columns = {str(r[1]) for r in db.execute("PRAGMA table_info(samples)")}
    if "digest" not in columns:
        db.execute("ALTER TABLE samples ADD COLUMN digest TEXT NOT NULL DEFAULT ''")
    if "verified" not in columns:
        db.execute("ALTER TABLE samples ADD COLUMN verified TEXT NOT NULL DEFAULT ''")
    db.execute("UPDATE samples SET digest = substr(checksum, 5) WHERE checksum LIKE 'md5:%'")
    db.execute("UPDATE samples SET verified = 'etag-md5' WHERE digest != '' "
               "AND lower(trim(version, '\"')) = digest")
    db.execute("UPDATE samples SET verified = ?, checksum = ? WHERE verified = ''", (SIZE_ONLY, SIZE_ONLY))


def _create(db: sqlite3.Connection) -> None:
    """Every table and index of :data:`SCHEMA` that is missing (inside a write transaction)."""
    for statement in SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)


def _migrate_epochs_2_to_3(db: sqlite3.Connection) -> None:
    """Epochs may be ranges of the admission order: one column, NULL for the epochs already cut
    (they keep their ``epoch_samples`` rows until they retire). No row is rewritten."""
    columns = {str(r[1]) for r in db.execute("PRAGMA table_info(epochs)")}
    if "first_sample" not in columns:
        db.execute("ALTER TABLE epochs ADD COLUMN first_sample INTEGER")
