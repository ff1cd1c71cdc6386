"""A model of the node store, checked against the real one step by step (hypothesis, stateful).

The machine drives the real :class:`Store` and :class:`Reservations` in a temp folder the way the
sampler and the FUSE server do: downloads reserve their bytes (evicting when the budget is full,
refused when nothing is evictable: backpressure), write and fsync a temp file and are admitted in
batches or given up; epochs are cut explicitly (``epochfs cut``, jumps included) and by lookups
(``request_cut``: the next epoch, far-ahead strays, live and retired ones), queued cuts are served,
reads pin epochs at a controlled ``now``, retirement runs at a controlled ``now``; the store is
closed and reopened with ``recover()`` (abandoning downloads as temp files, partial temp files or
installed objects whose index row never committed), and the sampler is "killed with -9": a forked
child continues the sampler's work (downloads, admissions, cuts, lookups, eviction, retirement, even
recovery itself) on the same folder and SIGKILLs itself before its k-th database statement or file
operation, so transactions are left uncommitted and files half written at points hypothesis chooses.

A plain-Python model predicts every answer and the whole index (samples and their admission order,
epochs and their files, pins, queued cuts, counters). After a kill the store must equal the model
after one of the child's committed transactions, never anything in between. After every step:

* cache bytes + bytes reserved <= capacity;
* a live epoch's file list (paths, sizes, checksums, objects) is the one it was cut with, and an
  epoch number once seen is never seen again with other content, nor forgotten by the index;
* nothing a live epoch lists is evicted: every listed object exists and its bytes hash to the
  recorded checksum (and equal what was downloaded);
* the running totals agree with the samples table (``cache_bytes`` = sum of sizes) and with stats;
* the objects folder holds exactly the samples' objects and ``tmp/`` exactly the downloads in flight.

Repairs (issue 20): object files are damaged behind the store's back (a flipped byte, a short
write, a file deleted) and found by the background scrub, ``epochfs verify`` (quarantine) or the
object scan; the sampler fetches them again through the same reserve/write/admit path, with the
remote's bytes unchanged (repaired in place) or changed (marked lost). Epochs are cut far ahead:
``far`` jumps past :data:`MAX_JUMP`, up to and beyond :data:`MAX_EPOCH`. Then, after every step:

* a sample taken out keeps its row and every live epoch keeps its entry: the epoch's file list and
  its manifest as the FUSE view renders it are the ones it was cut with;
* a listed file reads its right bytes, or (waiting for its repair, or lost) its object file is
  absent, so a reader's open fails: never the damaged bytes, never another sample's;
* the store's ``repairs`` and its counters (``corrupt_objects_total``, ``repaired_total``) are the
  model's.

Index damage (issue 20): while the sampler is down, a page of ``index.sqlite`` is garbled or
zeroed, its schema page garbled, or the file cut short (:mod:`model_index_damage`); the next start
finds it (at the open or by the start-up check), rebuilds the index from the live epochs' members
files and recovers. The model predicts what comes back: each live epoch with its members file, with
its number, files, manifest and samples (their ids kept), its last read at the rebuild; samples in
no live epoch gone with their files (orphans); a member that waited for its repair or was lost
still so (the repairs log), with the file it had; another member without its file (or with one of
another size) waiting for its repair; queued cuts, downloads in flight and the cumulative counters gone;
the numbers of the retired epochs left out never cut again. After every step the members folder
holds a file for each live epoch (less one a retirement killed before its commit removed, plus one
of a cut killed before its commit: :meth:`StoreMachine._members_after_kill`).

The default run is short; ``test_store_model_long`` (slow) runs many more and longer examples.
Run it with ``make test-reliability`` or ``pytest -m slow tests/store/test_store_model.py``; set
``EPOCHFS_MODEL_EXAMPLES`` to change the long run's number of examples.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import io
import os
import random
import re
import shutil
import signal
import sqlite3
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from model_index_damage import (
    HOWS,
    STALE_FILES_RESTORED,
    corrupt_copies,
    damage,
    members_on_disk,
    newest_copy,
    rebuilt,
)
from store_helpers import epoch_snapshot, restart_as_the_sampler, sid_of

from epochfs.fuse.tree import EpochTree
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.scrub import Scrubber, verify
from epochfs.sidecar.store import (
    INDEX_NAME,
    MAX_EPOCH,
    MAX_JUMP,
    QUARANTINE_DIR,
    Admission,
    Candidate,
    CatalogRow,
    Policy,
    Stats,
    Store,
    StoredObject,
    countercarry,
    memberchain,
    object_name,
    objectscan,
)
from epochfs.sidecar.store.epochpins import READ_AHEAD_LIMIT, grace_bounds, retired_stamp
from epochfs.sidecar.store.memberfiles import path_of

KEYS = [f"train/{i:03d}.bin" for i in range(24)]
CAPACITY = 4096
SIZES = st.one_of(st.integers(0, 1400), st.sampled_from([0, 1, 1024, 2048, 3072]))
FAR = 999_999
LISTED = frozenset(KEYS[:20])
"""Keys the remote still lists (the catalog): a damaged sample of another key cannot be fetched
again and is marked lost."""
TRACKED = ("fetched_total", "fetched_bytes_total", "evicted_total", "evicted_bytes_total", "cuts_total",
           "corrupt_objects_total", "repaired_total")
COUNTERS = (*TRACKED, "cache_bytes", "cache_samples")

FileRow = tuple[str, int, str, str]  # path, size, checksum, object name
ROOT_NAMES = {INDEX_NAME, f"{INDEX_NAME}-wal", f"{INDEX_NAME}-shm", "index.lock", "epochs.hwm", "objects",
              "tmp", QUARANTINE_DIR, "epochs"}
HWM_TEMP = re.compile(r"\.epochs\.hwm\.\d+\.[0-9a-f]{12}\.tmp")


def body_of(key: str, version: int, size: int) -> bytes:
    return random.Random(f"{key}#{version}").randbytes(size)


def checksum_of(body: bytes) -> str:
    return "md5:" + hashlib.md5(body).hexdigest()


# ---------------------------------------------------------------------------------------- the model
@dataclass
class MSample:
    key: str
    id: int
    size: int
    checksum: str
    body: bytes

    @property
    def object_name(self) -> str:
        return object_name(sid_of(self.key))


@dataclass
class MEpoch:
    n: int
    files: tuple[FileRow, ...]
    ids: frozenset[int]
    samples: int
    bytes: int
    new: int
    evicted: int
    max_sample: int
    last_read: float = 0.0
    retired: bool = False
    retired_at: float = 0.0
    """When it retired (the store's stamp): its samples stay for RETIRE_GRACE after it."""
    grace_ids: frozenset[int] = frozenset()
    """The samples it held when it retired: eviction keeps them through the grace."""
    first: int = 0
    """The range's first id (snapshot mode: the epoch is the held samples first..max_sample)."""
    listed: bool = False
    """Restored by an index rebuild: its members are rows, not a range."""


@dataclass
class Model:
    """What the store must hold, and the answers it must give, in plain Python."""

    policy: Policy
    samples: dict[str, MSample] = field(default_factory=dict)
    seq: int = 0  # sqlite_sequence of samples: the last id handed out
    epochs: dict[int, MEpoch] = field(default_factory=dict)
    pending: set[int] = field(default_factory=set)
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TRACKED, 0))
    repairs: dict[str, bool] = field(default_factory=dict)
    """Samples taken out and waiting for their repair (key -> lost: it cannot be fetched again)."""
    kept: dict[str, bytes | None] = field(default_factory=dict)
    """What the object file of a sample waiting for its repair holds: the bytes the take-out
    found there (damaged; the file stays until the repair renames the right bytes over it), or
    None when it found no file."""
    suspect: dict[str, bytes] = field(default_factory=dict)
    """Samples an index rebuild took back as sound whose object file holds the damaged bytes a
    take-out kept, while :data:`model_index_damage.REBUILD_FORGETS_DAMAGE` is set (a scrub finds
    them again); empty since the rebuild remembers the marks (sidecar/store/repairlog.py)."""
    filed: set[int] = field(default_factory=set)
    """Live epochs with their members file (written by the cut, removed by the retirement)."""
    stale: set[int] = field(default_factory=set)
    """Numbers with a members file but no epoch: a cut killed between the file's rename and its
    commit (the next cut of that number replaces it)."""
    inflight_meta: int = 0
    trace: list[Model] | None = None
    """When set, a copy of the model is appended at every committed transaction."""

    # -- plumbing
    def snapshot(self) -> Model:
        trace, self.trace = self.trace, None
        try:
            return copy.deepcopy(self)
        finally:
            self.trace = trace

    def commit(self) -> None:
        if self.trace is not None:
            self.trace.append(self.snapshot())

    @property
    def cache_bytes(self) -> int:
        return sum(s.size for s in self.samples.values())

    def by_id(self) -> list[MSample]:
        return sorted(self.samples.values(), key=lambda s: s.id)

    def newest(self) -> int | None:
        return max(self.epochs) if self.epochs else None

    def next_epoch(self) -> int:
        newest = self.newest()
        return 0 if newest is None else newest + 1

    def live(self) -> list[int]:
        return sorted(n for n, e in self.epochs.items() if not e.retired)

    def condition(self) -> bool:
        # What the epoch would hold (the newest samples within the epoch budget), not the cache.
        least = max(1, self.policy.min_samples)
        newest = self.by_id()[-least:]
        fits = least == 1 or sum(s.size for s in newest) <= self.policy.epoch_budget
        return len(newest) >= least and fits

    def signature(self) -> dict[str, Any]:
        counters = dict(self.counters, cache_bytes=self.cache_bytes, cache_samples=len(self.samples))
        return {
            "samples": sorted((s.key, s.id, s.size, s.checksum) for s in self.samples.values()),
            "epochs": sorted((e.n, e.retired, e.last_read, e.samples, e.bytes, e.new, e.evicted, e.max_sample)
                             for e in self.epochs.values()),
            "files": {n: list(self.epochs[n].files) for n in self.live()},
            "pending": sorted(self.pending),
            "counters": counters,
            "repairs": sorted(self.repairs.items()),
            "inflight": self.inflight_meta,
        }

    def recovered(self) -> Model:
        """What a start's recovery changes: a queued cut above :data:`MAX_EPOCH` is dropped."""
        self.pending = {p for p in self.pending if p <= MAX_EPOCH}
        return self

    # -- the store's rules
    def retire(self, now: float) -> list[int]:
        live = sorted(self.live(), reverse=True)
        keep = {n for i, n in enumerate(live)
                if i < self.policy.keep_epochs or now - self.epochs[n].last_read < self.policy.in_use_seconds}
        gone = sorted(n for n in live if n not in keep)
        for n in gone:
            e = self.epochs[n]
            e.retired_at, e.grace_ids = retired_stamp(now), e.ids
            e.retired, e.files, e.ids = True, (), frozenset()
            self.filed.discard(n)
        self.commit()
        return gone

    def evict(self, need: int, now: float) -> int:
        self.retire(now)
        top = max((e.max_sample for e in self.epochs.values()), default=0)
        lo, hi = grace_bounds(now, self.policy.retire_grace)
        pinned = frozenset().union(*(e.ids for e in self.epochs.values() if not e.retired),
                                   *(e.grace_ids for e in self.epochs.values()
                                     if e.retired and lo <= e.retired_at <= hi))
        freed, victims = 0, []
        for s in self.by_id():
            if freed >= need:
                break
            if s.id <= top and s.id not in pinned:
                victims.append(s)
                freed += s.size
        for v in victims:
            del self.samples[v.key]
            self.repairs.pop(v.key, None)
            self.kept.pop(v.key, None)
            self.suspect.pop(v.key, None)
        if victims:
            self.counters["evicted_total"] += len(victims)
            self.counters["evicted_bytes_total"] += freed
        self.commit()
        return freed

    def reserve(self, size: int, reserved: int, cap: int, now: float) -> bool:
        if size > cap:
            return False
        need = self.cache_bytes + reserved + size - cap
        if need > 0:
            self.evict(need, now)
            need = self.cache_bytes + reserved + size - cap
        return need <= 0

    def admit(self, items: list[tuple[str, bytes]], inflight_left: int) -> None:
        fresh = []
        for key, body in items:
            s = self.samples.get(key)
            if s is None:
                fresh.append((key, body))
            elif self.repairs.get(key) is False:  # waiting for its repair: this download is it
                self.kept.pop(key, None)  # renamed over, or (other bytes: lost) removed
                if checksum_of(body) == s.checksum and len(body) == s.size:
                    del self.repairs[key]
                    self.counters["repaired_total"] += 1
                    self.counters["fetched_total"] += 1
                    self.counters["fetched_bytes_total"] += len(body)
                else:  # the remote's bytes changed: the epochs cut with the old ones keep the entry
                    self.repairs[key] = True
            else:
                raise AssertionError(f"the machine admits {key} again while it is cached")
        for key, body in fresh:
            self.seq += 1
            self.samples[key] = MSample(key, self.seq, len(body), checksum_of(body), body)
        self.counters["fetched_total"] += len(fresh)
        self.counters["fetched_bytes_total"] += sum(len(b) for _, b in fresh)
        self.inflight_meta = inflight_left
        self.commit()

    def take_out(self, keys: list[str], found: dict[str, bytes | None] | None = None) -> None:
        """A scrub found these samples damaged: marked for repair in place (lost when the
        remote no longer lists them), counted; their rows and entries stay. ``found``: what
        their object files held (None: no file); a sample due for a repair keeps it in place,
        a lost one's goes."""
        for key in keys:
            self.suspect.pop(key, None)
            self.repairs[key] = key not in LISTED
            if self.repairs[key]:
                self.kept.pop(key, None)
            else:
                self.kept[key] = (found or {}).get(key)
        self.counters["corrupt_objects_total"] += len(keys)
        self.commit()

    def cut(self, n: int | None = None, *, force: bool = False, far: bool = False) -> tuple[int | None, bool]:
        """(epoch, made): :func:`epochs._cut`."""
        newest = self.newest()
        if n is None:
            n = self.next_epoch()
        if n < 0:
            raise ValueError("negative")
        if n > MAX_EPOCH or (n > self.next_epoch() + MAX_JUMP and not far):
            raise ValueError("out of range")
        if n in self.epochs:
            if self.epochs[n].retired:
                raise ValueError("retired")
            return n, False
        if newest is not None and n < newest:
            raise ValueError("below the newest")
        if not self.condition() and (not force or not self.samples):
            return None, False
        self._insert(n)
        self.counters["cuts_total"] += 1
        self.commit()
        return n, True

    def _insert(self, n: int) -> None:
        chosen, total = [], 0
        for s in reversed(self.by_id()):
            total += s.size
            if total > self.policy.epoch_budget:
                break
            chosen.append(s)
        prev = max((m for m in self.epochs if m < n), default=None)
        top = max(s.id for s in self.samples.values())
        new, evicted = len(chosen), 0
        if prev is not None:
            # Exact (docs/metrics.md: the samples not in the epoch before, and its samples not in
            # this one) where the epoch before is live or a range; a retired one restored as rows
            # may have lost its members: the samples since its cut are new.
            p = self.epochs[prev]
            if not p.retired:
                new = sum(1 for s in chosen if s.id not in p.ids)
            elif not p.listed:
                new = sum(1 for s in chosen if not p.first <= s.id <= p.max_sample)
            else:
                new = sum(1 for s in chosen if s.id > p.max_sample)
            evicted = max(0, p.samples - (len(chosen) - new))
        files = tuple(sorted((s.key, s.size, s.checksum, s.object_name) for s in chosen))
        self.epochs[n] = MEpoch(n, files, frozenset(s.id for s in chosen), len(chosen),
                                sum(s.size for s in chosen), new, evicted, top,
                                first=min((s.id for s in chosen), default=top + 1))
        self.pending = {p for p in self.pending if p > n}
        self.filed.add(n)  # written by the cut, before its commit (memberfiles.at_cut)
        self.stale.discard(n)

    def cut_ready(self, n: int) -> bool:
        if n in self.epochs:
            return not self.epochs[n].retired
        newest = self.newest()
        if newest is not None and n < newest:
            return False
        return self.condition()

    def request_cut(self, n: int) -> bool:
        if n in self.epochs:
            return not self.epochs[n].retired
        if n != self.next_epoch():
            return False
        if self.condition():
            try:
                if self.cut(n)[0] is not None:
                    return True
            except ValueError:  # the next number is past MAX_EPOCH: never cut, never queued
                return False
        if n not in self.pending:
            self.pending.add(n)
            self.commit()
        return False

    def process_cut_requests(self) -> list[int]:
        done = []
        for n in sorted(self.pending):
            if n > self.next_epoch():
                self.pending.discard(n)
                self.commit()
                continue
            try:
                result, made = self.cut(n)
            except ValueError:
                self.pending.discard(n)
                self.commit()
                continue
            if result is None:
                break
            if made:
                done.append(n)
        return done

    def record_read(self, n: int, now: float) -> None:
        # A later record stands unless it is further ahead than any reader dates one.
        if n in self.epochs and not now < self.epochs[n].last_read <= now + READ_AHEAD_LIMIT:
            self.epochs[n].last_read = now
        self.commit()


# ------------------------------------------------------------------------------- crash injection
CRASH_KINDS = ("statement", "commit", "committed", "file")


@dataclass(frozen=True)
class CrashPoint:
    """Where a child is killed: in its ``op``-th operation, before its ``k``-th database statement
    (``statement``), before or just after its ``k``-th COMMIT (``commit``, ``committed``), or before
    its ``k``-th file operation (``file``: rename, unlink, fsync, chmod, or half-way through writing
    a temp file). A point the operation never reaches kills nothing; every child is killed with -9
    after its last operation anyway."""

    op: int
    kind: str
    k: int


class Crash:
    def __init__(self, at: CrashPoint) -> None:
        self.at = at
        self.op = -1
        self.counts = dict.fromkeys(CRASH_KINDS, 0)

    def enter(self, op: int) -> None:
        self.op = op
        self.counts = dict.fromkeys(CRASH_KINDS, 0)

    def point(self, kind: str) -> None:
        if self.op != self.at.op:
            return
        self.counts[kind] += 1
        if kind == self.at.kind and self.counts[kind] == self.at.k:
            os.kill(os.getpid(), signal.SIGKILL)


class CrashingConnection:
    """The index's sqlite3 connection, with crash points around every statement."""

    def __init__(self, db: sqlite3.Connection, crash: Crash) -> None:
        self._db = db
        self._crash = crash

    def execute(self, *args: Any) -> sqlite3.Cursor:
        commit = str(args[0]).strip().upper() == "COMMIT"
        self._crash.point("statement")
        if commit:
            self._crash.point("commit")
        cursor = self._db.execute(*args)
        if commit:
            self._crash.point("committed")
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def crash_points_in_os(crash: Crash) -> None:
    """In the child only: a crash point before every file operation the store makes."""
    for name in ("replace", "unlink", "fsync", "chmod", "rename"):
        real = getattr(os, name)

        def wrapped(*args: Any, _real: Callable[..., Any] = real, **kwargs: Any) -> Any:
            crash.point("file")
            return _real(*args, **kwargs)

        setattr(os, name, wrapped)


def crash_points(n_ops: int) -> st.SearchStrategy[CrashPoint]:
    return st.builds(CrashPoint, st.integers(0, n_ops), st.sampled_from(CRASH_KINDS), st.integers(1, 8))


@dataclass
class Download:
    key: str
    body: bytes
    temp: Path | None  # None: the child makes it


def write_temp(path: Path, body: bytes, crash: Crash | None = None) -> None:
    with open(path, "wb") as f:
        f.write(body[: len(body) // 2])
        if crash is not None:
            crash.point("file")  # killed with half the body written
        f.write(body[len(body) // 2:])
        f.flush()
        os.fsync(f.fileno())


class ChildPlan:
    """The operations a child (the sampler, forked) will do, planned on a copy of the model that
    records every state a commit can leave (``states``), with each answer the store must give."""

    def __init__(self, machine: StoreMachine) -> None:
        self.sim = machine.model.snapshot()
        self.sim.trace = [self.sim.snapshot()]
        self.inflight = dict(machine.inflight)
        self.versions = dict(machine.versions)
        self.clock = machine.clock
        self.ops: list[tuple[Any, ...]] = []

    @property
    def states(self) -> list[Model]:
        assert self.sim.trace is not None
        return self.sim.trace

    def download(self, key: str, size: int) -> bool:
        reserved = sum(len(d.body) for d in self.inflight.values())
        ok = self.sim.reserve(size, reserved, CAPACITY, time.time())
        self.versions[key] = self.versions.get(key, 0) + 1
        body = body_of(key, self.versions[key], size)
        self.ops.append(("download", key, body, ok))
        if ok:
            self.inflight[key] = Download(key, body, None)
        return ok

    def admit(self, keys: list[str]) -> None:
        done = [self.inflight.pop(k) for k in keys]
        self.sim.admit([(d.key, d.body) for d in done], sum(len(d.body) for d in self.inflight.values()))
        self.ops.append(("admit", keys))

    def cut(self, n: int | None) -> None:
        try:
            expected: object = self.sim.cut(n)[0]
        except ValueError:  # past MAX_EPOCH after a far jump
            expected = ValueError
        self.ops.append(("cut", n, expected))

    def lookup(self, n: int) -> None:
        self.ops.append(("lookup", n, self.sim.request_cut(n)))

    def serve(self) -> None:
        self.ops.append(("serve", self.sim.process_cut_requests()))

    def retire(self, now: float) -> None:
        self.ops.append(("retire", now, self.sim.retire(now)))

    def evict(self, need: int) -> None:
        now = time.time()
        self.ops.append(("evict", need, now, self.sim.evict(need, now)))

    def read(self, n: int) -> None:
        self.sim.record_read(n, self.clock)
        self.ops.append(("read", n, self.clock))


# ------------------------------------------------------------------------------------ the machine
class StoreMachine(RuleBasedStateMachine):
    def __init__(self, base: Path) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(dir=base))
        self.root = self.dir / "cache"
        self.store: Store | None = None
        self.ro: sqlite3.Connection | None = None
        self.inflight: dict[str, Download] = {}
        self.versions: dict[str, int] = {}
        self.history: dict[int, list[FileRow]] = {}
        self.manifests: dict[int, bytes] = {}
        self.kills = 0
        self.rebuilds = 0
        self.forgotten: set[int] = set()
        """Numbers of retired epochs an index rebuild left out (never cut again: the mark)."""

    # -- opening, closing, reading the index
    def _open(self) -> None:
        self.store = Store(self.root)
        self.ro = sqlite3.connect(f"file:{self.root / INDEX_NAME}?mode=ro", uri=True, timeout=30)

    def _close(self) -> None:
        if self.ro is not None:
            self.ro.close()
            self.ro = None
        if self.store is not None:
            self.store.close()
            self.store = None

    def teardown(self) -> None:
        if self.store is not None and hasattr(self, "model"):
            stats = self._tally()
            RUN_STATS["examples"] += 1
            RUN_STATS["kill -9"] += self.kills
            RUN_STATS["index rebuilds"] += self.rebuilds
            RUN_STATS["retired epochs"] += sum(1 for e in self.model.epochs.values() if e.retired)
            RUN_STATS["retired epochs"] += len(self.forgotten)
            RUN_STATS["lost"] += sum(self.model.repairs.values())
            RUN_STATS["far epochs"] += sum(1 for n in self.model.epochs if n > MAX_JUMP)
            RUN_STATS["most samples"] = max(RUN_STATS["most samples"], stats.samples)
        self._close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _tally(self) -> Stats:
        """Add the store's cumulative counters to :data:`RUN_STATS` (at the end of an example, and
        before an index rebuild starts them again from 0)."""
        assert self.store is not None
        stats = self.store.stats()
        RUN_STATS["cuts"] += stats.cuts_total
        RUN_STATS["evictions"] += stats.evicted_total
        RUN_STATS["admissions"] += stats.fetched_total
        RUN_STATS["taken out"] += stats.corrupt_objects_total
        RUN_STATS["repaired"] += stats.repaired_total
        return stats

    def _retired_stamps(self) -> None:
        """The model takes the store's retirement stamps: a reservation evicts (and retires) at
        the store's own clock, a few milliseconds after the model's, and the grace counts from
        the stamp."""
        for n, stamp in self._rows("SELECT n, retired FROM epochs WHERE retired != 0"):
            e = self.model.epochs.get(int(n))
            if e is not None and e.retired:
                e.retired_at = float(stamp)

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        assert self.ro is not None
        return self.ro.execute(sql).fetchall()

    def _signature(self) -> dict[str, Any]:
        assert self.store is not None
        rows = self._rows("SELECT n, retired, last_read, samples, bytes, new, evicted, max_sample "
                          "FROM epochs")
        epochs = sorted((int(n), bool(r), float(lr), int(s), int(b), int(nw), int(ev), int(ms))
                        for n, r, lr, s, b, nw, ev, ms in rows)
        counters = dict.fromkeys(COUNTERS, 0) | {str(k): int(v) for k, v in self._rows(
            "SELECT name, value FROM counters") if k in COUNTERS}
        inflight = self._rows("SELECT value FROM meta WHERE name='inflight_bytes'")
        return {
            "samples": sorted((str(k), int(i), int(s), str(c)) for k, i, s, c in self._rows(
                "SELECT key, id, size, checksum FROM samples")),
            "epochs": epochs,
            "files": {e.epoch: [(f.path, f.size, f.checksum, f.object_name)
                                for f in self.store.epoch_files(e.epoch)] for e in self.store.epochs()},
            "pending": [n for n, _ in self.store.pending_cuts()],
            "counters": counters,
            "repairs": sorted((str(k), bool(lost)) for k, lost in self._rows(
                "SELECT s.key, r.lost FROM repairs r JOIN samples s ON s.id = r.sample")),
            "inflight": int(inflight[0][0]) if inflight else 0,
        }

    @property
    def reserved(self) -> int:
        return sum(len(d.body) for d in self.inflight.values())

    def _new_body(self, key: str, size: int) -> bytes:
        self.versions[key] = self.versions.get(key, 0) + 1
        return body_of(key, self.versions[key], size)

    def _free_key(self, start: int, taken: set[str]) -> str | None:
        for i in range(len(KEYS)):
            key = KEYS[(start + i) % len(KEYS)]
            if key not in taken:
                return key
        return None

    def _epoch_number(self, kind: str, pick: int) -> int:
        m = self.model
        newest = m.newest()
        live, retired = m.live(), sorted(n for n, e in m.epochs.items() if e.retired)
        # Numbers below the newest never cut: the first few, and the one just below it (after a
        # far jump there are half a billion).
        below = [*range(min(newest or 0, 64)), *([newest - 1] if newest else [])]
        gaps = sorted({n for n in below if n not in m.epochs})
        options = {
            "next": [m.next_epoch()],
            "next+1": [m.next_epoch() + 1],
            "ahead": [m.next_epoch() + 2 + pick % 40],
            "far": [FAR + pick],
            "jump": [m.next_epoch() + MAX_JUMP + pick % 3],
            "limit": [MAX_EPOCH - pick % 3],
            "beyond": [MAX_EPOCH + 1 + pick % 3],
            "live": live,
            "retired": retired,
            "gap": gaps,
            "negative": [-1],
        }[kind] or [m.next_epoch()]
        return options[pick % len(options)]

    # -- set-up
    @initialize(keep=st.integers(1, 3), headroom=st.sampled_from([0.0, 0.25, 0.5]),
                min_samples=st.sampled_from([1, 1, 3]), in_use=st.sampled_from([60.0, 300.0]))
    def setup(self, keep: int, headroom: float, min_samples: int, in_use: float) -> None:
        policy = Policy(capacity=CAPACITY, keep_epochs=keep, min_samples=min_samples, headroom=headroom,
                        in_use_seconds=in_use)
        store = Store(self.root, create=True)
        store.configure(policy)
        store.add_catalog(CatalogRow(k, sid_of(k), 0, "v1", i) for i, k in enumerate(sorted(LISTED)))
        store.close()
        self._open()
        assert self.store is not None
        self.reservations = Reservations(self.store)
        self.model = Model(policy)
        # Reads are recorded far ahead of the wall clock, so the retirement that eviction runs at the
        # wall clock sees them all as recent, and the model can predict it exactly.
        self.clock = time.time() + 1e6

    # -- downloads: reserve, write, admit or give up
    @rule(start=st.integers(0, len(KEYS) - 1),
          sizes=st.lists(st.tuples(SIZES, st.sampled_from(["admit", "admit", "admit", "keep", "give up"])),
                         min_size=1, max_size=4),
          clamp=st.sampled_from([None, None, None, 0.5, 0.8]))
    def fetch(self, start: int, sizes: list[tuple[int, str]], clamp: float | None) -> None:
        """Downloads as the sampler starts them: reserve (evicting, or refused: backpressure),
        write and fsync a temp file; then admitted in one batch, kept in flight or given up."""
        assert self.store is not None
        batch = []
        for i, (size, then) in enumerate(sizes):
            key = self._free_key(start + 7 * i, set(self.model.samples) | set(self.inflight))
            if key is None:
                break
            size = min(size, self.model.policy.epoch_budget)  # --max-object-size: what an epoch holds
            cap = None if clamp is None else int(CAPACITY * clamp)  # the disk's effective capacity
            expected = self.model.reserve(size, self.reserved, cap or CAPACITY, time.time())
            got = self.reservations.reserve(size, capacity=cap)
            self._retired_stamps()
            assert got == expected, f"reserve({size}, capacity={cap}) answered {got}, model {expected}"
            if not got:
                break  # backpressure: the sampler waits
            body = self._new_body(key, size)
            temp = self.store.temp_path()
            write_temp(temp, body)
            self.inflight[key] = Download(key, body, temp)
            assert self.store.cache_bytes() + self.reservations.reserved <= (cap or CAPACITY)
            if then == "admit":
                batch.append(key)
            elif then == "give up":
                self._give_up(key)
        if batch:
            self._admit(batch)
        assert self.reservations.reserved == self.reserved

    # Rules are drawn with equal weight: two more doors to fetching keep the cache near full, where
    # eviction, backpressure and pins meet.
    @rule(start=st.integers(0, len(KEYS) - 1),
          sizes=st.lists(st.tuples(SIZES, st.just("admit")), min_size=2, max_size=4))
    def fetch_batch(self, start: int, sizes: list[tuple[int, str]]) -> None:
        self.fetch(start, sizes, None)

    @rule(start=st.integers(0, len(KEYS) - 1), size=SIZES)
    def fetch_one(self, start: int, size: int) -> None:
        self.fetch(start, [(size, "admit")], None)

    def _admit(self, keys: list[str]) -> None:
        items = [self._admission(self.inflight[k]) for k in keys]
        self.reservations.admit(items)
        done = [self.inflight.pop(k) for k in keys]
        self.model.admit([(d.key, d.body) for d in done], self.reserved)
        assert self.reservations.reserved == self.reserved

    def _give_up(self, key: str) -> None:
        d = self.inflight.pop(key)
        assert d.temp is not None
        d.temp.unlink()
        self.reservations.release(len(d.body))

    @precondition(lambda self: self.inflight)
    @rule(data=st.data())
    def admit(self, data: st.DataObject) -> None:
        """Downloads kept in flight finish and are admitted in one batch."""
        self._admit(data.draw(st.lists(st.sampled_from(sorted(self.inflight)), min_size=1, max_size=3,
                                       unique=True)))

    def _admission(self, d: Download) -> Admission:
        assert d.temp is not None
        return Admission(d.key, sid_of(d.key), len(d.body), checksum_of(d.body), "v1", d.temp)

    @precondition(lambda self: self.inflight)
    @rule(pick=st.integers(0, 100))
    def give_up_download(self, pick: int) -> None:
        self._give_up(sorted(self.inflight)[pick % len(self.inflight)])
        assert self.reservations.reserved == self.reserved

    @rule(need=st.integers(0, CAPACITY))
    def evict(self, need: int) -> None:
        """An eviction of the sampler's: it evicts only through its reservations, which read the
        cache's total again after each (:meth:`Reservations.reconcile`); a total kept from before
        would still count the evicted bytes, and the next reservation would evict (and retire) more."""
        assert self.store is not None
        now = time.time()
        expected = self.model.evict(need, now)
        assert self.store.evict(need, now=now) == expected
        self.reservations.reconcile()

    # -- cuts and lookups
    @rule(kind=st.sampled_from(["default", "next", "next+1", "ahead", "live", "retired", "gap", "negative"]),
          pick=st.integers(0, 1000), force=st.booleans())
    def cut(self, kind: str, pick: int, force: bool) -> None:
        assert self.store is not None
        n = None if kind == "default" else self._epoch_number(kind, pick)
        try:
            expected: object = self.model.cut(n, force=force)[0]
        except ValueError:
            expected = ValueError
        try:
            got: object = self.store.cut(n, force=force)
        except ValueError:
            got = ValueError
        assert got == expected, f"cut({n}, force={force}) gave {got}, model {expected}"

    @rule(kind=st.sampled_from(["jump", "jump", "limit", "beyond", "next"]), pick=st.integers(0, 1000),
          far=st.booleans(), force=st.booleans())
    def far_cut(self, kind: str, pick: int, far: bool, force: bool) -> None:
        """``epochfs cut --epoch N [--far]`` far ahead (a step count passed as the epoch, or an
        operator's jump): past MAX_JUMP only with ``far``, never past MAX_EPOCH; the epochs below
        stay as cut, and once at the limit no later number is cut or queued."""
        assert self.store is not None
        n = self._epoch_number(kind, pick)
        try:
            expected: object = self.model.cut(n, force=force, far=far)[0]
        except ValueError:
            expected = ValueError
        try:
            got: object = self.store.cut(n, force=force, far=far)
        except ValueError:
            got = ValueError
        assert got == expected, f"cut({n}, force={force}, far={far}) gave {got}, model {expected}"

    @rule(kind=st.sampled_from(["next", "next", "next+1", "ahead", "far", "live", "retired", "gap"]),
          pick=st.integers(0, 1000))
    def lookup(self, kind: str, pick: int) -> None:
        """A lookup of epoch-N through the mount: request_cut, as the FUSE view asks it."""
        assert self.store is not None
        n = self._epoch_number(kind, pick)
        ready = self.model.cut_ready(n)
        assert self.store.cut_ready(n) == ready, f"cut_ready({n})"
        expected = self.model.request_cut(n)
        assert self.store.request_cut(n) == expected, f"request_cut({n})"
        if expected:
            assert [f.path for f in self.store.epoch_files(n)] == [f[0] for f in self.model.epochs[n].files]
        else:
            with pytest.raises(KeyError):
                self.store.epoch_files(n)

    @rule(count=st.integers(1, 60), pick=st.integers(0, 1000))
    def lookup_storm(self, count: int, pick: int) -> None:
        """Stray lookups far ahead (``stat epoch-999999`` from a script): no cut, no row, no answer."""
        assert self.store is not None
        base = self.model.next_epoch()
        for i in range(count):
            n = FAR + pick + i if i % 2 else base + 1 + (pick + i) % 50
            assert self.store.request_cut(n) is False
            assert self.model.request_cut(n) is False

    @rule()
    def serve_cut_requests(self) -> None:
        assert self.store is not None
        expected = self.model.process_cut_requests()
        assert [n for n, _ in self.store.process_cut_requests()] == expected

    # -- damage, scrubs and repairs
    def _damageable(self, how: str) -> list[str]:
        return sorted(k for k, smp in self.model.samples.items() if k not in self.model.repairs
                      and k not in self.model.suspect and (how == "delete" or smp.size > 0))

    @rule(picks=st.lists(st.integers(0, 1000), min_size=1, max_size=3),
          how=st.sampled_from(["flip", "truncate", "delete"]),
          tool=st.sampled_from(["scrub", "verify", "scan"]))
    def damage_and_scrub(self, picks: list[int], how: str, tool: str) -> None:
        """Object files damaged behind the store's back (a flipped byte, a short write, a file
        deleted) and found by the sampler's background scrub, ``epochfs verify`` (quarantined) or
        the background object scan (sizes only: a flip is left to the scrubs). Each is counted,
        marked for repair in place and reported; its row and its epochs' entries stay."""
        assert self.store is not None
        if tool == "scan" and how == "flip":
            how = "delete"
        candidates = self._damageable(how)
        if not candidates:
            return
        damaged = sorted({candidates[p % len(candidates)] for p in picks})
        found: dict[str, bytes | None] = {}
        for key in damaged:
            path = self.store.objects_dir / self.model.samples[key].object_name
            _damage(path, how)
            found[key] = None if how == "delete" else path.read_bytes()
        # Samples a rebuild took back with damaged bytes are found too, but by the scan (sizes).
        suspects = {} if tool == "scan" else self.model.suspect
        keys = sorted({*damaged, *suspects})
        found |= suspects
        if tool == "scrub":
            refetch: list[Candidate] = []
            scrubber = Scrubber(store=self.store, rate=1 << 30, stop=threading.Event(),
                                on_damaged=refetch.append)
            buffer = memoryview(bytearray(1 << 16))
            for obj in self.store.stored_objects(after_id=0, limit=len(KEYS)):
                problem = _scrub_check(self.store, obj, buffer)
                if problem is not None:
                    scrubber._take_out(obj, problem)
            assert scrubber.damaged == len(keys)
            assert sorted(c.key for c in refetch) == [k for k in keys if k in LISTED], "handed to the sampler"
        elif tool == "verify":
            report = verify(self.store, quarantine=True, err=io.StringIO(), progress_every=1e9)
            assert sorted(d["key"] for d in report["damaged"]) == keys, report
            for d in report["damaged"]:
                missing = how == "delete" and d["key"] not in suspects
                assert (d["problem"] == "missing") == missing, d
                assert (d["quarantined_to"] is None) == missing, d
        else:
            store = self.store
            scanned = objectscan.scan(lambda: store._ix, store.files, threading.Event(), duty=1.0)
            assert scanned is not None and (scanned.lost, scanned.orphans) == (len(keys), 0)
        self.model.take_out(keys, found)
        assert self.store.stats().repairing == len(self.model.repairs)

    @precondition(lambda self: self.store is not None and not all(self.model.repairs.values()))
    @rule(pick=st.integers(0, 1000), changed=st.sampled_from([False, False, False, True]))
    def repair(self, pick: int, changed: bool) -> None:
        """The sampler fetches a sample due for repair again, as it fetches anything (reserve,
        possibly evicting, write, admit): the same bytes go back into its place; other bytes (the
        remote's object changed) mark it lost. A reservation may evict the sample itself (outside
        every live epoch): then the download is admitted as a new sample."""
        assert self.store is not None
        by_id = sorted((k for k, lost in self.model.repairs.items() if not lost),
                       key=lambda k: self.model.samples[k].id)
        assert [c.key for c in self.store.repairs_due(limit=len(KEYS))] == by_id, "repairs due"
        self._repair(by_id[pick % len(by_id)], changed)

    @precondition(lambda self: self.store is not None and not all(self.model.repairs.values()))
    @rule(changed=st.lists(st.sampled_from([False, False, False, True]), min_size=len(KEYS),
                           max_size=len(KEYS)))
    def repair_all(self, changed: list[bool]) -> None:
        """Every sample due for repair fetched again in turn (the sampler fetches repairs first)."""
        assert self.store is not None
        for i, c in enumerate(self.store.repairs_due(limit=len(KEYS))):
            if self.model.repairs.get(c.key) is False:  # not evicted by an earlier repair's reserve
                self._repair(c.key, changed[i])

    def _repair(self, key: str, changed: bool) -> None:
        assert self.store is not None
        size = self.model.samples[key].size
        body = self._new_body(key, size) if changed else self.model.samples[key].body
        expected = self.model.reserve(size, self.reserved, CAPACITY, time.time())
        assert self.reservations.reserve(size) == expected, f"reserve({size}) for a repair"
        if not expected:
            return
        temp = self.store.temp_path()
        write_temp(temp, body)
        self.inflight[key] = Download(key, body, temp)
        self._admit([key])

    # -- pins and retirement
    @rule(kind=st.sampled_from(["live", "live", "retired", "next"]), pick=st.integers(0, 1000),
          back=st.sampled_from([0.0, 0.0, 30.0, 299.0]))
    def read(self, kind: str, pick: int, back: float) -> None:
        """A reader records a read of epoch n (``now`` at the machine's clock, or a while before)."""
        assert self.store is not None
        n = self._epoch_number(kind, pick)
        self.store.record_read(n, now=self.clock - back)
        self.model.record_read(n, self.clock - back)

    @rule(advance=st.sampled_from([0.0, 1.0, 59.0, 60.0, 61.0, 299.0, 301.0, 1000.0]))
    def retire(self, advance: float) -> None:
        assert self.store is not None
        self.clock += advance
        expected = self.model.retire(self.clock)
        assert sorted(self.store.retire(now=self.clock)) == expected

    # -- restarts
    @rule(data=st.data(), strays=st.integers(0, 2))
    def restart(self, data: st.DataObject, strays: int) -> None:
        """The sampler stops with downloads in flight (each left as a complete or partial temp file,
        or already renamed into objects/ when the index commit never came), then starts again."""
        assert self.store is not None
        temps = orphans = 0
        for key in sorted(self.inflight):
            d = self.inflight[key]
            assert d.temp is not None
            how = data.draw(st.sampled_from(["temp", "partial", "installed"]), label=f"abandon {key}")
            if how == "installed":
                self.store.files.install([self._admission(d)])
                orphans += 1
            else:
                if how == "partial":
                    os.truncate(d.temp, len(d.body) // 2)
                temps += 1
        for _ in range(strays):
            self.store.temp_path().write_bytes(b"partial")
            temps += 1
        self._close()
        self._open()
        assert self.store is not None
        report = self.store.recover()
        assert (report.integrity, report.repairs_marked) == ("ok", 0), report
        assert (report.temp_removed, report.orphans_removed) == (temps, orphans), report
        self.inflight = {}
        self.reservations = Reservations(self.store)
        self.model.inflight_meta = 0
        self.model.recovered()

    # At most three per example: rules are drawn with equal weight, and a rebuild costs a full
    # check and a full recovery scan (hypothesis often drew five or more).
    @precondition(lambda self: self.rebuilds < 3 and not (STALE_FILES_RESTORED and self.model.stale))
    @rule(how=st.sampled_from(HOWS), pick=st.integers(0, 1000), keeper=st.booleans())
    def damage_index(self, how: str, pick: int, keeper: bool) -> None:
        """Pages of the index damaged while the sampler is down (:mod:`model_index_damage`), then
        its start as ``epochfs sample`` makes it: the damage found at the index's open or by the
        start-up check, the index rebuilt from the live epochs' members files and put in place,
        recovery, the rules recorded and the catalog listed again, the first look for repairs.
        With ``keeper`` the sampler's members thread made a pass first (it writes the file of a
        live epoch that has none: after a retirement killed between its unlink and its commit)."""
        assert self.store is not None
        if keeper:
            self.store.write_members()
            self.model.filed = set(self.model.live())
        temps = len(self.inflight)  # downloads in flight: left as temp files
        self._tally()
        self._close()
        RUN_STATS["chained members files restored"] += sum(
            1 for n in self.model.filed if "base" in (memberchain.head(path_of(self.root, n)) or {}))
        done = damage(self.root, how, pick)
        with contextlib.suppress(InvalidArgument):  # called outside hypothesis too
            note(f"damage_index: {done}")
        started = time.time()
        store = self.store = Store(self.root, create=True)
        store.check_index()
        ended = time.time()
        assert self._moved_aside() == self.rebuilds + 1, "the damage was found and the index replaced"
        reads = {float(r[0]) for r in store._ix.query("SELECT DISTINCT last_read FROM epochs")}
        assert all(started <= t <= ended for t in reads) and len(reads) <= 1, reads
        suspects = len(self.model.suspect)
        counters_read = countercarry.read_damaged(newest_copy(self.root))[0] is not None
        orphans = rebuilt(self.model, LISTED, reads.pop() if reads else 0.0, counters_read)
        report = store.recover(integrity="ok")
        assert (report.integrity, report.repairs_marked) == ("ok", 0), report
        assert (report.temp_removed, report.orphans_removed) == (temps, orphans), report
        store.configure(self.model.policy)
        store.add_catalog(CatalogRow(k, sid_of(k), 0, "v1", i) for i, k in enumerate(sorted(LISTED)))
        store.repairs_due(limit=len(KEYS))  # marks lost what the catalog no longer lists
        self.ro = sqlite3.connect(f"file:{self.root / INDEX_NAME}?mode=ro", uri=True, timeout=30)
        self.inflight = {}
        self.reservations = Reservations(store)
        self.forgotten |= set(self.history) - set(self.model.epochs)
        self.rebuilds += 1
        RUN_STATS["epochs restored"] += len(self.model.epochs)
        RUN_STATS["damaged files taken back by a rebuild"] += len(self.model.suspect) - suspects

    def _moved_aside(self) -> int:
        return sum(1 for name in corrupt_copies(self.root) if not name.endswith(("-wal", "-shm")))

    @rule(plan=st.lists(st.sampled_from(["download", "download", "admit", "admit", "cut", "lookup",
                                         "serve", "retire", "evict", "read"]), min_size=1, max_size=6),
          recovery_killed=st.booleans(), data=st.data())
    def kill_9(self, plan: list[str], recovery_killed: bool, data: st.DataObject) -> None:
        """The sampler goes on in a forked child that does the ops of ``plan`` and is killed with
        SIGKILL at a point hypothesis draws (:class:`CrashPoint`); with ``recovery_killed`` the next
        start is killed too, in the middle of its recovery. Then a start that recovers."""
        child = ChildPlan(self)
        for kind in plan:
            sim = child.sim
            if kind == "download":
                key = self._free_key(data.draw(st.integers(0, len(KEYS) - 1), label="key"),
                                     set(sim.samples) | set(child.inflight))
                if key is not None:
                    child.download(key, min(data.draw(SIZES, label="size"), sim.policy.epoch_budget))
            elif kind == "admit" and child.inflight:
                child.admit(data.draw(st.lists(st.sampled_from(sorted(child.inflight)), min_size=1,
                                               max_size=3, unique=True), label="admit"))
            elif kind == "cut":
                n = data.draw(st.sampled_from([None, sim.next_epoch(), sim.next_epoch() + 2]), label="cut")
                child.cut(n)
            elif kind == "lookup":
                child.lookup(data.draw(st.sampled_from([sim.next_epoch(), FAR, *sim.live()]), label="lookup"))
            elif kind == "serve":
                child.serve()
            elif kind == "retire":
                child.retire(self.clock + data.draw(st.sampled_from([0.0, 100.0, 1000.0]), label="advance"))
            elif kind == "evict":
                child.evict(data.draw(st.integers(1, CAPACITY), label="need"))
            elif kind == "read" and sim.epochs:
                child.read(data.draw(st.sampled_from(sorted(sim.epochs)), label="read"))
        at = data.draw(crash_points(len(child.ops)), label="crash point")
        again = data.draw(crash_points(0), label="crash point in recovery") if recovery_killed else None
        self.crash_and_recover(child, at, again)

    def crash_and_recover(self, child: ChildPlan, at: CrashPoint, again: CrashPoint | None = None) -> bool:
        """Run ``child`` in a forked process killed at ``at``; kill the next start during its
        recovery at ``again``; then start and recover, and find which committed state the store
        is in. True when the child was killed at ``at`` (False: it finished first)."""
        self._close()
        killed = self._run_child(lambda crash: self._child_ops(child.ops, crash), at)
        self.kills += 1
        if again is not None:
            self._run_child(lambda crash: _recover_in_child(self.root, crash), again)
        self._open()
        assert self.store is not None
        report = self.store.recover()
        assert (report.integrity, report.repairs_marked) == ("ok", 0), report
        got = self._signature()
        assert got.pop("inflight") == 0
        states = [m.recovered() for m in child.states]
        matches = [m for m in states if {**m.signature(), "inflight": None} == {**got, "inflight": None}]
        assert matches, _closest_diff(states, got)
        self.model = matches[-1]
        self.model.trace = None
        self._members_after_kill(states[max(i for i, m in enumerate(states) if m is self.model) + 1:])
        self.model.inflight_meta = 0
        self.versions = child.versions
        self.inflight = {}
        self.reservations = Reservations(self.store)
        return killed

    def _members_after_kill(self, later: list[Model]) -> None:
        """The members files a killed child left: those of the committed state, less a file a
        retirement removed before its commit never came (the keeper writes it again), plus one a
        cut put in place before its commit never came (stale: the next cut of its number replaces
        it). ``later``: the states the child could have reached after the one it left."""
        m, on_disk = self.model, members_on_disk(self.root)
        gone, extra = m.filed - on_disk, on_disk - m.filed - m.stale
        retiring = {n for s in later for n, e in s.epochs.items() if e.retired}
        cutting = {n for s in later for n in s.epochs} - set(m.epochs)
        assert gone <= retiring, f"members files of live epochs gone after kill -9: {gone - retiring}"
        assert extra <= cutting, f"members files of epochs never cut after kill -9: {extra - cutting}"
        m.filed -= gone
        m.stale |= extra

    def _run_child(self, work: Callable[[Crash], None], at: CrashPoint) -> bool:
        """Fork; the child does ``work`` with crash points and is killed at ``at`` (or kills
        itself when done: then False). The parent has no connection open across the fork."""
        assert self.store is None and self.ro is None
        errors = self.dir / "child-error.txt"
        finished = self.dir / "child-finished"
        finished.unlink(missing_ok=True)
        pid = os.fork()
        if pid == 0:  # the child: never returns into the test
            try:
                crash = Crash(at)
                work(crash)
                finished.touch()
                os.kill(os.getpid(), signal.SIGKILL)
            except BaseException:
                with open(errors, "w") as f:
                    f.write(traceback.format_exc())
            finally:
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
            raise AssertionError(f"child failed (status {status}):\n"
                                 f"{errors.read_text() if errors.exists() else '(no traceback)'}")
        return not finished.exists()

    def _child_ops(self, ops: list[tuple[Any, ...]], crash: Crash) -> None:
        store = Store(self.root)
        store._ix.db = CrashingConnection(store._ix.db, crash)  # type: ignore[assignment]
        crash_points_in_os(crash)
        reservations = self.reservations  # the sampler's own, as forked, on the reopened folder
        reservations.store = store
        inflight = dict(self.inflight)
        for i, op in enumerate(ops):
            crash.enter(i)
            kind = op[0]
            if kind == "download":
                _, key, body, ok = op
                reserved = reservations.reserve(len(body))
                assert reserved == ok, f"child: reserve({len(body)}) gave {reserved}, model {ok}"
                if reserved:
                    temp = store.temp_path()
                    write_temp(temp, body, crash)
                    inflight[key] = Download(key, body, temp)
            elif kind == "admit":
                reservations.admit([self._admission(inflight.pop(k)) for k in op[1]])
            elif kind == "cut":
                try:
                    got: object = store.cut(op[1])
                except ValueError:
                    got = ValueError
                assert got == op[2], op
            elif kind == "lookup":
                assert store.request_cut(op[1]) == op[2], op
            elif kind == "serve":
                assert [n for n, _ in store.process_cut_requests()] == op[1], op
            elif kind == "retire":
                assert sorted(store.retire(now=op[1])) == op[2], op
            elif kind == "evict":
                assert store.evict(op[1], now=op[2]) == op[3], op
                reservations.reconcile()  # as the sampler's own eviction: see :meth:`evict`
            elif kind == "read":
                store.record_read(op[1], now=op[2])
        crash.enter(len(ops))

    def check_all(self) -> None:
        """Every invariant, for callers outside hypothesis (the crash sweep)."""
        self.the_store_equals_the_model()
        self.capacity_is_never_exceeded()
        self.epochs_never_change_and_numbers_are_never_reused()
        self.every_listed_file_is_readable_with_its_bytes()
        self.manifests_never_change_and_entries_never_disappear()
        self.files_on_disk_are_what_the_index_says()

    # -- invariants, after every step
    @invariant()
    def the_store_equals_the_model(self) -> None:
        if self.store is None:
            return
        got = self._signature()
        want = self.model.signature()
        if got != want:
            raise AssertionError(_diff(want, got))

    @invariant()
    def capacity_is_never_exceeded(self) -> None:
        if self.store is None:
            return
        cache = self.store.cache_bytes()
        assert cache + self.reservations.reserved <= CAPACITY, (cache, self.reservations.reserved)
        stats = self.store.stats()
        assert stats.cache_bytes == cache == self.model.cache_bytes, "running total vs samples table"
        assert stats.samples == len(self.model.samples)
        assert [e["epoch"] for e in stats.epochs] == self.model.live()
        assert stats.latest_epoch == (self.model.live()[-1] if self.model.live() else None)
        for e in self.store.epochs():
            assert e.bytes <= self.model.policy.epoch_budget

    @invariant()
    def epochs_never_change_and_numbers_are_never_reused(self) -> None:
        if self.store is None:
            return
        for info in self.store.epochs():
            files = [(f.path, f.size, f.checksum, f.object_name) for f in self.store.epoch_files(info.epoch)]
            seen = self.history.setdefault(info.epoch, files)
            assert files == seen, f"epoch {info.epoch} changed while live:\nwas {seen}\nnow {files}"
        known = {int(n) for (n,) in self._rows("SELECT n FROM epochs")}
        assert set(self.history) - self.forgotten <= known, \
            f"epochs forgotten by the index: {set(self.history) - self.forgotten - known}"
        assert all(n < self.store.next_epoch() for n in self.forgotten), "a number left out by a rebuild"

    @invariant()
    def every_listed_file_is_readable_with_its_bytes(self) -> None:
        """What a verifying reader gets through each entry's link: the right bytes; for a
        sample waiting for its repair, the file the take-out found there (never no file where
        there was one: issue 20, a reader's ENOENT) or the repair's right bytes (installed, its
        commit not yet made); for a lost one no file. Never another sample's bytes."""
        if self.store is None:
            return
        for info in self.store.epochs():
            for f in self.store.epoch_files(info.epoch):
                path = self.store.objects_dir / f.object_name
                if f.path in self.model.suspect:  # taken back by a rebuild: the damaged bytes, as before
                    assert path.read_bytes() == self.model.suspect[f.path]
                    continue
                if self.model.repairs.get(f.path) is True:
                    assert not path.exists(), f"epoch {info.epoch}: {f.path} is served while lost"
                    continue
                if self.model.repairs.get(f.path) is False:
                    kept, body = self.model.kept.get(f.path), self.model.samples[f.path].body
                    if kept is not None:
                        assert path.exists(), f"epoch {info.epoch}: {f.path} vanished before its repair"
                    if path.exists():
                        assert path.read_bytes() in (kept, body), f"epoch {info.epoch}: {f.path} other bytes"
                    continue
                data = path.read_bytes()
                assert checksum_of(data) == f.checksum, f"epoch {info.epoch}: {f.path} has other bytes"
                assert data == self.model.samples[f.path].body

    @invariant()
    def manifests_never_change_and_entries_never_disappear(self) -> None:
        """Each live epoch as the FUSE view builds it (its tree, then its manifest, from the
        store's rows: :class:`EpochTree`) is the one it was cut with, repairs and quarantines
        included, and every entry's sample keeps its row."""
        if self.store is None:
            return
        keys = {k for (k,) in self._rows("SELECT key FROM samples")}
        for info in self.store.epochs():
            files = self.store.epoch_files(info.epoch)
            tree = EpochTree(epoch=info.epoch, cut_at=info.cut_at, files=files, link_root=Path("/links"))
            manifest = bytes(tree.packed_manifest())
            seen = self.manifests.setdefault(info.epoch, manifest)
            assert manifest == seen, f"epoch {info.epoch}'s manifest changed"
            assert {f.path for f in files} <= keys, f"epoch {info.epoch} lost a sample's row"

    @invariant()
    def files_on_disk_are_what_the_index_says(self) -> None:
        if self.store is None:
            return
        on_disk = {f"{p.parent.name}/{p.name}" for p in self.store.objects_dir.glob("*/*")}
        samples = self.model.samples.values()
        whole = {s.object_name for s in samples if s.key not in self.model.repairs
                 or (self.model.repairs[s.key] is False and self.model.kept.get(s.key) is not None)}
        found_none = {s.object_name for s in samples if self.model.repairs.get(s.key) is False
                      and self.model.kept.get(s.key) is None}  # a repair installed, not committed
        assert whole <= on_disk <= whole | found_none, \
            "objects vs samples (a lost one has no file; one due for repair keeps what it had)"
        temps = {p.name for p in self.store.tmp_dir.iterdir()}
        assert temps == {d.temp.name for d in self.inflight.values() if d.temp is not None}
        strays = {p.name for p in self.root.iterdir()} - ROOT_NAMES - set(corrupt_copies(self.root))
        assert strays == set(), f"left in the cache folder: {strays}"
        assert self._moved_aside() == self.rebuilds, "a damaged index moved aside for each rebuild"
        assert members_on_disk(self.root) == self.model.filed | self.model.stale, "members files"

    @invariant()
    def the_next_number_is_the_models(self) -> None:
        """The high-water mark outside the index never moves the next number (nothing here loses
        index transactions), and a lookup may ask for exactly that one."""
        if self.store is None:
            return
        assert self.store.next_epoch() == self.model.next_epoch()


def _damage(path: Path, how: str) -> None:
    """A flipped byte, a short write or a file deleted behind the store's back."""
    if how == "delete":
        path.unlink()
        return
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        if how == "flip":
            f.seek(size // 2)
            byte = f.read(1)
            f.seek(size // 2)
            f.write(bytes([byte[0] ^ 0x01]))
        else:
            f.truncate(size // 2)
    os.chmod(path, 0o444)


def _scrub_check(store: Store, obj: StoredObject, buffer: memoryview) -> str | None:
    """One object as the background scrub checks it (:func:`epochfs.sidecar.scrub._check`)."""
    try:
        return store.check_object(obj, buffer=buffer)
    except OSError as e:
        return f"unreadable: {e.strerror or e}"


def _recover_in_child(root: Path, crash: Crash) -> None:
    store = Store(root)
    store._ix.db = CrashingConnection(store._ix.db, crash)  # type: ignore[assignment]
    crash_points_in_os(crash)
    crash.enter(0)
    store.recover()


def _diff(want: dict[str, Any], got: dict[str, Any]) -> str:
    lines = ["the store differs from the model:"]
    for k in want:
        if want[k] != got.get(k):
            lines.append(f"  {k}:\n    model {want[k]}\n    store {got.get(k)}")
    return "\n".join(lines)


def _closest_diff(states: list[Model], got: dict[str, Any]) -> str:
    """No committed state matches: show the diff to each state the child could have left."""
    out = ["after kill -9 the store equals none of the states the child could have committed:"]
    for i, m in enumerate(states):
        out.append(f"-- state {i}: {_diff({**m.signature(), 'inflight': None}, {**got, 'inflight': None})}")
    return "\n".join(out)


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Path]:
    """A folder in memory when the machine has one (/dev/shm): fsync there costs nothing, and
    these tests fsync thousands of times (crash safety does not depend on the disk here: the
    processes die, the kernel keeps what they wrote)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        folder = Path(tempfile.mkdtemp(prefix="epochfs-model-", dir=shm))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    else:
        yield tmp_path


RUN_STATS: Counter[str] = Counter()
"""What the examples of the last run did, summed (printed by the tests)."""


def run_machine(base: Path, *, examples: int, steps: int) -> None:
    RUN_STATS.clear()
    started = time.monotonic()
    run_state_machine_as_test(
        lambda: StoreMachine(base),  # type: ignore[arg-type]  # a factory, as hypothesis allows
        settings=settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                                 HealthCheck.data_too_large]),
    )
    print(f"store model: {examples} examples of up to {steps} steps in {time.monotonic() - started:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in RUN_STATS.items()))


@pytest.mark.long
def test_store_model(base: Path) -> None:
    run_machine(base, examples=30, steps=50)  # 500 x 80 in test_store_model_long (slow)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_store_model_long(base: Path) -> None:
    run_machine(base, examples=int(os.environ.get("EPOCHFS_MODEL_EXAMPLES", "500")), steps=80)


# ------------------------------------------------------------------- every crash point, in order
class Sweep:
    """A machine set to one state, and a way back to it, to try every crash point from there."""

    def __init__(self, base: Path) -> None:
        m = self.machine = StoreMachine(base)
        # Keep one epoch, a 3,072-byte epoch budget, five samples in it before a lookup may cut.
        m.setup(keep=1, headroom=0.25, min_samples=5, in_use=60.0)
        m.fetch(0, [(700, "admit")] * 5, None)  # 3,500 of 4,096 bytes
        m.cut("default", 0, True)  # epoch 0 (forced): the four newest; the oldest is evictable
        m.lookup("next", 0)  # epoch 1 asked for: five of 700 B exceed the budget, so queued
        m.fetch(9, [(300, "keep")], None)  # a download in flight
        m.check_all()
        self.saved = base / "saved"
        shutil.copytree(m.root, self.saved)
        self.model = m.model.snapshot()
        self.inflight, self.versions = dict(m.inflight), dict(m.versions)
        self.history = copy.deepcopy(m.history)

    def reset(self) -> StoreMachine:
        m = self.machine
        m._close()
        shutil.rmtree(m.root)
        shutil.copytree(self.saved, m.root)
        m._open()
        assert m.store is not None
        m.model = self.model.snapshot()
        m.inflight, m.versions = dict(self.inflight), dict(self.versions)
        m.history = copy.deepcopy(self.history)
        m.reservations = Reservations(m.store)
        assert m.reservations.reserve(m.reserved)
        return m

    def plan(self) -> ChildPlan:
        """The sampler's next moves, each one a transaction or a few (see the comments)."""
        m = self.machine
        child = ChildPlan(m)
        assert child.download(KEYS[20], 300)  # reserve: evicts the oldest sample, then writes
        child.admit([KEYS[20], *sorted(m.inflight)])  # two admitted: the newest five fit
        child.serve()  # the queued cut: epoch 1
        child.read(0)  # epoch 0 in use
        child.retire(m.clock + 1000)  # ... no longer: it retires
        child.evict(1000)  # the samples only epoch 0 held
        child.lookup(child.sim.next_epoch())  # four samples: queued
        return child

    def close(self) -> None:
        self.machine.teardown()
        shutil.rmtree(self.saved, ignore_errors=True)


def sweep_sampler(base: Path, kinds: tuple[str, ...]) -> int:
    """Every crash point of ``kinds`` in every op of :meth:`Sweep.plan`; returns how many."""
    sweep = Sweep(base)
    tried = 0
    try:
        for op in range(len(sweep.plan().ops)):
            for kind in kinds:
                for k in range(1, 500):
                    m = sweep.reset()
                    killed = m.crash_and_recover(sweep.plan(), CrashPoint(op, kind, k))
                    m.check_all()
                    m.fetch(3, [(200, "admit")], None)  # and the next start works
                    m.check_all()
                    tried += 1
                    if not killed:
                        break
    finally:
        sweep.close()
    return tried


def test_every_crash_point_of_the_sampler_leaves_a_committed_state(base: Path) -> None:
    """kill -9 before and just after each COMMIT and before each file operation of a planned run
    of the sampler (reserve with eviction, temp write, batch admission, a queued cut, a read, a
    retirement, an eviction, a lookup): recovery leaves exactly one committed state, every
    invariant holds, and a start after it goes on."""
    tried = sweep_sampler(base, ("commit", "committed", "file"))
    print(f"{tried} crash points tried")
    assert tried > 30


@pytest.mark.slow
def test_every_statement_is_a_crash_point(base: Path) -> None:
    """The same, killed before every database statement too (inside transactions, reads)."""
    tried = sweep_sampler(base, CRASH_KINDS)
    print(f"{tried} crash points tried, every statement and file operation")
    assert tried > 100


def test_every_crash_point_of_recovery(base: Path) -> None:
    """A start killed during its recovery (temp files, a partial one, an installed object whose
    row never came), at every COMMIT and file operation: the next recovery finishes the job."""
    sweep = Sweep(base)
    tried = 0
    try:
        for kind in CRASH_KINDS:
            for k in range(1, 200):
                m = sweep.reset()
                assert m.store is not None
                d = m.inflight[sorted(m.inflight)[0]]
                m.store.files.install([m._admission(d)])  # an object whose row never committed
                m.store.temp_path().write_bytes(b"half")
                m.inflight = {}
                m._close()
                killed = m._run_child(functools.partial(_recover_in_child, m.root), CrashPoint(0, kind, k))
                m._open()
                assert m.store is not None
                report = m.store.recover()
                assert (report.integrity, report.repairs_marked) == ("ok", 0)
                m.reservations = Reservations(m.store)
                m.model.inflight_meta = 0
                m.check_all()
                tried += 1
                if not killed:
                    break
    finally:
        sweep.close()
    assert tried > 3


def test_a_killed_cut_leaves_no_temp_file(base: Path) -> None:
    """kill -9 while a cut writes ``epochs.hwm`` (its temp file written, not yet renamed), then a
    start that recovers: nothing of the dead process may stay in the cache folder. (Found by the
    machine: recovery left ``.epochs.hwm.<pid>.tmp`` behind for good.)"""
    sweep = Sweep(base)
    try:
        m = sweep.reset()
        child = ChildPlan(m)
        assert child.download(KEYS[20], 300)
        child.admit([KEYS[20], *sorted(m.inflight)])
        child.cut(None)  # the newest five fit the budget: the cut is made
        assert m.crash_and_recover(child, CrashPoint(2, "file", 1))  # before the mark's fsync
        m.check_all()
        left = sorted(p.name for p in m.root.iterdir() if HWM_TEMP.fullmatch(p.name))
        assert left == [], f"left in {m.root} after recovery: {left}"
    finally:
        sweep.close()


@pytest.mark.parametrize("journaled", [True, False], ids=["journal", "full-scan"])
@pytest.mark.parametrize("listed", [False, True], ids=["lost", "due"])
def test_a_take_out_killed_after_its_commit_leaves_no_file_of_a_lost_sample(
        base: Path, journaled: bool, listed: bool) -> None:
    """kill -9 of the scrub between the commit that marks a damaged sample and what follows.
    A lost sample's file goes after that commit; the row stays (no trigger journals it), so the
    damaged file was left in place for good: served through every entry that links to it, and
    never checked again (the scrub skips samples waiting for a repair). Its name is journaled
    with the mark now, and the next start removes it (so does a start's full scan, for an index
    without a journal): the epoch keeps its entry, a reader gets no file, never wrong bytes.
    A sample due for a repair keeps its file until the repair renames the right bytes over it
    (issue 20: removing it made its entries answer ENOENT for the whole download), and the next
    start keeps it too: the sampler repairs it first."""
    sweep = Sweep(base)
    try:
        m = sweep.reset()
        assert m.store is not None
        for pending in sorted(m.inflight):
            m._give_up(pending)
        if journaled:  # a start's recovery makes the journal (the sweep's folder has none yet)
            m.store.recover()
            m.model.inflight_meta = 0
        key = next((f.path for f in m.store.epoch_files(0) if (f.path in LISTED) == listed), None)
        if key is None:
            pytest.skip("the sweep's epoch 0 holds no such key")
        path = m.store.objects_dir / m.model.samples[key].object_name
        _damage(path, "flip")
        damaged = path.read_bytes()
        m._close()

        def scrub_killed(crash: Crash) -> None:
            store = Store(m.root)
            store._ix.db = CrashingConnection(store._ix.db, crash)  # type: ignore[assignment]
            crash_points_in_os(crash)
            obj = next(o for o in store.stored_objects(after_id=0, limit=len(KEYS)) if o.key == key)
            problem = store.check_object(obj)
            assert problem is not None and problem.startswith("md5 ")
            crash.enter(0)
            store.take_out([(obj, problem)], quarantine=False)

        assert m._run_child(scrub_killed, CrashPoint(0, "committed", 1)), "killed after the commit"
        m._open()
        assert m.store is not None
        report = m.store.recover()
        removed = int(not listed)
        assert (report.integrity, report.repairs_marked, report.orphans_removed) == ("ok", 0, removed), report
        assert path.exists() == listed
        m.model.inflight_meta = 0
        m.model.take_out([key], {key: damaged})
        m.reservations = Reservations(m.store)
        m.check_all()
        if listed:
            assert path.read_bytes() == damaged, "kept in place for its repair"
            m.repair(0, False)  # and the sampler repairs it in place
            assert key not in m.model.repairs
            assert path.read_bytes() == m.model.samples[key].body
            m.check_all()
    finally:
        sweep.close()


def test_a_killed_cut_is_no_epoch_after_a_rebuild(base: Path) -> None:
    """Found by the machine (``damage_index`` after ``kill_9``): a cut killed between its members
    file's rename and its commit leaves the file of an epoch never cut; a jump over its number
    keeps it for good, and an index rebuild restores it. Here epoch 1 (killed) appears below the
    newest after the rebuild, and its old row for ``train/004.bin`` (evicted, fetched again and
    cut into epoch 6) takes the key: live epoch 6 loses that file. The docs (reliability.md
    section 10): only live epochs come back, with the same files. Fixed: the start-up recovery
    removes the members files of numbers the index has no epoch for."""
    sweep = Sweep(base)
    try:
        m = sweep.reset()
        child = ChildPlan(m)
        assert child.download(KEYS[20], 300)
        child.admit([KEYS[20], *sorted(m.inflight)])
        child.cut(None)  # epoch 1: killed before its COMMIT, its members file in place
        assert m.crash_and_recover(child, CrashPoint(2, "commit", 2))
        assert m.model.stale == set() and 1 not in members_on_disk(m.root)  # recovery removed it
        m.cut("ahead", 0, False)  # epoch 3: a jump over 1
        m.retire(1000.0)  # epoch 0 retires; 4 takes four new samples
        m.fetch(1, [(700, "admit")] * 4, None)
        m.cut("default", 0, True)
        for key, size in ((9, 300), (4, 700)):  # epochs 5 and 6; 004, evicted, comes back in 6
            m.retire(1000.0)
            m.evict(CAPACITY)
            m.fetch_one(key, size)
            m.cut("default", 0, True)
        m.check_all()
        assert KEYS[4] in {f[0] for f in m.model.epochs[6].files} and not m.model.epochs[6].retired
        before = epoch_snapshot(m.store)
        m._close()
        damage(m.root, "garbage", 0)
        restart_as_the_sampler(m.root)
        with Store(m.root, create=True) as store:
            after = epoch_snapshot(store)
        paths = {n: [f.path for f in files] for n, files in before.items()}
        assert {n: [f.path for f in files] for n, files in after.items()} == paths, "epochs 1 and 6"
        assert after == before, "the same live epochs with the same files"
    finally:
        sweep.close()
