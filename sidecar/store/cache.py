"""``Store``: one cache folder, the facade the sampler, the FUSE server and the CLI open.

It owns the folder's parts (the SQLite :class:`Index`, the :class:`ObjectFiles`) and puts the
rules of the other modules of this package behind one object: the catalog queries, eviction,
epochs (the methods of its base, :mod:`.cacheepochs`) and stats. Nothing here knows remotes, FUSE
or Kubernetes, so both processes can open the same folder and rely on SQLite (WAL mode) for
consistency between them.

Every use goes through the process's :class:`IndexHandle`, which follows the index if its files
change underneath (a reset by another process, a deleted write-ahead log) and resets a damaged
one when a writer opens it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from epochfs.sidecar.store import (
    admit,
    catalog,
    checkup,
    classes,
    epochs,
    eviction,
    fetchpass,
    integrity,
    journal,
    listings,
    memberfiles,
    objectscan,
    recovery,
    stats,
)
from epochfs.sidecar.store.cacheepochs import StoreEpochs
from epochfs.sidecar.store.foreign import blank_damage
from epochfs.sidecar.store.handle import IndexHandle
from epochfs.sidecar.store.index import INDEX_NAME, MISSING, BlankIndex, Index, Meta, is_corruption
from epochfs.sidecar.store.objects import ObjectFiles, make_folder, open_to_readers
from epochfs.sidecar.store.records import (
    Admission,
    Candidate,
    CatalogRow,
    FileEntry,
    Policy,
    RecoveryReport,
    Schedule,
    Stats,
    StoredObject,
    StoreError,
    TakenOut,
)
from epochfs.sidecar.store.stats import read_stats


class Store(StoreEpochs):
    """A cache folder on the node volume. Thread-safe; several processes may open the same folder."""

    def __init__(self, root: str | os.PathLike[str], *, create: bool = False) -> None:
        """Open the cache folder ``root``; ``create`` makes it (and its index) when missing, and
        replaces an index SQLite finds damaged at open (one log line, see :mod:`.reset`)."""
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"cache path {self.root} exists and is not a directory")
        if not self.root.exists():
            if not create:
                raise StoreError(f"cache directory {self.root} does not exist")
            make_folder(self.root)  # 0755: readers of the view traverse it (objects.FOLDER_MODE)
        index = self.root / INDEX_NAME
        if not create and not index.exists():
            # A cache whose index went (deleted: the next writer rebuilds it) is not "no cache".
            damage = blank_damage(self.root, MISSING)
            if damage is not None:
                raise BlankIndex(index, damage)
            raise StoreError(f"{self.root} is not an epochfs cache (no {INDEX_NAME})")
        if create and not index.exists():
            open_to_readers(self.root)  # a new cache: readers of the view traverse it
        self.files = ObjectFiles(self.root)
        self.objects_dir = self.files.objects_dir
        self.tmp_dir = self.files.tmp_dir
        self._handle = IndexHandle(index, create=create)
        self.files.journal = journal.Journal(lambda: self._ix)
        self._recovered = False
        """This store recovered the folder (it is the writer): its close is a clean stop."""

    @property
    def _ix(self) -> Index:
        return self._handle.get()

    def close(self) -> None:
        if self._recovered:
            self._recovered = False
            try:
                recovery.stopped(self._ix, self.files)
            except (StoreError, sqlite3.Error) as e:  # the next start treats it as a crash
                logging.getLogger("epochfs.store").warning("could not record a clean stop: %s", e)
        self._handle.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ meta and policy
    def meta(self, key: Meta) -> str | None:
        """A value recorded in the index (identity of the sampler, the supervisor's totals...)."""
        return self._ix.get(key)

    def set_meta(self, key: Meta, value: str | None) -> None:
        """Set a meta value (None: remove it)."""
        ix = self._ix
        with ix.write() as db:
            if value is None:
                db.execute("DELETE FROM meta WHERE name=?", (key.value,))
            else:
                ix.put(key, value)

    def set_sampler_retrying(self, state: dict[str, Any] | None) -> None:
        """Record the supervisor's sampler retrying an unreachable remote (None: it does not), which
        the views show in status.json: :data:`Meta.SAMPLER_RETRYING`, :func:`.stats.retry_line`."""
        value = None if state is None else stats.retrying_value(state, time.time())
        self.set_meta(Meta.SAMPLER_RETRYING, value)

    def configure(self, policy: Policy) -> None:
        """Record the cache rules (the sampler does this at start; readers pick them up)."""
        if policy.capacity <= 0:
            raise ValueError("capacity must be positive")
        ix = self._ix
        with ix.write():
            put = ix.put
            put(Meta.CAPACITY, str(policy.capacity))
            put(Meta.KEEP_EPOCHS, str(policy.keep_epochs))
            put(Meta.MIN_SAMPLES, str(policy.min_samples))
            put(Meta.HEADROOM, repr(policy.headroom))
            put(Meta.IN_USE_SECONDS, repr(policy.in_use_seconds))
            put(Meta.RETIRE_GRACE, repr(policy.retire_grace))
            put(Meta.SCHEDULE, str(policy.schedule) if policy.schedule else "")

    def policy(self) -> Policy:
        """The rules last recorded by :meth:`configure` (defaults and capacity 1 before that)."""
        ix = self._ix
        with ix.read():
            get = ix.get
            schedule = get(Meta.SCHEDULE)
            return Policy(
                capacity=int(get(Meta.CAPACITY) or 1),
                keep_epochs=int(get(Meta.KEEP_EPOCHS) or 2),
                min_samples=int(get(Meta.MIN_SAMPLES) or 1),
                headroom=float(get(Meta.HEADROOM) or 0.25),
                in_use_seconds=float(get(Meta.IN_USE_SECONDS) or Policy.in_use_seconds),
                retire_grace=float(get(Meta.RETIRE_GRACE) or Policy.retire_grace),
                schedule=Schedule.parse(schedule) if schedule else None,
            )

    def recover(self, *, integrity: str | None = None) -> RecoveryReport:
        """Make the folder consistent after a crash: the sampler runs this before it writes.
        ``integrity``: the result of an integrity check just made (:meth:`check_index`)."""
        report = recovery.recover(self._ix, self.files, integrity=integrity)
        self._recovered = True
        return report

    # ------------------------------------------------------------------ the index itself
    def check_index(self, *, full_below: int | None = None) -> str:
        """The start-up check of the index (:func:`checkup.at_start`: the full ``integrity_check``
        only when a marker asks for it or the index is small, else a cheap one); a damaged index
        is moved aside and replaced by a fresh one, in one log line. Returns "ok", or what was
        wrong with the index that was replaced. For the one writer (the sampler), at its start."""
        return checkup.at_start(self._handle, full_below=full_below)

    def index_checker(self, stop: threading.Event) -> checkup.Background:
        """The background full check of the index (the sampler runs it; :mod:`.checkup`)."""
        return checkup.Background(self._handle, stop,
                                  after=lambda s: objectscan.scan(lambda: self._ix, self.files, s))

    def members_keeper(self, stop: threading.Event) -> memberfiles.Keeper:
        """The thread that keeps a members file for every live epoch (:mod:`.memberfiles`: what
        a damaged index is rebuilt from); the sampler runs it."""
        return memberfiles.Keeper(lambda: self._ix, self.root, stop)

    def write_members(self) -> list[int]:
        """One pass of the :meth:`members_keeper` now: the epochs whose members file it wrote."""
        return memberfiles.Keeper(lambda: self._ix, self.root).sync()

    def index_integrity(self) -> str:
        """``PRAGMA integrity_check`` of the index, changing nothing ("ok", or the damage)."""
        try:
            return self._ix.integrity()
        except sqlite3.DatabaseError as e:
            if not is_corruption(e):
                raise
            return str(e)

    def index_lost(self) -> bool:
        """The index file was deleted under this process, which should restart to make a new one.
        (Asking follows any other change first: the sampler asks about once a second.)"""
        self._handle.get()
        return self._handle.lost()

    def next_epoch(self) -> int:
        """The number the next cut gets (above every number ever published from this cache)."""
        return epochs.next_number(self._ix)

    # ------------------------------------------------------------------ integrity of objects
    def stored_objects(self, *, after_id: int, limit: int) -> list[StoredObject]:
        """Samples in admission order after ``after_id``, as a scrub checks them."""
        return integrity.objects_after(self._ix, after_id, limit)

    def check_object(self, obj: StoredObject, *, pace: integrity.Pace | None = None,
                     buffer: memoryview | None = None) -> str | None:
        """What is wrong with the object file of ``obj`` (None: its size and md5 are as recorded)."""
        return integrity.check(self.files.path_of(obj.sid), obj, pace=pace, buffer=buffer)

    def take_out(self, damaged: list[tuple[StoredObject, str]], *, quarantine: bool) -> list[TakenOut]:
        """Mark damaged samples for a repair in place and count them (:func:`.integrity.take_out`:
        rows and files kept until the repair; ``quarantine`` links a copy into ``quarantine/``)."""
        return integrity.take_out(self._ix, self.files, damaged, quarantine=quarantine)

    # ------------------------------------------------------------------ catalog
    def add_catalog(self, rows: Iterable[CatalogRow]) -> int:
        return catalog.add(self._ix, rows)

    def finalize_catalog(self) -> int:
        return catalog.finalize(self._ix)

    def listings(self) -> listings.Listings:
        """The catalog's listing side (generations, listers' progress, page commits, relists)."""
        return listings.Listings(self._ix)

    def candidates(self, *, after_rank: int | None, limit: int) -> list[tuple[int, Candidate]]:
        return catalog.candidates(self._ix, after_rank=after_rank, limit=limit)

    def refill(self, *, cursor: int | None, offered_upto: int, owed_limit: int, walk_limit: int,
               walk_below: int | None = None) -> catalog.Refill:
        """The snapshot-mode pass's owed rows and next candidates (:func:`.catalog.refill`)."""
        return catalog.refill(self._ix, cursor=cursor, offered_upto=offered_upto, owed_limit=owed_limit,
                              walk_limit=walk_limit, walk_below=walk_below)

    def folder_lowest(self, lo: str, hi: str, *, below: int, limit: int = 8,
                      by_key: bool = False) -> list[tuple[int, Candidate]]:
        """:func:`.catalog.folder_lowest`."""
        return catalog.folder_lowest(self._ix, lo, hi, below=below, limit=limit, by_key=by_key)

    def cached_under(self, ranges: list[tuple[str, str]], *, below: int) -> tuple[int, list[int]]:
        """:func:`.catalog.cached_under`."""
        return catalog.cached_under(self._ix, ranges, below=below)

    def cached_among(self, keys: list[str]) -> set[str]:
        return catalog.cached_among(self._ix, keys)

    def listing_known(self) -> dict[str, Any]:
        """How much of the dataset the listing has covered (:func:`.stats.listing_known`)."""
        with self._ix.read() as db:
            return stats.listing_known(db, int(self._ix.get(Meta.CATALOG_OBJECTS) or 0))

    def offered_upto(self) -> int | None:
        """Where the last run's pass had offered every catalog row (None: never recorded)."""
        return fetchpass.offered_upto(self._ix)

    def record_offered_upto(self, rowid: int) -> None:
        with self._ix.write():
            self._ix.put(Meta.FETCH_OFFERED, str(rowid))

    def record_pass(self, *, offered_upto: int, cursor: int | None) -> None:
        """The snapshot-mode pass's position, for a restart (:func:`.fetchpass.record`)."""
        fetchpass.record(self._ix, offered_upto=offered_upto, cursor=cursor)

    def last_catalog_row(self) -> int:
        return catalog.last_row(self._ix)

    def resume_rank(self) -> int | None:
        """Where a restarted sampler's pass goes on (:func:`.fetchpass.resume_rank`)."""
        return fetchpass.resume_rank(self._ix)

    def schedule_window(self, n: int) -> tuple[int, int]:
        """Schedule mode: positions [lo, hi) of epoch ``n``'s window (the sampler fetches it first)."""
        policy = self.policy()
        if policy.schedule is None:
            raise ValueError("not in schedule mode")
        with self._ix.read() as db:
            return epochs.window(db, policy, n)

    def window_candidates(self, lo: int, hi: int, *, limit: int) -> list[tuple[int, Candidate]]:
        return catalog.window_candidates(self._ix, lo, hi, limit=limit)

    def mark_skipped(self, key: str, *, failed: bool = False) -> bool:
        """Whether the skip was counted (:func:`.catalog.mark_skipped`: once a key)."""
        return catalog.mark_skipped(self._ix, key, failed=failed)

    def count_skip(self, n: int = 1) -> None:
        catalog.count_skip(self._ix, n)

    # ------------------------------------------------------------------ samples
    def cache_bytes(self) -> int:
        """Bytes of complete samples (reservations not included), from a running total."""
        return self._ix.counter("cache_bytes")

    def temp_path(self) -> Path:
        return self.files.temp_path()

    def admit(self, items: list[Admission], *, inflight_bytes: int | None = None) -> int:
        """Make verified downloads visible: rename into objects/, fsync dirs, then commit the index
        (:func:`.admit.admit`); returns the bytes added to the cache's total. ``inflight_bytes``:
        the downloads still in flight once these are in, recorded in the same transaction so that
        status never counts a sample twice."""
        return admit.admit(lambda: self._ix, self.files, items, inflight_bytes=inflight_bytes)

    def repairs_due(self, *, limit: int = 256) -> list[Candidate]:
        """Samples waiting for a repair that can be fetched again (:func:`.integrity.repairs_due`),
        after those that cannot any more are marked lost (:func:`.integrity.lose_unfetchable`)."""
        integrity.lose_unfetchable(self._ix, self.files)
        return integrity.repairs_due(self._ix, limit=limit)

    def awaits_repair(self, key: str) -> bool:
        """Whether a sample of ``key`` waits for its repair (:func:`.integrity.awaits_repair`)."""
        return integrity.awaits_repair(self._ix, key)

    def record_class_folders(self, found: Iterable[str], *, through: int | None = None,
                             wait: float | None = None) -> classes.ClassFolders:
        """Append ``found``'s folders to the cache's class folders (:func:`.classes.record`)."""
        return classes.record(self._ix, self.root, found, through=through, wait=wait)

    def listed_class_folders(self) -> list[str]:
        """The running listing's folders (:func:`.classes.listing_folders`)."""
        return classes.listing_folders(self._ix)

    def cataloged_class_folders(self) -> list[str]:
        """The folders of the keys listed so far (:func:`.classes.catalog_folders`)."""
        return classes.catalog_folders(self._ix)

    def listing_mark(self) -> tuple[int, int]:
        """Changes when a listing begins or splits (:func:`.classes.listing_mark`)."""
        return classes.listing_mark(self._ix)

    def lost_samples(self, *, unless: integrity.LostDigest | None = None
                     ) -> tuple[integrity.LostDigest, list[FileEntry] | None]:
        """Samples marked lost, read only when they changed (:func:`.integrity.lost`)."""
        return integrity.lost(self._ix, unless=unless)

    def evict(self, need: int, *, now: float | None = None) -> int:
        """Evict the oldest unpinned samples until ``need`` bytes are free; returns bytes freed
        (``now``: the clock retirement and its grace are read at, default the time)."""
        return eviction.evict(self._ix, self.files, self.policy(), need, now=now)

    def set_backpressure(self, reason: str | None) -> None:
        """Sampling paused, and why ("cache full", "disk full"); None when it goes on."""
        self.set_meta(Meta.BACKPRESSURE, reason or "")

    # ------------------------------------------------------------------ status
    def stats(self) -> Stats:
        """Occupancy, counters and live epochs in one consistent read."""
        return read_stats(self._ix, self.policy())

