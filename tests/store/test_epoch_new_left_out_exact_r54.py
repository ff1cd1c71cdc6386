"""The epochs table's "new" and "left out" are the set differences of an epoch and the one before
(docs/metrics.md), also where an epoch starts below the previous one in the admission order.

Before: a snapshot-mode cut counted "new" as the ids at or above ``max(first, previous max + 1)``,
which assumes the epoch starts at or above the previous one's first sample. Two ways break it: the
epoch budget grows between cuts (a cut at 13 samples held 12, the next at 14 held all 14: "new 1"
where 2 were), and a snapshot cut after schedule-mode windows, whose ``max_sample`` counts samples
fetched ahead of the window (status showed "new 7, left out 0" for two epochs sharing no file).

A real store on disk, samples admitted as the sampler admits them, real cuts; the members read
back through the store's own epoch listing.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
from store_helpers import epochs_table_against_members, listed_store, put, sampling_order

from epochfs.sidecar.store import Policy, Schedule, Store

SIZE = 10
"""Bytes of every object: a budget is a count of samples."""


def _store(tmp_path: Path, keys: list[str], policy: Policy) -> Store:
    return listed_store(tmp_path, keys, policy, SIZE)


def test_an_epoch_whose_budget_grew_starts_below_the_previous_one(tmp_path: Path) -> None:
    keys = [f"k/{i:02d}.bin" for i in range(20)]
    policy = Policy(capacity=16 * SIZE, headroom=0.25, keep_epochs=5, min_samples=1)  # budget 12
    with _store(tmp_path, keys, policy) as store:
        order = sampling_order(0, keys)
        for key in order[:13]:
            put(store, key, SIZE)
        assert store.cut(0) == 0  # the newest 12 of 13
        store.configure(replace(policy, headroom=0.0))  # budget 16: the next epoch holds all
        put(store, order[13], SIZE)
        assert store.cut(1) == 1  # 14 samples: the one epoch 0 left out and the one admitted since
        table = epochs_table_against_members(store)
    assert table == [(1, 2, 2, 0, 0)], table


def test_a_snapshot_cut_after_a_window_fetched_ahead_counts_the_members(tmp_path: Path) -> None:
    keys = [f"k/{i:02d}.bin" for i in range(20)]
    schedule = Policy(capacity=20 * SIZE, headroom=0.4, keep_epochs=5, min_samples=1,
                      schedule=Schedule(initial=4, growth=1.0))  # windows of 4, budget 12
    with _store(tmp_path, keys, schedule) as store:
        order = sampling_order(0, keys)
        for key in order[:10]:  # window 0 and 6 samples fetched ahead of it
            put(store, key, SIZE)
        assert store.cut(0) == 0
        for key in order[10:16]:
            put(store, key, SIZE)
        store.configure(replace(schedule, schedule=None))  # restarted in snapshot mode
        assert store.cut(1) == 1  # the newest 12: none of window 0's 4
        table = epochs_table_against_members(store)
    assert table == [(1, 12, 12, 4, 4)], table


@pytest.mark.parametrize("seed", range(8))
def test_random_budgets_and_mode_switches_show_the_members_difference(tmp_path: Path, seed: int) -> None:
    """Random epoch budgets between cuts, in both modes and switching between them."""
    rng = random.Random(seed)
    keys = [f"d{i % 3}/{i:03d}.bin" for i in range(60)]
    order = sampling_order(0, keys)
    base = Policy(capacity=60 * SIZE, headroom=0.5, keep_epochs=8, min_samples=1)
    with _store(tmp_path, keys, base) as store:
        admitted = 0
        for n in range(7):
            schedule = Schedule(initial=rng.randint(3, 12), growth=rng.choice([1.0, 1.5])) \
                if rng.random() < 0.4 else None
            store.configure(replace(base, headroom=rng.choice([0.0, 0.3, 0.5, 0.7]), schedule=schedule))
            more = rng.randint(0 if admitted else 1, 8)
            for key in order[admitted:admitted + more]:
                put(store, key, SIZE)
            admitted += more
            assert store.cut(n, force=True) == n
        table = epochs_table_against_members(store)
    assert table and all(shown == truth and out == out_truth
                         for _, shown, truth, out, out_truth in table), table
