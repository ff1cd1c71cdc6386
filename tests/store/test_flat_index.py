"""An index that stays flat (issue 14): readers beside a held write lock, cuts whose writes do not
grow with the samples, status without a scan, an older index that opens, retirement on schedule.

Each test would fail on the store before the change: readers waited out the sampler's write lock
(30 s, then "database is locked"), a cut wrote one row per sample, status counted the samples
table, and epochs beyond ``keep_epochs`` stayed until something had to be evicted.
"""

from __future__ import annotations

import random
import sqlite3
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, make_objects, open_store
from inprocess import objects_of, sampling, settings_for
from store_helpers import sid_of

from epochfs.fuse.view import View
from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.status import read_stats
from epochfs.sidecar.store import INDEX_NAME, CatalogRow, Meta, Policy, Schedule, Store, StoreError
from epochfs.sidecar.store.listings import Part
from epochfs.sidecar.store.objects import object_name
from epochfs.sidecar.store.schema import SCHEMA_VERSION

LINK_ROOT = Path("/cache/objects-ro")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=60.0)
    yield s
    s.close()


def hold_write_lock(cache: Path) -> sqlite3.Connection:
    """Another connection in the middle of a long write (as the sampler's is, listing 10M keys)."""
    db = sqlite3.connect(cache / INDEX_NAME, isolation_level=None, timeout=1)
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO counters(name, value) VALUES('held', 1)")
    return db


def test_readers_answer_while_another_process_holds_the_write_lock(store: Store) -> None:
    admit(store, make_objects(3, 10))
    assert store.cut(0) == 0
    view = View(store=store, link_root=LINK_ROOT, read_debounce=0)
    writer = hold_write_lock(store.root)
    try:
        with Store(store.root) as reader:  # opening is a read
            assert reader.stats().samples == 3
        assert read_stats(cache=store.root, mount=None)["samples"] == 3  # epochfs status --cache
        assert store.cut_ready(0) and store.cut_ready(1)  # the supervisor's readiness
        assert [n for n, _ in view.listdir("/epoch-0/train")] == ["00000.bin", "00001.bin", "00002.bin"]
        assert view.readlink("/epoch-0/train/00001.bin").startswith(str(LINK_ROOT))
        assert b'"samples": 3' in view.read_file("/.epochfs/status.json")
        # Bookkeeping writes give up at once and are kept for later, never an error or a stall.
        assert view.flush_reads() == []
        assert not store.request_cut(1)  # "not yet": the lookup asks again
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert view.flush_reads() == [0], "the read noted while the index was busy is recorded now"
    assert store.request_cut(1)


def catalog_of(keys: list[str], *, seed: int = 1, size: int = 4) -> list[CatalogRow]:
    """Catalog rows for ``keys``, ranked in a shuffled order (as the keyed hash would)."""
    ranks = random.Random(seed).sample(range(10 * len(keys) + 10), len(keys))
    return [CatalogRow(k, sid_of(k), size, "v", rank=r) for k, r in zip(keys, ranks, strict=True)]


def changes_of_a_cut(tmp_path: Path, samples: int, *, schedule: bool = False) -> tuple[int, int]:
    with open_store(tmp_path / f"cache-{samples}-{schedule}") as store:
        objects = make_objects(samples, 4)
        if schedule:  # epoch 0's window: every key of the catalog
            store.configure(Policy(capacity=1 << 30, schedule=Schedule(initial=samples, growth=1.0)))
            store.add_catalog(catalog_of(sorted(objects)))
            store.finalize_catalog()
        admit(store, objects)
        db = store._ix.db
        before = db.total_changes
        assert store.cut(0) == 0
        rows = db.execute("SELECT COUNT(*) FROM epoch_samples").fetchone()[0]
        assert [f.path for f in store.epoch_files(0)] == sorted(make_objects(samples, 4))
        return db.total_changes - before, int(rows)


def test_a_cut_writes_the_same_rows_whatever_the_number_of_samples(tmp_path: Path) -> None:
    few, few_rows = changes_of_a_cut(tmp_path, 10)
    many, many_rows = changes_of_a_cut(tmp_path, 2000)
    assert few == many, f"a cut of 10 samples changed {few} rows, of 2000 samples {many}"
    assert few_rows == many_rows == 0


def test_a_schedule_mode_cut_writes_the_same_rows_whatever_the_number_of_samples(tmp_path: Path) -> None:
    """A window is recorded by its ends in the sampling order, not one row per sample."""
    few, few_rows = changes_of_a_cut(tmp_path, 10, schedule=True)
    many, many_rows = changes_of_a_cut(tmp_path, 2000, schedule=True)
    assert few == many, f"a cut of 10 samples changed {few} rows, of 2000 samples {many}"
    assert few_rows == many_rows == 0


def relist(store: Store, rows: list[CatalogRow]) -> None:
    """A complete relist that finds exactly ``rows`` (keys not among them are dropped)."""
    listings = store.listings()
    part = Part(0, "", "", None, after="", done=True)
    gen = listings.begin([part], "test")
    listings.commit_page(gen, part, rows, skips=0, clashes=[])
    listings.finish(gen)


class Windows:
    """A schedule-mode store beside what its epochs held when cut, computed as the store did before
    windows were bounds: the cached samples whose keys sat at the window's positions."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.expected: dict[int, set[str]] = {}

    def cached(self) -> set[str]:
        return {str(k) for (k,) in self.store._ix.query("SELECT key FROM samples")}

    def cut(self, n: int) -> None:
        lo, hi = self.store.schedule_window(n)
        keys = {str(k) for (k,) in self.store._ix.query(
            "SELECT key FROM catalog ORDER BY rank, key LIMIT ? OFFSET ?", (hi - lo, lo))}
        assert self.store.cut(n) == n
        self.expected[n] = keys & self.cached()

    def check(self) -> None:
        """Every live epoch lists what it was cut with (less what was dropped), counts it right,
        and every file it lists is there."""
        cached = self.cached()
        for info in self.store.epochs():
            want = sorted(self.expected[info.epoch] & cached)
            files = self.store.epoch_files(info.epoch)
            assert [f.path for f in files] == want, f"epoch {info.epoch}"
            assert (info.samples, info.bytes) == (len(files), sum(f.size for f in files))
            for f in files:
                assert (self.store.objects_dir / f.object_name).stat().st_size == f.size


def test_schedule_windows_keep_their_content_through_relists_evictions_and_drops(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", capacity=8000, headroom=0.5, keep_epochs=2)
    store.configure(Policy(capacity=8000, headroom=0.5, keep_epochs=2,
                           schedule=Schedule(initial=10, growth=1.5)))  # budget: 40 samples
    objects = make_objects(60, 100)
    keys = sorted(objects)
    rows = catalog_of(keys, size=100)
    store.add_catalog(rows)
    store.finalize_catalog()
    order = [r.key for r in sorted(rows, key=lambda r: (r.rank, r.key))]
    w = Windows(store)
    try:
        admit(store, {k: objects[k] for k in order[:14]})  # window 0 and some of window 1
        w.cut(0)
        assert len(w.expected[0]) == 10
        # A relist drops two cached keys inside window 1 (one of them in window 0), and finds one
        # ranked inside window 1's ends.
        gone = {order[2], order[11]}
        new_key = "train/new-in-window.bin"
        between = CatalogRow(new_key, sid_of(new_key), 100, "v", rank=next(
            r.rank + 1 for r in rows if r.key == order[5]))
        relist(store, [r for r in rows if r.key not in gone] + [between])
        order = [k for k in order if k not in gone]
        order.insert(order.index(next(r.key for r in rows if r.rank == between.rank - 1)) + 1, new_key)
        objects[new_key] = bytes(100)
        admit(store, {k: objects[k] for k in order[:15] if k not in w.cached()})
        w.cut(1)
        assert not w.expected[1] & gone and new_key in w.expected[1]
        w.check()  # epoch 0 still lists its sample of the dropped key
        assert store._ix.query("SELECT COUNT(*) FROM epoch_excluded WHERE epoch=1")[0][0] == len(gone)
        # A key found inside epoch 1's ends after the cut is admitted: it waits for epoch 2.
        late = "train/late.bin"
        relist(store, [r for r in rows if r.key not in gone] + [between, CatalogRow(
            late, sid_of(late), 100, "v", rank=between.rank + 0)])
        admit(store, {late: bytes(100)})
        w.check()
        # Eviction takes everything but the live epochs' samples (and those after the newest cut).
        store.evict(1 << 30)
        assert w.cached() == w.expected[0] | w.expected[1] | {late}
        w.check()
        # A sample admitted before its key reached the catalog has no rank: its window is cut
        # one row per sample, and lists it all the same.
        early = "train/early.bin"
        admit(store, {early: bytes(100)})
        relist(store, [r for r in rows if r.key not in gone] + [between, CatalogRow(
            early, sid_of(early), 100, "v", rank=-1)])
        order = [early, *order]
        admit(store, {k: objects[k] for k in order[:22] if k in objects and k not in w.cached()})
        w.cut(2)
        assert early in w.expected[2]
        assert store._ix.query("SELECT COUNT(*) FROM epoch_samples WHERE epoch=2")[0][0] > 0
        w.check()
        assert object_name(sid_of(early))
    finally:
        store.close()


def test_status_reads_running_totals_not_the_samples_table(store: Store) -> None:
    admit(store, make_objects(5, 7))
    store.cut(0)
    statements: list[str] = []
    store._ix.db.set_trace_callback(statements.append)
    try:
        stats = store.stats()
    finally:
        store._ix.db.set_trace_callback(None)
    assert (stats.samples, stats.cache_bytes) == (5, 35)
    scans = [s for s in statements if "FROM samples" in s or "from samples" in s]
    assert scans == [], scans


SCHEMA_2 = """
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE catalog (key TEXT PRIMARY KEY, path TEXT NOT NULL, sid TEXT NOT NULL, size INTEGER NOT NULL,
    version TEXT NOT NULL, rank INTEGER NOT NULL, pos INTEGER, skipped INTEGER NOT NULL DEFAULT 0);
CREATE INDEX catalog_rank ON catalog(rank);
CREATE INDEX catalog_pos ON catalog(pos);
CREATE TABLE samples (id INTEGER PRIMARY KEY AUTOINCREMENT, sid TEXT NOT NULL UNIQUE,
    key TEXT NOT NULL UNIQUE,
    path TEXT NOT NULL, size INTEGER NOT NULL, checksum TEXT NOT NULL, version TEXT NOT NULL,
    admitted_at REAL NOT NULL, digest TEXT NOT NULL DEFAULT '', verified TEXT NOT NULL DEFAULT '');
CREATE TABLE epochs (n INTEGER PRIMARY KEY, cut_at REAL NOT NULL, samples INTEGER NOT NULL,
    bytes INTEGER NOT NULL, new INTEGER NOT NULL, evicted INTEGER NOT NULL, max_sample INTEGER NOT NULL,
    last_read REAL NOT NULL, retired INTEGER NOT NULL DEFAULT 0);
CREATE TABLE epoch_samples (epoch INTEGER NOT NULL, sample INTEGER NOT NULL, PRIMARY KEY (epoch, sample))
    WITHOUT ROWID;
CREATE INDEX epoch_samples_sample ON epoch_samples(sample);
CREATE TABLE cut_requests (n INTEGER PRIMARY KEY, requested_at REAL NOT NULL);
INSERT INTO meta VALUES ('schema_version', '2');
INSERT INTO samples(sid, key, path, size, checksum, version, admitted_at)
    VALUES ('aa01', 'x/1', 'x/1', 5, 'md5:1', 'v', 0), ('bb02', 'x/2', 'x/2', 6, 'md5:2', 'v', 0),
           ('cc03', 'x/3', 'x/3', 7, 'md5:3', 'v', 0);
INSERT INTO epochs VALUES (0, 1.0, 2, 11, 2, 0, 2, 0, 0);
INSERT INTO epoch_samples VALUES (0, 1), (0, 2);
INSERT INTO counters VALUES ('cache_samples', 3), ('cache_bytes', 18);
"""


def test_a_schema_2_cache_opens_keeps_its_epochs_and_cuts_ranges(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    db = sqlite3.connect(cache / INDEX_NAME)
    db.executescript(SCHEMA_2)
    db.close()
    with pytest.raises(StoreError, match="schema version 2"):
        Store(cache)  # a reader (epochfs status) never migrates
    with Store(cache, create=True) as store:  # the sidecar's processes do
        assert [f.path for f in store.epoch_files(0)] == ["x/1", "x/2"]  # listed rows kept
        store.configure(Policy(capacity=1000))
        assert store.cut(1) == 1
        assert [f.path for f in store.epoch_files(1)] == ["x/1", "x/2", "x/3"]
        assert store.epoch_files(0)[1].object_name == "bb/bb02"
    with Store(cache) as reader:
        assert reader.meta(Meta.SCHEMA_VERSION) == str(SCHEMA_VERSION)
        assert not reader.stats().epochs[0]["epoch"]


def test_the_sampler_retires_epochs_beyond_keep_without_eviction_pressure(tmp_path: Path) -> None:
    """--keep-epochs 1 and a cache far from full: epochs 0-2 go once the newest is 3 (none was read,
    so none is in its in-use window), though nothing ever had to be evicted."""
    remote = MemoryRemote(objects_of(6, 64))
    settings = settings_for(tmp_path / "cache", "--keep-epochs", "1", "--capacity", "1Mi")
    with sampling(tmp_path / "cache", remote, settings) as (store, _):
        wait_until(lambda: store.stats().samples == 6, what="every object fetched")
        for n in range(4):
            assert store.cut(n) == n
        wait_until(lambda: [e.epoch for e in store.epochs()] == [3], what="epochs 0-2 retired")
        stats = store.stats()
        assert stats.evicted_total == 0 and stats.cache_bytes < stats.capacity_bytes // 100


def recovery_peak(tmp_path: Path, samples: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """Peak bytes Python allocates while ``recover()`` checks ``samples`` samples (and one orphan)."""
    from epochfs.sidecar.store import recovery

    monkeypatch.setattr(recovery, "CHUNK", 200, raising=False)
    with open_store(tmp_path / f"cache-{samples}") as store:
        for start in range(0, samples, 1000):
            admit(store, make_objects(min(1000, samples - start), 1, start=start))
        (store.objects_dir / "ff").mkdir(exist_ok=True)
        (store.objects_dir / "ff" / "ff00orphan").write_bytes(b"x")
        tracemalloc.start()
        try:
            report = store.recover()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert report.orphans_removed == 1 and report.repairs_marked == 0
        assert store.stats().samples == samples
        return peak


@pytest.mark.long
def test_recovery_memory_does_not_grow_with_the_samples(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    small = recovery_peak(tmp_path, 600, monkeypatch)
    large = recovery_peak(tmp_path, 6000, monkeypatch)
    assert large < 2 * small, f"peak {small} bytes at 600 samples, {large} at 6000"
