"""A schedule-mode window's facts measured ahead of its cut are the ones a scan at the cut finds
(issue 25: the cut read its window, 5 s at a million keys, in the trainer's wait).

The facts (:mod:`epochfs.sidecar.store.ahead`) are armed, measured in one snapshot and settled,
with samples admitted and evicted, keys added, dropped, resized and skipped, inside and outside
the window, between every two of those steps and after them. Then the epoch a cut records from them
(its ``epochs`` row, ``epoch_excluded`` and ``epoch_samples`` rows) is compared with the epoch a cut
records from :func:`windows.scan` on a copy of the same index, over random indexes (rank ties,
zero sizes, skipped keys, budgets that trim the front, keys a relist dropped, samples whose
recorded rank is not the catalog's). A change the triggers cannot follow must make the facts
unused, never wrong; a kill -9 at any statement of a process that measures, admits and relists
must leave them exact or unused.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from fuse_helpers import make_objects
from store_helpers import sid_of

from epochfs.sidecar.store import CatalogRow, Meta, Policy, Schedule, Store, ahead, epochs, schema, windows
from epochfs.sidecar.store.index import INDEX_NAME, Index

RANKS = 60


def random_index(rng: random.Random, db: sqlite3.Connection) -> None:
    """An index as listings, relists, admissions and evictions leave it (schema with its triggers)."""
    schema.create(db)
    db.execute("INSERT INTO meta(name, value) VALUES('listing_complete', '1')")
    for i in range(rng.randint(0, 120)):
        add_key(db, rng, f"k/{i:04d}-{rng.choice(['a', 'é', 'Z', '_'])}")
    keys = [str(k) for (k,) in db.execute("SELECT key FROM catalog")]
    for k in keys:
        if rng.random() < 0.7:
            admit(db, rng, k)
    for i in range(rng.randint(0, 5)):  # a relist dropped their keys
        admit(db, rng, f"gone/{i}", rank=rng.randrange(RANKS))
    db.commit()


def add_key(db: sqlite3.Connection, rng: random.Random, key: str) -> None:
    db.execute("INSERT OR IGNORE INTO catalog(key, path, sid, size, version, rank, skipped) "
               "VALUES(?,?,?,?,?,?,?)", (key, key, sid_of(key), rng.choice([0, 1, 5, 100]), "v",
                                         rng.randrange(RANKS), int(rng.random() < 0.1)))


def admit(db: sqlite3.Connection, rng: random.Random, key: str, rank: int | None = None) -> None:
    """A sample of ``key``: its catalog rank recorded, now and then another one (or NULL)."""
    row = db.execute("SELECT rank, size FROM catalog WHERE key=?", (key,)).fetchone()
    recorded: int | None = rank if row is None else int(row[0])
    if rng.random() < 0.03:
        recorded = rng.choice([None, int(recorded or 0) + 1])
    size = 3 if row is None else int(row[1]) + (7 if rng.random() < 0.1 else 0)
    db.execute("INSERT OR IGNORE INTO samples(sid, key, path, size, checksum, version, admitted_at, rank) "
               "VALUES(?,?,?,?,?,?,?,?)", (sid_of(key), key, key, size, "size-only", "v", 0.0, recorded))


def change(db: sqlite3.Connection, rng: random.Random) -> None:
    """One change a store sees: an admission, an eviction, a key listed, dropped, resized or
    skipped by a relist, or a relist that rewrites a key's row unchanged."""
    keys = [str(k) for (k,) in db.execute("SELECT key FROM catalog")]
    cached = [str(k) for (k,) in db.execute("SELECT key FROM samples")]
    kind = rng.choices(["admit", "evict", "list", "drop", "resize", "skip", "same", "stray"],
                       [8, 4, 1, 1, 1, 1, 2, 1])[0]
    if kind == "admit" and len(keys) > len(cached):
        admit(db, rng, rng.choice(sorted(set(keys) - set(cached))))
    elif kind == "evict" and cached:
        db.execute("DELETE FROM samples WHERE key=?", (rng.choice(cached),))
    elif kind == "list":
        add_key(db, rng, f"new/{rng.randrange(10**6)}")
    elif kind == "drop" and keys:
        db.execute("DELETE FROM catalog WHERE key=?", (rng.choice(keys),))
    elif kind == "resize" and keys:
        db.execute("UPDATE catalog SET size=size+3 WHERE key=?", (rng.choice(keys),))
    elif kind == "skip" and keys:
        db.execute("UPDATE catalog SET skipped=1-skipped WHERE key=?", (rng.choice(keys),))
    elif kind == "same" and keys:
        db.execute("UPDATE catalog SET size=size, version='v2', seen=seen+1 WHERE key=?", (rng.choice(keys),))
    elif kind == "stray":
        admit(db, rng, f"gone/x{rng.randrange(10**6)}", rank=rng.randrange(RANKS))


def changes(db: sqlite3.Connection, rng: random.Random) -> None:
    for _ in range(rng.choice([0, 0, 1, 3, 10])):
        change(db, rng)
        db.commit()


def settled(db: sqlite3.Connection, rng: random.Random | None, policy: Policy, n: int) -> bool:
    """Arm, measure and settle epoch n's facts with random changes (``rng``; None: none) before,
    between and after."""
    front: tuple[int, str] | None = None
    for _ in range(2):
        armed = ahead.arm(db, policy, n, front)
        db.commit()
        if armed is None:
            return False
        if rng is not None:
            changes(db, rng)
        db.execute("BEGIN")
        result = ahead.measure(db, policy, armed)
        db.execute("COMMIT")
        if rng is not None:
            changes(db, rng)
        if isinstance(result, ahead.Armed):
            front = result.front
            continue
        if result is None:
            return False
        done = ahead.settle(db, armed, result)
        db.commit()
        return done
    return False


def epoch_rows(db: sqlite3.Connection, n: int) -> tuple[object, ...]:
    """What a cut of epoch n recorded, but its time."""
    row = db.execute("SELECT samples, bytes, new, evicted, max_sample, first_sample, lo_rank, lo_key, "
                     "hi_rank, hi_key, listed, estimated FROM epochs WHERE n=?", (n,)).fetchone()
    excluded = sorted(db.execute("SELECT sample FROM epoch_excluded WHERE epoch=?", (n,)).fetchall())
    listed = sorted(db.execute("SELECT sample FROM epoch_samples WHERE epoch=?", (n,)).fetchall())
    return row, excluded, listed


def cut_both_ways(db: sqlite3.Connection, policy: Policy, n: int) -> tuple[object, object, bool]:
    """Epoch n cut from the facts kept ahead, and on a copy without them from the scan."""
    copy = sqlite3.connect(":memory:")
    db.backup(copy)
    copy.execute("DELETE FROM ahead")
    copy.commit()
    kept = ahead.fetch(db, policy, n)
    holds, span = epochs.condition_holds(db, policy, n)
    scanned = epochs.condition_holds(copy, policy, n)
    assert holds == scanned[0]
    if kept is not None:
        assert span in (kept, None)  # None: too few samples to look at the window
        assert dataclasses.replace(kept, bounded=None, newer=None) == windows.scan(db, policy, n)
    epochs._insert_epoch(db, policy, n, span)
    epochs._insert_epoch(copy, policy, n, scanned[1])
    return epoch_rows(db, n), epoch_rows(copy, n), kept is not None


def random_policy(rng: random.Random) -> Policy:
    return Policy(capacity=rng.choice([60, 400, 1 << 40, 1 << 40]), headroom=0.0, min_samples=1,
                  schedule=Schedule(initial=rng.randint(1, 60), growth=rng.choice([1.0, 1.5, 3.0])))


@pytest.mark.parametrize("seeds", [range(0, 50), range(50, 100)])
def test_a_cut_from_facts_kept_ahead_records_what_a_scan_records(seeds: range) -> None:
    """Four cuts on each of 50 random indexes; the comparison means something only if the facts
    were used, so most cuts must have come from them (the rest: a change inside the window, an
    empty window, a trimmed front measured again after a change)."""
    used = 0
    for seed in seeds:
        rng = random.Random(seed)
        db = sqlite3.connect(":memory:")
        random_index(rng, db)
        for n in range(4):
            policy = random_policy(rng)
            settled(db, rng, policy, n)
            changes(db, rng)
            mine, theirs, from_ahead = cut_both_ways(db, policy, n)
            assert mine == theirs, f"seed {seed}, epoch {n}"
            used += from_ahead
            assert db.execute("SELECT COUNT(*) FROM ahead WHERE n <= ?", (n,)).fetchone()[0] == 0
            db.commit()
    assert used >= len(seeds), used  # ~1.5 of 4 cuts on each index (3 phases of changes)


def twenty_keys() -> sqlite3.Connection:
    """An index in memory whose complete catalog holds ``k00``-``k19``, 10 bytes each, ranks 0-38."""
    db = sqlite3.connect(":memory:")
    schema.create(db)
    db.execute("INSERT INTO meta(name, value) VALUES('listing_complete', '1')")
    for i in range(20):
        db.execute("INSERT INTO catalog(key, path, sid, size, version, rank) VALUES(?,?,?,?,?,?)",
                   (f"k{i:02d}", f"k{i:02d}", sid_of(f"k{i:02d}"), 10, "v", 2 * i))
    return db


@pytest.mark.parametrize("what", ["resize", "list", "drop", "skip", "policy", "append"])
def test_a_change_the_triggers_cannot_follow_leaves_the_facts_unused(what: str) -> None:
    """A key resized, listed, dropped or skipped at or before the window's back (positions, the
    budget's trim, what is missing), a key listed after it when the window is the whole catalog
    (the window grows), or another policy: the facts are not used; the cut scans."""
    db = twenty_keys()
    size = 30 if what == "append" else 10  # 30: more than the catalog's 20 keys
    policy = Policy(capacity=1 << 40, headroom=0.0, schedule=Schedule(initial=size, growth=2.0))
    assert settled(db, None, policy, 0)
    assert ahead.fetch(db, policy, 0) is not None
    if what == "append":
        db.execute("INSERT INTO catalog(key, path, sid, size, version, rank) VALUES('z','z','t',1,'v',99)")
    elif what == "resize":
        db.execute("UPDATE catalog SET size=11 WHERE key='k09'")  # the back: the budget may trim now
    elif what == "list":
        db.execute("INSERT INTO catalog(key, path, sid, size, version, rank) VALUES('a','a','s',1,'v',17)")
    elif what == "drop":
        db.execute("DELETE FROM catalog WHERE key='k00'")
    elif what == "skip":
        db.execute("UPDATE catalog SET skipped=1 WHERE key='k03'")
    else:
        policy = dataclasses.replace(policy, capacity=95)
    db.commit()
    assert ahead.fetch(db, policy, 0) is None


def test_keys_after_the_back_leave_the_facts_in_use() -> None:
    db = twenty_keys()
    policy = Policy(capacity=1 << 40, headroom=0.0, schedule=Schedule(initial=10, growth=2.0))
    assert settled(db, None, policy, 0)
    db.execute("UPDATE catalog SET size=11 WHERE key='k10'")
    db.execute("INSERT INTO catalog(key, path, sid, size, version, rank) VALUES('z','z','t',1,'v',99)")
    db.execute("DELETE FROM catalog WHERE key='k15'")
    db.commit()
    kept = ahead.fetch(db, policy, 0)
    assert kept is not None and (kept.lo, kept.hi, kept.missing) == (0, 10, 10)


def schedule_store(root: Path, keys: int) -> tuple[Store, list[str]]:
    store = Store(root, create=True)
    store.configure(Policy(capacity=1 << 30, headroom=0.0, min_samples=1,
                           schedule=Schedule(initial=keys // 4, growth=2.0)))
    objects = sorted(make_objects(keys, 10))
    store.add_catalog(CatalogRow(k, sid_of(k), 10, "v", rank=i) for i, k in enumerate(objects))
    store.finalize_catalog()
    return store, objects


def admit_keys(store: Store, keys: list[str]) -> None:
    from fuse_helpers import admit as admit_objects
    admit_objects(store, {k: b"x" * 10 for k in keys})


def test_the_ask_reads_one_row_not_the_window(tmp_path: Path) -> None:
    """The sampler measures the next window after a cut (``process_cut_requests``); samples land;
    the cut on the ask then reads neither the window nor its samples, and records what a scan does."""
    store, keys = schedule_store(tmp_path / "cache", 400)
    try:
        admit_keys(store, keys[:100])
        assert store.cut(0) == 0
        store.process_cut_requests()  # the sampler's turn: measures window 1 ahead
        admit_keys(store, keys[100:200])  # window 1 fills after the measurement
        assert store.cut_ready(1)
        statements: list[str] = []
        trace: Callable[[str], None] = statements.append
        store._ix.db.set_trace_callback(trace)
        try:
            assert store.cut(1) == 1
        finally:
            store._ix.db.set_trace_callback(None)
        reads = [s for s in statements if "JOIN samples" in s or "ORDER BY rank" in s or "FROM catalog" in s]
        assert reads == [], reads
        [_, info] = store.epochs()
        assert (info.samples, info.bytes, info.new) == (200, 2000, 100)
        assert [f.path for f in store.epoch_files(1)] == keys[:200]
    finally:
        store.close()


def _killed_at(root: Path, statement: int, seed: int) -> None:
    """A sampler-like process, forked: measures the next window, admits, evicts and relists; killed
    (SIGKILL) when it is about to run its ``statement``-th statement."""
    store = Store(root)
    count = 0

    def trace(_: str) -> None:
        nonlocal count
        count += 1
        if count == statement:
            os.kill(os.getpid(), signal.SIGKILL)

    store._ix.db.set_trace_callback(trace)
    rng = random.Random(seed)
    keys = [str(k) for (k,) in store._ix.query("SELECT key FROM catalog ORDER BY rank")]
    for round_ in range(50):
        store.process_cut_requests()
        cached = {str(k) for (k,) in store._ix.query("SELECT key FROM samples")}
        admit_keys(store, [k for k in keys if k not in cached][:rng.randint(1, 30)])
        with store._ix.write() as db:
            change(db, rng)
        if round_ % 7 == 6:
            store.cut()
    os._exit(0)


@pytest.mark.parametrize("statement", [3, 20, 31, 33, 36, 70, 160, 450, 1500, 2500])
def test_a_kill_9_at_any_statement_leaves_the_facts_exact_or_unused(tmp_path: Path, statement: int) -> None:
    store, keys = schedule_store(tmp_path / "cache", 200)
    admit_keys(store, keys[:50])
    assert store.cut(0) == 0
    store.close()
    pid = os.fork()
    if pid == 0:
        try:
            _killed_at(tmp_path / "cache", statement, statement)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    with Store(tmp_path / "cache") as reopened:
        policy = reopened.policy()
    ix = Index(tmp_path / "cache" / INDEX_NAME)
    try:
        n = epochs.next_number(ix)
    finally:
        ix.close()
    db = sqlite3.connect(tmp_path / "cache" / INDEX_NAME)  # recovered as any opener finds it
    try:
        kept = ahead.fetch(db, policy, n)
        if kept is not None:
            assert dataclasses.replace(kept, bounded=None, newer=None) == windows.scan(db, policy, n)
        mine, theirs, _ = cut_both_ways(db, policy, n)
        assert mine == theirs
    finally:
        db.close()


def test_a_schema_6_index_gets_the_table_and_its_triggers(tmp_path: Path) -> None:
    """An index of the last schema without them opens as schema 7 with them, and they follow."""
    store, keys = schedule_store(tmp_path / "cache", 40)
    store.close()
    db = sqlite3.connect(tmp_path / "cache" / INDEX_NAME)
    triggers = db.execute("SELECT name FROM sqlite_master WHERE type='trigger' AND name LIKE 'ahead%'")
    for (name,) in triggers.fetchall():
        db.execute(f"DROP TRIGGER {name}")
    db.execute("DROP TABLE ahead")
    db.execute("UPDATE meta SET value='6' WHERE name='schema_version'")
    db.commit()
    db.close()
    with Store(tmp_path / "cache", create=True) as store:  # the sampler's start migrates
        assert store.meta(Meta.SCHEMA_VERSION) == str(schema.SCHEMA_VERSION) == "7"
        store.process_cut_requests()  # measures window 0 ahead
        admit_keys(store, keys[:10])
        [(cached, missing)] = store._ix.query("SELECT cached, missing FROM ahead WHERE n=0 AND valid")
        assert (cached, missing) == (10, 0)
        assert store.cut(0) == 0
