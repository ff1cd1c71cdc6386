"""A snapshot-mode cut's extent (the newest samples within the epoch budget) from the running totals.

The cut runs in the index's write transaction (lookups and admissions wait on it); it summed a window
over every sample: 2.8 s for a lookup cut at 1M cached samples. The extent must be the same set as
that query gave, and a cut of a cache that fits the budget must not step over the samples at all
(counted in SQLite virtual-machine steps, not timed).
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from epochfs.sidecar.store import INDEX_NAME, Policy, Store, memberfiles
from epochfs.sidecar.store.snapshot import newest_within

WINDOW_SUM = ("SELECT MIN(id) FROM (SELECT id, SUM(size) OVER (ORDER BY id DESC) AS cum FROM samples) "
              "WHERE cum <= ?")


def _reference(db: sqlite3.Connection, budget: int, max_id: int) -> tuple[int, int, int]:
    """What the cut computed before: the window sum, then a count of the range."""
    low = db.execute(WINDOW_SUM, (budget,)).fetchone()[0]
    first = max_id + 1 if low is None else int(low)
    samples, nbytes = db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM samples WHERE id >= ?",
                                 (first,)).fetchone()
    return first, int(samples), int(nbytes)


@pytest.mark.parametrize("seed", range(40))
def test_the_extent_is_the_set_the_window_sum_gave(seed: int) -> None:
    rng = random.Random(seed)
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE samples (id INTEGER PRIMARY KEY, size INTEGER NOT NULL)")
    db.execute("CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)")
    count = rng.choice([0, 1, 2, 7, 300, 5000])
    db.executemany("INSERT INTO samples VALUES (?, ?)",
                   [(i, rng.choice([0, 1, rng.randrange(1, 10_000)])) for i in range(1, count + 1)])
    holes = rng.sample(range(1, count + 1), k=count // 5) if count else []  # evicted, scrubbed
    db.executemany("DELETE FROM samples WHERE id=?", [(i,) for i in holes])
    samples, nbytes = db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM samples").fetchone()
    db.executemany("INSERT INTO counters VALUES (?, ?)",
                   [("cache_samples", samples), ("cache_bytes", nbytes)])
    max_id = count + rng.randrange(0, 3)
    for budget in {1, 2, 9_999, nbytes // 3 + 1, nbytes // 2 + 1, max(1, nbytes - 1), max(1, nbytes),
                   nbytes + 1, rng.randrange(1, nbytes + 2)}:
        assert newest_within(db, budget, max_id) == _reference(db, budget, max_id), (count, budget)


@pytest.fixture(autouse=True)
def _no_members_file_at_the_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps counted are the cut's own index work: the members file a cut writes for an epoch of
    up to ``memberfiles.AT_CUT`` members (a line per member, by design bounded by that limit) is
    left to the keeper here, as it is for an epoch above the limit."""
    monkeypatch.setattr(memberfiles, "AT_CUT", 0)


def _store_of(cache: Path, samples: int, *, capacity: int) -> Store:
    """A store of ``samples`` rows of 100 bytes (index rows only, totals recounted)."""
    store = Store(cache, create=True)
    store.configure(Policy(capacity=capacity, keep_epochs=2, min_samples=1, in_use_seconds=600.0))
    store.close()
    db = sqlite3.connect(cache / INDEX_NAME)
    with db:
        db.executemany("INSERT INTO samples(sid, key, path, size, checksum, version, admitted_at) "
                       "VALUES(?,?,?,100,'md5:0','v',0)",
                       ((f"{i:032x}", f"k/{i}", f"k/{i}") for i in range(samples)))
        db.execute("INSERT OR REPLACE INTO counters VALUES ('cache_samples', ?), ('cache_bytes', ?)",
                   (samples, 100 * samples))
    db.close()
    return Store(cache)


def _cut_steps(store: Store) -> int:
    """SQLite virtual-machine steps (in thousands) that one cut makes on the store's connection."""
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    db = store._ix.db  # the connection the cut writes through
    db.set_progress_handler(tick, 1000)
    try:
        assert store.cut(force=True) is not None
    finally:
        db.set_progress_handler(None, 0)
    return steps[0]


def test_a_cut_of_a_cache_within_the_budget_does_not_step_over_its_samples(tmp_path: Path) -> None:
    small = _store_of(tmp_path / "small", 1_000, capacity=1 << 40)
    large = _store_of(tmp_path / "large", 50_000, capacity=1 << 40)
    try:
        few, many = _cut_steps(small), _cut_steps(large)
        # The window sum stepped over every sample: ~50x the small store's steps at 50x the samples.
        assert many <= few + 5, (few, many)
        # A later cut counts the samples new since the last one: with two lower bounds on the id
        # SQLite ranged on one and stepped over every sample (0.15 s a cut at 1M).
        few, many = _cut_steps(small), _cut_steps(large)
        assert many <= few + 5, (few, many)
        assert large.stats().epochs[-1]["samples"] == 50_000
        assert [f.path for f in large.epoch_files(0)][:2] == ["k/0", "k/1"]
    finally:
        small.close()
        large.close()


def test_a_full_cache_steps_over_only_the_samples_below_the_epoch(tmp_path: Path) -> None:
    # 40,000 samples of 100 bytes against a budget of 3.6 MB (capacity 4.8 MB, 25% headroom): the
    # epoch is the newest 36,000 samples, and the cut steps over the 4,000 below it, not 40,000.
    store = _store_of(tmp_path / "full", 40_000, capacity=4_800_000)
    try:
        assert store.policy().epoch_budget == 3_600_000
        steps = _cut_steps(store)
        assert store.stats().epochs[-1]["samples"] == 36_000
        assert {f.path for f in store.epoch_files(0)} == {f"k/{i}" for i in range(4_000, 40_000)}
        reference = _store_of(tmp_path / "fits", 4_000, capacity=1 << 40)
        try:
            walk = _cut_steps(reference) + 4_000 * 10 // 1000  # a cut plus ~10 steps a row stepped over
        finally:
            reference.close()
        assert steps <= 2 * walk, (steps, walk)
    finally:
        store.close()
