"""The node cache: objects on the node volume plus a SQLite index of samples and epochs.

This module is the one contract between the sampler (which writes) and the FUSE view (which reads
and asks for cuts). It knows nothing of remotes, FUSE or Kubernetes, so both processes can open the
same cache folder and rely on SQLite (WAL mode) for consistency between them.

Layout of a cache folder::

    index.sqlite          samples, epochs, catalog, counters (WAL mode)
    objects/ab/<sid>      one file per sample, named from its sample id, never from its key
    tmp/<random>.part     in-flight downloads; never listed, removed at start-up

Rules kept here (see DESIGN.md): an object is visible only after temp -> fsync -> rename -> dir
fsync -> index commit; cache bytes plus in-flight reservations never exceed the capacity; eviction
removes the samples admitted first that no live epoch holds; an epoch, once cut, never changes while
it is visible.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

INDEX_NAME = "index.sqlite"
OBJECTS_DIR = "objects"
TMP_DIR = "tmp"
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS catalog (
    key TEXT PRIMARY KEY,          -- the remote key (relative to the remote root)
    path TEXT NOT NULL,            -- the safe relative path shown inside epoch-N/
    sid TEXT NOT NULL,             -- sample id: names the object file
    size INTEGER NOT NULL,
    version TEXT NOT NULL,         -- ETag / generation / mtime tag
    rank INTEGER NOT NULL,         -- position key in the sampling order (keyed hash of seed, key)
    pos INTEGER,                   -- 0-based position in the order, assigned by finalize_catalog
    skipped INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS catalog_rank ON catalog(rank);
CREATE INDEX IF NOT EXISTS catalog_pos ON catalog(pos);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT,   -- admission order: eviction takes the smallest first
    sid TEXT NOT NULL UNIQUE,
    key TEXT NOT NULL UNIQUE,
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    checksum TEXT NOT NULL,
    version TEXT NOT NULL,
    admitted_at REAL NOT NULL
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
    retired INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS epoch_samples (
    epoch INTEGER NOT NULL,
    sample INTEGER NOT NULL,
    PRIMARY KEY (epoch, sample)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS epoch_samples_sample ON epoch_samples(sample);
CREATE TABLE IF NOT EXISTS cut_requests (n INTEGER PRIMARY KEY, requested_at REAL NOT NULL);
"""

COUNTER_NAMES = (
    "fetched_total",
    "fetched_bytes_total",
    "evicted_total",
    "evicted_bytes_total",
    "skipped_total",
    "cuts_total",
)


class StoreError(Exception):
    """A cache folder that cannot be used (not a folder, corrupt index, wrong schema)."""


@dataclass(frozen=True)
class Schedule:
    """Schedule mode: epoch N holds the first ``initial * growth**N`` keys of the sampling order."""

    initial: int
    growth: float

    def size(self, n: int) -> int:
        """Number of keys in epoch ``n``'s window before the capacity budget trims its front."""
        return round(self.initial * (self.growth**n))

    def __str__(self) -> str:
        return f"initial={self.initial},growth={self.growth}"

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """Parse ``initial=1000,growth=1.5``; raises ValueError with the reason."""
        fields: dict[str, str] = {}
        for part in text.split(","):
            name, sep, value = part.partition("=")
            if not sep:
                raise ValueError(f"expected name=value, got {part!r}")
            fields[name.strip()] = value.strip()
        unknown = set(fields) - {"initial", "growth"}
        if unknown:
            raise ValueError(f"unknown schedule field(s): {', '.join(sorted(unknown))}")
        try:
            initial = int(fields.get("initial", "1000"))
            growth = float(fields.get("growth", "1.5"))
        except ValueError as e:
            raise ValueError(f"not a number: {e}") from None
        if initial < 1:
            raise ValueError("initial must be at least 1")
        if growth < 1.0:
            raise ValueError("growth must be at least 1.0")
        return cls(initial=initial, growth=growth)


@dataclass(frozen=True)
class Policy:
    """The cache rules both processes must agree on; stored in the index by the sampler."""

    capacity: int
    """Byte budget of the cache, in-flight downloads included."""
    keep_epochs: int = 2
    """The newest K epochs stay pinned (never evicted, never retired)."""
    min_samples: int = 1
    """Complete samples needed before an epoch can be cut."""
    headroom: float = 0.25
    """Share of the capacity kept out of epochs so that sampling can go on while epochs are pinned."""
    in_use_seconds: float = 30.0
    """An epoch read within this many seconds stays pinned even when it is not among the newest."""
    schedule: Schedule | None = None
    """Schedule mode when set; snapshot mode otherwise."""

    @property
    def epoch_budget(self) -> int:
        """Most bytes one epoch may hold, so that new samples still fit beside the pinned epochs."""
        return max(1, int(self.capacity * (1.0 - self.headroom)))


@dataclass(frozen=True)
class CatalogRow:
    """One listed remote object, with its sampling-order rank precomputed by the sampler."""

    key: str
    path: str
    sid: str
    size: int
    version: str
    rank: int


@dataclass(frozen=True)
class Candidate:
    """A catalog entry chosen for download."""

    key: str
    path: str
    sid: str
    size: int
    version: str


@dataclass(frozen=True)
class Admission:
    """A fully written, verified temp file ready to become a sample."""

    key: str
    path: str
    sid: str
    size: int
    checksum: str
    version: str
    temp: Path


@dataclass(frozen=True)
class FileEntry:
    """One file of an epoch: its path inside epoch-N/, size, checksum and object file name."""

    path: str
    size: int
    checksum: str
    object_name: str


@dataclass(frozen=True)
class EpochInfo:
    """A live epoch as listed by :meth:`Store.epochs`."""

    epoch: int
    samples: int
    bytes: int
    new: int
    evicted: int
    cut_at: float


@dataclass(frozen=True)
class RecoveryReport:
    """What start-up recovery found and repaired."""

    temp_removed: int = 0
    rows_dropped: int = 0
    orphans_removed: int = 0
    integrity: str = "ok"

    def __str__(self) -> str:
        return (
            f"recovery: integrity {self.integrity}, {self.temp_removed} temp file(s) removed, "
            f"{self.rows_dropped} index row(s) dropped, {self.orphans_removed} orphan object(s) removed"
        )


@dataclass
class Stats:
    """Occupancy and counters, the body of ``status.json`` and ``epochfs status --json``."""

    cache_bytes: int
    """Bytes of complete samples; ``cache_bytes + inflight_bytes <= capacity_bytes`` always."""
    capacity_bytes: int
    samples: int
    inflight_bytes: int
    backpressure: bool
    catalog_objects: int
    pending_cuts: list[int]
    epochs: list[dict[str, Any]]
    fetched_total: int = 0
    fetched_bytes_total: int = 0
    evicted_total: int = 0
    evicted_bytes_total: int = 0
    skipped_total: int = 0
    cuts_total: int = 0
    latest_epoch: int | None = None
    mode: str = "snapshot"
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def object_name(sid: str) -> str:
    """Object file name (relative to ``objects/``) of a sample id: fanned out by its first byte."""
    return f"{sid[:2]}/{sid}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Store:
    """A cache folder on the node volume. Thread-safe; several processes may open the same folder."""

    def __init__(self, root: str | os.PathLike[str], *, create: bool = False) -> None:
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"cache path {self.root} exists and is not a directory")
        if not self.root.exists():
            if not create:
                raise StoreError(f"cache directory {self.root} does not exist")
            self.root.mkdir(parents=True)
        self.objects_dir = self.root / OBJECTS_DIR
        self.tmp_dir = self.root / TMP_DIR
        index = self.root / INDEX_NAME
        if not create and not index.exists():
            raise StoreError(f"{self.root} is not an epochfs cache (no {INDEX_NAME})")
        self.objects_dir.mkdir(exist_ok=True)
        self.tmp_dir.mkdir(exist_ok=True)
        self._lock = threading.RLock()
        self._reserved = 0
        try:
            self._db = sqlite3.connect(
                index, timeout=30.0, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=30000")
            self._db.executescript(_SCHEMA)
            with self._tx():
                version = self._meta_get("schema_version")
                if version is None:
                    self._meta_set("schema_version", str(SCHEMA_VERSION))
                elif int(version) != SCHEMA_VERSION:
                    raise StoreError(
                        f"{index}: schema version {version}, this epochfs reads {SCHEMA_VERSION}"
                    )
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{index}: {e}") from e

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _tx(self, immediate: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction under the store's lock; IMMEDIATE so writers serialize across processes."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            else:
                self._db.execute("COMMIT")

    def _query(self, sql: str, args: tuple[object, ...] = ()) -> list[Any]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _meta_get(self, name: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE name=?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def _meta_set(self, name: str, value: str) -> None:
        self._db.execute(
            "INSERT INTO meta(name, value) VALUES(?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value=excluded.value",
            (name, value),
        )

    def _bump(self, db: sqlite3.Connection, name: str, by: int) -> None:
        db.execute(
            "INSERT INTO counters(name, value) VALUES(?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value=value+excluded.value",
            (name, by),
        )

    def meta(self, name: str) -> str | None:
        """A free-form value the sampler stored (for example the remote URL)."""
        with self._lock:
            return self._meta_get(name)

    def set_meta(self, name: str, value: str) -> None:
        with self._tx():
            self._meta_set(name, value)

    # ------------------------------------------------------------------ policy
    def configure(self, policy: Policy) -> None:
        """Record the cache rules (the sampler does this at start; readers pick them up)."""
        if policy.capacity <= 0:
            raise ValueError("capacity must be positive")
        with self._tx():
            self._meta_set("capacity", str(policy.capacity))
            self._meta_set("keep_epochs", str(policy.keep_epochs))
            self._meta_set("min_samples", str(policy.min_samples))
            self._meta_set("headroom", repr(policy.headroom))
            self._meta_set("in_use_seconds", repr(policy.in_use_seconds))
            self._meta_set("schedule", str(policy.schedule) if policy.schedule else "")

    def policy(self) -> Policy:
        """The rules last recorded by :meth:`configure` (defaults and capacity 1 before that)."""
        with self._lock:
            get = self._meta_get
            schedule = get("schedule")
            return Policy(
                capacity=int(get("capacity") or 1),
                keep_epochs=int(get("keep_epochs") or 2),
                min_samples=int(get("min_samples") or 1),
                headroom=float(get("headroom") or 0.25),
                in_use_seconds=float(get("in_use_seconds") or 30.0),
                schedule=Schedule.parse(schedule) if schedule else None,
            )

    # ------------------------------------------------------------------ recovery
    def recover(self) -> RecoveryReport:
        """Make the folder consistent after a crash: the sampler runs this before it writes.

        Removes temp files, drops index rows whose object is missing or has the wrong size, removes
        object files the index does not know, and runs ``PRAGMA integrity_check``.
        """
        with self._lock:
            integrity = str(self._db.execute("PRAGMA integrity_check").fetchone()[0])
            if integrity != "ok":
                raise StoreError(f"{self.root / INDEX_NAME}: integrity check failed: {integrity}")
            temp_removed = 0
            for entry in os.scandir(self.tmp_dir):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    temp_removed += 1
            known: dict[str, int] = {}
            bad: list[int] = []
            for sid_obj, size_obj, sample_id in self._db.execute("SELECT sid, size, id FROM samples"):
                sid, size = str(sid_obj), int(size_obj)
                try:
                    actual = os.stat(self.objects_dir / object_name(sid)).st_size
                except FileNotFoundError:
                    actual = -1
                if actual != size:
                    bad.append(int(sample_id))
                else:
                    known[sid] = size
            if bad:
                with self._tx():
                    for sample_id in bad:
                        self._drop_sample_rows(self._db, sample_id)
            orphans = 0
            for fan in os.scandir(self.objects_dir):
                if not fan.is_dir(follow_symlinks=False):
                    continue
                for entry in os.scandir(fan.path):
                    if entry.name not in known:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(entry.path)
                            orphans += 1
            self._reserved = 0
            with self._tx():
                self._recount(self._db)
                self._meta_set("inflight_bytes", "0")
        return RecoveryReport(temp_removed, len(bad), orphans, integrity)

    def _drop_sample_rows(self, db: sqlite3.Connection, sample_id: int) -> None:
        # Epochs that listed a lost sample must not list it any more; the count shows it.
        for (epoch,) in db.execute("SELECT epoch FROM epoch_samples WHERE sample=?", (sample_id,)):
            db.execute("UPDATE epochs SET samples=samples-1 WHERE n=?", (epoch,))
        db.execute("DELETE FROM epoch_samples WHERE sample=?", (sample_id,))
        db.execute("DELETE FROM samples WHERE id=?", (sample_id,))

    # ------------------------------------------------------------------ catalog
    def add_catalog(self, rows: Iterable[CatalogRow]) -> int:
        """Insert or refresh listed objects (one transaction per call; call in batches)."""
        count = 0
        with self._tx():
            for r in rows:
                self._db.execute(
                    "INSERT INTO catalog(key, path, sid, size, version, rank) VALUES(?,?,?,?,?,?) "
                    "ON CONFLICT(key) DO UPDATE SET size=excluded.size, version=excluded.version",
                    (r.key, r.path, r.sid, r.size, r.version, r.rank),
                )
                count += 1
        return count

    def finalize_catalog(self) -> int:
        """Number the catalog in sampling order (positions define schedule-mode windows)."""
        with self._tx():
            self._db.execute(
                "UPDATE catalog SET pos = (SELECT p FROM (SELECT key AS k, "
                "ROW_NUMBER() OVER (ORDER BY rank, key) - 1 AS p FROM catalog) WHERE k = catalog.key)"
            )
            total = int(self._db.execute("SELECT COUNT(*) FROM catalog").fetchone()[0])
            self._meta_set("catalog_objects", str(total))
        return total

    def catalog_count(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM catalog")[0][0])

    def candidates(self, *, after_rank: int | None, limit: int) -> list[tuple[int, Candidate]]:
        """The next catalog entries in sampling order that are neither cached nor skipped."""
        lower = -(2**63) if after_rank is None else after_rank
        op = ">=" if after_rank is None else ">"
        return self._candidates(
            f"c.rank {op} ? ORDER BY c.rank, c.key LIMIT ?", (lower, limit), order_column="rank"
        )

    def _candidates(
        self, where: str, args: tuple[object, ...], *, order_column: str
    ) -> list[tuple[int, Candidate]]:
        """Catalog rows matching ``where`` that are neither cached nor skipped, as (order, candidate)."""
        rows = self._query(
            f"SELECT c.{order_column}, c.key, c.path, c.sid, c.size, c.version FROM catalog c "
            f"WHERE c.skipped = 0 AND NOT EXISTS (SELECT 1 FROM samples s WHERE s.key = c.key) "
            f"AND {where}",
            args,
        )
        return [
            (int(r[0]), Candidate(str(r[1]), str(r[2]), str(r[3]), int(r[4]), str(r[5])))
            for r in rows
        ]

    def schedule_window(self, n: int) -> tuple[int, int]:
        """Schedule mode: positions [lo, hi) of epoch ``n``'s window (the sampler fetches it first)."""
        policy = self.policy()
        if policy.schedule is None:
            raise ValueError("not in schedule mode")
        with self._lock:
            return self._window(self._db, policy, n)

    def window_candidates(self, lo: int, hi: int, *, limit: int) -> list[tuple[int, Candidate]]:
        """Catalog entries at positions [lo, hi) that are neither cached nor skipped, in order."""
        return self._candidates(
            "c.pos >= ? AND c.pos < ? ORDER BY c.pos LIMIT ?", (lo, hi, limit), order_column="pos"
        )

    def mark_skipped(self, key: str) -> None:
        """Record that a key will not be fetched (failed downloads, refused by policy)."""
        with self._tx():
            self._db.execute("UPDATE catalog SET skipped=1 WHERE key=?", (key,))
            self._bump(self._db, "skipped_total", 1)

    def count_skip(self, n: int = 1) -> None:
        """Count keys skipped before they reached the catalog (hostile names, too large)."""
        with self._tx():
            self._bump(self._db, "skipped_total", n)

    # ------------------------------------------------------------------ capacity
    def cache_bytes(self) -> int:
        """Bytes of complete samples (reservations not included), from a running total."""
        row = self._query("SELECT value FROM counters WHERE name='cache_bytes'")
        return int(row[0][0]) if row else 0

    def _recount(self, db: sqlite3.Connection) -> None:
        """Reset the running totals from the samples table (at recovery; they are kept in step)."""
        count, total = db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM samples").fetchone()
        for name, value in (("cache_bytes", total), ("cache_samples", count)):
            db.execute(
                "INSERT INTO counters(name, value) VALUES(?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value=excluded.value",
                (name, int(value)),
            )

    @property
    def reserved(self) -> int:
        return self._reserved

    def reserve(self, size: int, *, capacity: int | None = None) -> bool:
        """Reserve room for a download, evicting what may be evicted; False means backpressure.

        Reservations live in this process (the sampler is the only writer), so cache bytes plus
        in-flight bytes never exceed the capacity.
        """
        cap = self.policy().capacity if capacity is None else capacity
        with self._lock:
            if size > cap:
                return False
            need = self.cache_bytes() + self._reserved + size - cap
            if need > 0:
                self.evict(need)
                need = self.cache_bytes() + self._reserved + size - cap
            if need > 0:
                return False
            self._reserved += size
            return True

    def release(self, size: int) -> None:
        """Give back a reservation whose download failed or was admitted."""
        with self._lock:
            self._reserved = max(0, self._reserved - size)

    def temp_path(self) -> Path:
        """A fresh temp file name for one download (in tmp/, removed at start-up if left)."""
        return self.tmp_dir / f"{uuid.uuid4().hex}.part"

    def admit(self, items: list[Admission]) -> None:
        """Make verified downloads visible: rename into objects/, fsync dirs, then commit the index.

        The caller has already fsynced each temp file. A crash before the commit leaves object files
        the index does not know; recovery removes them.
        """
        if not items:
            return
        dirs: set[Path] = set()
        for a in items:
            target = self.objects_dir / object_name(a.sid)
            target.parent.mkdir(exist_ok=True)
            os.chmod(a.temp, 0o444)
            os.replace(a.temp, target)
            dirs.add(target.parent)
        for d in dirs:
            _fsync_dir(d)
        now = time.time()
        with self._tx():
            for a in items:
                self._db.execute(
                    "INSERT INTO samples(sid, key, path, size, checksum, version, admitted_at) "
                    "VALUES(?,?,?,?,?,?,?)",
                    (a.sid, a.key, a.path, a.size, a.checksum, a.version, now),
                )
            self._bump(self._db, "fetched_total", len(items))
            self._bump(self._db, "cache_samples", len(items))
            self._bump(self._db, "cache_bytes", sum(a.size for a in items))
            self._bump(self._db, "fetched_bytes_total", sum(a.size for a in items))
            self._reserved = max(0, self._reserved - sum(a.size for a in items))
            self._meta_set("inflight_bytes", str(self._reserved))

    def publish_inflight(self) -> None:
        """Write the in-flight byte count where other processes (status, metrics) can read it."""
        with self._tx():
            self._meta_set("inflight_bytes", str(self._reserved))

    # ------------------------------------------------------------------ eviction and retirement
    def _live_epochs(self, db: sqlite3.Connection, policy: Policy, now: float) -> list[int]:
        rows = db.execute("SELECT n, last_read FROM epochs WHERE retired=0 ORDER BY n DESC").fetchall()
        live = []
        for i, (n, last_read) in enumerate(rows):
            if i < policy.keep_epochs or now - float(last_read) < policy.in_use_seconds:
                live.append(int(n))
        return live

    def retire(self, *, now: float | None = None) -> list[int]:
        """Retire the epochs that are neither among the newest K nor read recently."""
        policy = self.policy()
        now = time.time() if now is None else now
        with self._tx():
            live = set(self._live_epochs(self._db, policy, now))
            gone = [
                int(n)
                for (n,) in self._db.execute("SELECT n FROM epochs WHERE retired=0").fetchall()
                if int(n) not in live
            ]
            for n in gone:
                self._db.execute("UPDATE epochs SET retired=1 WHERE n=?", (n,))
                self._db.execute("DELETE FROM epoch_samples WHERE epoch=?", (n,))
        return gone

    def _evictable(self, db: sqlite3.Connection, limit: int) -> list[tuple[int, str, int]]:
        # Samples admitted after the newest cut wait for the next epoch: evicting them would only
        # trade one new sample for another, so they are never taken (backpressure instead).
        newest = db.execute("SELECT COALESCE(MAX(max_sample), 0) FROM epochs").fetchone()[0]
        rows = db.execute(
            "SELECT s.id, s.sid, s.size FROM samples s WHERE s.id <= ? "
            "AND NOT EXISTS (SELECT 1 FROM epoch_samples e WHERE e.sample = s.id) "
            "ORDER BY s.id LIMIT ?",
            (newest, limit),
        ).fetchall()
        return [(int(a), str(b), int(c)) for a, b, c in rows]

    def evict(self, need: int) -> int:
        """Evict the oldest unpinned samples until ``need`` bytes are free; returns bytes freed.

        Index rows go first (committed), files second: a crash in between leaves orphan files that
        recovery removes, never an index row without its object.
        """
        self.retire()
        freed = 0
        victims: list[tuple[int, str, int]] = []
        with self._tx():
            while freed < need:
                batch = self._evictable(self._db, 256)
                if not batch:
                    break
                for v in batch:
                    if freed >= need:
                        break
                    self._db.execute("DELETE FROM samples WHERE id=?", (v[0],))
                    victims.append(v)
                    freed += v[2]
            if victims:
                self._bump(self._db, "evicted_total", len(victims))
                self._bump(self._db, "cache_samples", -len(victims))
                self._bump(self._db, "cache_bytes", -freed)
                self._bump(self._db, "evicted_bytes_total", freed)
        for _, sid, _ in victims:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.objects_dir / object_name(sid))
        return freed

    def set_backpressure(self, on: bool) -> None:
        with self._tx():
            self._meta_set("backpressure", "1" if on else "0")

    # ------------------------------------------------------------------ epochs
    def newest_epoch(self) -> int | None:
        row = self._query("SELECT MAX(n) FROM epochs")[0][0]
        return None if row is None else int(row)

    def epochs(self) -> list[EpochInfo]:
        """The live (visible) epochs, oldest first."""
        rows = self._query(
            "SELECT n, samples, bytes, new, evicted, cut_at FROM epochs WHERE retired=0 ORDER BY n"
        )
        return [
            EpochInfo(int(a), int(b), int(c), int(d), int(e), float(f))
            for a, b, c, d, e, f in rows
        ]

    def epoch_files(self, n: int) -> list[FileEntry]:
        """The files of live epoch ``n`` sorted by path; KeyError when it is not live."""
        with self._lock:
            row = self._db.execute("SELECT retired FROM epochs WHERE n=?", (n,)).fetchone()
            if row is None or int(row[0]):
                raise KeyError(n)
            rows = self._db.execute(
                "SELECT s.path, s.size, s.checksum, s.sid FROM epoch_samples e "
                "JOIN samples s ON s.id = e.sample WHERE e.epoch=? ORDER BY s.path",
                (n,),
            ).fetchall()
        return [FileEntry(str(p), int(sz), str(c), object_name(str(sid))) for p, sz, c, sid in rows]

    def resolve(self, n: int, path: str) -> Path | None:
        """The object file behind ``epoch-n/path``, or None when the epoch does not list it."""
        row = self._query(
            "SELECT s.sid FROM epoch_samples e JOIN samples s ON s.id = e.sample "
            "JOIN epochs x ON x.n = e.epoch WHERE e.epoch=? AND s.path=? AND x.retired=0",
            (n, path),
        )
        return self.objects_dir / object_name(str(row[0][0])) if row else None

    def record_read(self, n: int, *, now: float | None = None) -> None:
        """Note that epoch ``n`` is being read, which keeps it pinned for ``in_use_seconds``."""
        with self._tx():
            self._db.execute(
                "UPDATE epochs SET last_read=? WHERE n=?", (time.time() if now is None else now, n)
            )

    def _window(self, db: sqlite3.Connection, policy: Policy, n: int) -> tuple[int, int]:
        """Schedule mode: positions [lo, hi) of epoch n's window in the sampling order."""
        assert policy.schedule is not None
        total = int(db.execute("SELECT COUNT(*) FROM catalog").fetchone()[0])
        hi = min(total, policy.schedule.size(n))
        # Trim the front so the window's bytes fit the epoch budget.
        rows = db.execute(
            "SELECT pos, SUM(size) OVER (ORDER BY pos DESC) FROM catalog WHERE pos < ? "
            "ORDER BY pos DESC",
            (hi,),
        )
        lo = hi
        for pos, cum in rows:
            if int(cum) > policy.epoch_budget:
                break
            lo = int(pos)
        return lo, hi

    def _cut_ready(self, db: sqlite3.Connection, policy: Policy, n: int) -> bool:
        complete = int(db.execute("SELECT COUNT(*) FROM samples").fetchone()[0])
        if complete < max(1, policy.min_samples):
            return False
        if policy.schedule is None:
            return True
        lo, hi = self._window(db, policy, n)
        missing = db.execute(
            "SELECT COUNT(*) FROM catalog c WHERE c.pos >= ? AND c.pos < ? AND c.skipped=0 "
            "AND NOT EXISTS (SELECT 1 FROM samples s WHERE s.key=c.key)",
            (lo, hi),
        ).fetchone()[0]
        return int(missing) == 0

    def _do_cut(self, db: sqlite3.Connection, policy: Policy, n: int) -> None:
        now = time.time()
        prev_row = db.execute("SELECT MAX(n) FROM epochs WHERE n < ?", (n,)).fetchone()[0]
        if policy.schedule is None:
            db.execute(
                "INSERT INTO epoch_samples(epoch, sample) SELECT ?, id FROM "
                "(SELECT id, SUM(size) OVER (ORDER BY id DESC) AS cum FROM samples) WHERE cum <= ?",
                (n, policy.epoch_budget),
            )
        else:
            lo, hi = self._window(db, policy, n)
            db.execute(
                "INSERT INTO epoch_samples(epoch, sample) SELECT ?, s.id FROM samples s "
                "JOIN catalog c ON c.key = s.key WHERE c.pos >= ? AND c.pos < ?",
                (n, lo, hi),
            )
        samples, nbytes, max_sample = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(s.size), 0), COALESCE(MAX(s.id), 0) FROM epoch_samples e "
            "JOIN samples s ON s.id = e.sample WHERE e.epoch=?",
            (n,),
        ).fetchone()
        max_all = int(db.execute("SELECT COALESCE(MAX(id), 0) FROM samples").fetchone()[0])
        new = evicted = int(samples)
        if prev_row is not None:
            prev_max = int(
                db.execute("SELECT max_sample FROM epochs WHERE n=?", (prev_row,)).fetchone()[0]
            )
            new = int(
                db.execute(
                    "SELECT COUNT(*) FROM epoch_samples WHERE epoch=? AND sample > ?", (n, prev_max)
                ).fetchone()[0]
            )
            prev_samples = int(
                db.execute("SELECT samples FROM epochs WHERE n=?", (prev_row,)).fetchone()[0]
            )
            evicted = max(0, prev_samples + new - int(samples))
        else:
            evicted = 0
        db.execute(
            "INSERT INTO epochs(n, cut_at, samples, bytes, new, evicted, max_sample, last_read) "
            "VALUES(?,?,?,?,?,?,?,?)",
            (n, now, int(samples), int(nbytes), new, evicted, max(max_all, int(max_sample)), 0.0),
        )
        db.execute("DELETE FROM cut_requests WHERE n <= ?", (n,))
        self._bump(db, "cuts_total", 1)

    def cut(self, n: int | None = None, *, wait_condition: bool = True) -> int | None:
        """Cut epoch ``n`` (default newest + 1) if its condition holds; returns n, else None.

        An existing epoch is returned as is, so several ranks asking for the same N get one snapshot.
        ``n`` at or below the newest epoch that does not exist is refused with ValueError: epochs are
        only ever added at the top. With ``wait_condition`` false (``epochfs cut --force``) the
        condition is not checked, ``min_samples`` included; an epoch still needs one sample.
        """
        policy = self.policy()
        with self._tx():
            newest = self._db.execute("SELECT MAX(n) FROM epochs").fetchone()[0]
            if n is None:
                n = 0 if newest is None else int(newest) + 1
            if n < 0:
                raise ValueError("epoch numbers start at 0")
            exists = self._db.execute("SELECT retired FROM epochs WHERE n=?", (n,)).fetchone()
            if exists is not None:
                if int(exists[0]):
                    raise ValueError(f"epoch {n} has retired")
                return n
            if newest is not None and n < int(newest):
                raise ValueError(f"epoch {n} is below the newest epoch {newest} and was never cut")
            ready = self._cut_ready(self._db, policy, n)
            if not ready and wait_condition:
                return None
            if not ready and int(self._db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]) == 0:
                return None
            self._do_cut(self._db, policy, n)
            return n

    def request_cut(self, n: int) -> bool:
        """A reader asked for epoch ``n``: cut it now if possible (True), else queue the request."""
        try:
            if self.cut(n) is not None:
                return True
        except ValueError:
            return False
        with self._tx():
            self._db.execute(
                "INSERT OR IGNORE INTO cut_requests(n, requested_at) VALUES(?, ?)", (n, time.time())
            )
        return False

    def pending_cuts(self) -> list[tuple[int, float]]:
        """Queued cut requests (epoch, time requested), lowest first."""
        return [
            (int(n), float(t))
            for n, t in self._query("SELECT n, requested_at FROM cut_requests ORDER BY n")
        ]

    def process_cut_requests(self) -> list[tuple[int, float]]:
        """Cut every queued epoch whose condition now holds; returns (epoch, seconds waited)."""
        done = []
        for n, requested in self.pending_cuts():
            try:
                result = self.cut(n)
            except ValueError:
                with self._tx():
                    self._db.execute("DELETE FROM cut_requests WHERE n=?", (n,))
                continue
            if result is None:
                break
            done.append((n, time.time() - requested))
        return done

    # ------------------------------------------------------------------ status
    def stats(self) -> Stats:
        """Occupancy, counters and live epochs in one consistent read."""
        policy = self.policy()
        with self._tx(immediate=False):
            db = self._db
            samples, nbytes = db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM samples").fetchone()
            counters = dict(db.execute("SELECT name, value FROM counters").fetchall())
            inflight = int(self._meta_get("inflight_bytes") or 0)
            backpressure = self._meta_get("backpressure") == "1"
            catalog = int(self._meta_get("catalog_objects") or 0)
            pending = [int(r[0]) for r in db.execute("SELECT n FROM cut_requests ORDER BY n")]
            epochs = [
                {"epoch": int(a), "samples": int(b), "bytes": int(c), "new": int(d),
                 "evicted": int(e), "cut_at": float(f)}
                for a, b, c, d, e, f in db.execute(
                    "SELECT n, samples, bytes, new, evicted, cut_at FROM epochs "
                    "WHERE retired=0 ORDER BY n"
                )
            ]
        return Stats(
            cache_bytes=int(nbytes),
            capacity_bytes=policy.capacity,
            samples=int(samples),
            inflight_bytes=inflight,
            backpressure=backpressure,
            catalog_objects=catalog,
            pending_cuts=pending,
            epochs=epochs,
            latest_epoch=int(epochs[-1]["epoch"]) if epochs else None,
            mode="schedule" if policy.schedule else "snapshot",
            **{k: int(counters.get(k, 0)) for k in COUNTER_NAMES},
        )

    def sample_checksums(self) -> Iterator[tuple[str, str, Path]]:
        """(key, checksum, object path) of every sample, for verification tools and tests."""
        for key, checksum, sid in self._query("SELECT key, checksum, sid FROM samples"):
            yield str(key), str(checksum), self.objects_dir / object_name(str(sid))
