"""Schedule mode: the epochs table's "new" and "left out" are the set differences of the epochs'
members, as the members files show them.

Before: a cut counted "new" as the window's samples admitted after the previous cut and "left out"
as ``previous + new - samples``. A schedule window is neither: it takes samples fetched ahead of the
previous cut (the look-ahead into the next window) and its front is trimmed by the epoch budget, so
a reviewer saw epoch 2 with 0 left out while 3 samples of epoch 1 were not in it. Snapshot mode's
epochs are ranges of the admission order, where those formulas are exact: they stay.

A real store on disk, samples admitted as the sampler admits them, real cuts; the members read
back through the store's own epoch listing.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from store_helpers import epochs_table_against_members, listed_store, put, sampling_order

from epochfs.sidecar.store import Policy, Schedule, Store

SIZE = 10
"""Bytes of every object: a window's budget is a count of keys."""


def _store(tmp_path: Path, keys: list[str], policy: Policy) -> Store:
    return listed_store(tmp_path, keys, policy, SIZE)


def test_a_window_fetched_ahead_and_trimmed_at_the_front_counts_exact_new_and_left_out(
        tmp_path: Path) -> None:
    keys = [f"k/{i:02d}.bin" for i in range(20)]
    order = sampling_order(0, keys)
    # Budget 8 keys (capacity 200, headroom 0.6); windows of 5, 10 and 20 keys, trimmed to 8.
    policy = Policy(capacity=20 * SIZE, headroom=0.6, keep_epochs=5, min_samples=1,
                    schedule=Schedule(initial=5, growth=2.0))
    with _store(tmp_path, keys, policy) as store:
        for key in order[:10]:  # window 0 and the look-ahead into window 1, before cut 0
            put(store, key, SIZE)
        assert store.cut(0) == 0
        assert store.cut(1) == 1  # window [2, 10): its 5 new samples were all admitted before cut 0
        for key in order[10:]:
            put(store, key, SIZE)
        assert store.cut(2) == 2  # window [12, 20): nothing of epoch 1 in it
        table = epochs_table_against_members(store)
    assert table == [(1, 5, 5, 2, 2), (2, 8, 8, 8, 8)], table


@pytest.mark.parametrize("seed", range(6))
def test_random_schedules_show_the_members_difference(tmp_path: Path, seed: int) -> None:
    """Random admission orders (keys fetched ahead, behind, out of order) and schedules."""
    rng = random.Random(seed)
    keys = [f"d{i % 3}/{i:03d}.bin" for i in range(60)]
    order = sampling_order(0, keys)
    policy = Policy(capacity=60 * SIZE, headroom=rng.choice([0.5, 0.7]), keep_epochs=6, min_samples=1,
                    schedule=Schedule(initial=rng.randint(4, 10), growth=rng.choice([1.5, 2.0])))
    with _store(tmp_path, keys, policy) as store:
        admitted = 0
        for n in range(4):
            hi = min(len(order), policy.schedule.size(n) + rng.randint(0, 8))  # type: ignore[union-attr]
            ahead = order[admitted:hi]
            rng.shuffle(ahead)
            for key in ahead:
                put(store, key, SIZE)
            admitted = max(admitted, hi)
            assert store.cut(n, force=True) == n
        table = epochs_table_against_members(store)
    assert len(table) == 3
    assert all(shown == real and out == real_out for _, shown, real, out, real_out in table), table
