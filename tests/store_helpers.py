"""Reading a cache's index directly, for checks that production code has no use for.

The store keeps no query that only tests need (issue: production functions used only by tests);
these read ``index.sqlite`` with plain SQL, read-only, beside a running sampler if need be.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from epochfs.sidecar import keyorder
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.store import INDEX_NAME, Admission, FileEntry, Policy, RecoveryReport, Store, object_name


def sid_of(key: str) -> str:
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


def _rows(cache: Path, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    db = sqlite3.connect(f"file:{cache / INDEX_NAME}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def sample_checksums(store: Store) -> list[tuple[str, str, Path]]:
    """(key, checksum, object path) of every sample."""
    return [(str(k), str(c), store.objects_dir / object_name(str(s)))
            for k, c, s in _rows(store.root, "SELECT key, checksum, sid FROM samples")]


def catalog_count(store: Store) -> int:
    return int(str(_rows(store.root, "SELECT COUNT(*) FROM catalog")[0][0]))


def resolve(store: Store, n: int, path: str) -> Path | None:
    """The object file behind ``epoch-n/path``, or None when the live epoch does not list it."""
    try:
        entries = store.epoch_files(n)
    except KeyError:
        return None
    return next((store.objects_dir / e.object_name for e in entries if e.path == path), None)


def sampling_order(seed: int, keys: list[str]) -> list[str]:
    """``keys`` sorted in sampling order (ties, which need a 64-bit collision, broken by key)."""
    return sorted(keys, key=lambda k: (keyorder.rank(seed, k), k))


def put(store: Store, key: str, size: int = 100, *, fill: int | None = None) -> Admission:
    """Reserve, write a temp file and admit one sample, as the sampler does."""
    reservations = Reservations(store)
    assert reservations.reserve(size), f"no room for {key}"
    body = bytes([(fill if fill is not None else len(key)) % 256]) * size
    temp = store.temp_path()
    with open(temp, "wb") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    a = Admission(key, sid_of(key), size, "md5:" + hashlib.md5(body).hexdigest(), "v1", temp)
    reservations.admit([a])
    return a


def garble(cache: Path, table: str, pages: int = 7) -> list[int]:
    """Garbage over ``pages`` leaf pages of ``table`` in the middle of its b-tree (a stopped cache:
    everything checkpointed into the index file first; a FUSE server may still have it open).
    Returns the pages."""
    index = cache / INDEX_NAME
    db = sqlite3.connect(index)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        leaves = [int(r[0]) for r in db.execute(
            "SELECT pageno FROM dbstat WHERE name=? AND pagetype='leaf' ORDER BY path", (table,))]
        size = int(db.execute("PRAGMA page_size").fetchone()[0])
    finally:
        db.close()
    assert len(leaves) >= pages + 2, leaves
    middle = len(leaves) // 2 - pages // 2
    hit = leaves[middle:middle + pages]
    with open(index, "r+b") as f:
        for page in hit:
            f.seek((page - 1) * size)
            f.write(os.urandom(size))
    return hit


def epoch_snapshot(store: Store) -> dict[int, list[FileEntry]]:
    """Every live epoch's files, by number: what an index rebuild must give back."""
    return {e.epoch: store.epoch_files(e.epoch) for e in store.epochs()}


def restart_as_the_sampler(cache: Path) -> tuple[str, float, RecoveryReport]:
    """What ``epochfs sample`` does at start: the index check (the full one: the marker or a small
    index asks for it) that replaces a damaged index (rebuilt from the members files), then
    recovery. Returns (what the check found, its seconds, recovery's report)."""
    with Store(cache, create=True) as store:
        started = time.monotonic()
        problem = store.check_index()
        seconds = time.monotonic() - started
        report = store.recover(integrity="ok")
    return problem, seconds, report


def members_head(path: Path) -> dict[str, Any]:
    """A members file's first line (its epoch's row, its format, its base), parsed."""
    with open(path, "rb") as f:
        head = json.loads(f.readline())
    assert isinstance(head, dict)
    return head


def listed_store(tmp_path: Path, keys: list[str], policy: Policy, size: int) -> Store:
    """A store at ``tmp_path/cache`` under ``policy`` whose catalog lists ``keys`` (objects of
    ``size`` bytes each, in an in-memory remote), as the sampler's first listing leaves it."""
    from epochfs.sidecar.catalog import build_catalog
    from epochfs.sidecar.remote.testing import MemoryRemote

    store = Store(tmp_path / "cache", create=True)
    store.configure(policy)
    build_catalog(store, MemoryRemote({k: b"x" * size for k in keys}), seed=0, shard_index=0,
                  shard_count=1, object_limit=1 << 20)
    return store


def epochs_table_against_members(store: Store) -> list[tuple[int, int, int, int, int]]:
    """(epoch, new shown, new in members, left out shown, left out in members) for each epoch
    whose previous epoch is live: the epochs table's counts beside the set differences of the
    members the store lists."""
    members = {e.epoch: {f.path for f in store.epoch_files(e.epoch)} for e in store.epochs()}
    rows = []
    for e in store.stats().epochs:
        n = int(e["epoch"])
        if n - 1 in members:
            rows.append((n, int(e["new"]), len(members[n] - members[n - 1]),
                         int(e["evicted"]), len(members[n - 1] - members[n])))
    return rows
