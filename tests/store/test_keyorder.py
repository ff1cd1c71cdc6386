"""The sampling order of keys and the shards: pure functions with the properties the design relies on."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_helpers import sampling_order as order

from epochfs.sidecar.keyorder import in_shard, rank, shard_of

keys_st = st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=80, unique=True)
seed_st = st.integers(min_value=-(2**70), max_value=2**70)


@given(seed_st, keys_st)
def test_order_is_deterministic_for_a_seed(seed: int, keys: list[str]) -> None:
    assert order(seed, keys) == order(seed, list(reversed(keys)))
    assert [rank(seed, k) for k in keys] == [rank(seed, k) for k in keys]


@given(seed_st, keys_st, keys_st)
def test_order_is_stable_when_keys_are_added(seed: int, keys: list[str], more: list[str]) -> None:
    before = order(seed, keys)
    after = order(seed, keys + [k for k in more if k not in keys])
    assert [k for k in after if k in set(keys)] == before


@given(seed_st, st.text(min_size=1, max_size=40))
def test_rank_is_a_signed_64_bit_integer(seed: int, key: str) -> None:
    r = rank(seed, key)
    assert -(2**63) <= r < 2**63


def test_different_seeds_give_different_orders() -> None:
    keys = [f"k{i}" for i in range(200)]
    assert order(1, keys) != order(2, keys)
    assert order(1, keys) != sorted(keys)


@given(keys_st, st.integers(min_value=1, max_value=17))
def test_shards_are_disjoint_and_cover(keys: list[str], count: int) -> None:
    owners = [[i for i in range(count) if in_shard(k, i, count)] for k in keys]
    assert all(len(o) == 1 for o in owners)
    assert all(o[0] == shard_of(k, count) for k, o in zip(keys, owners, strict=True))


@given(st.text(min_size=1), st.integers(min_value=1, max_value=64), seed_st, seed_st)
def test_shard_does_not_depend_on_the_seed(key: str, count: int, s1: int, s2: int) -> None:
    # shard_of takes no seed at all; the order inside a shard still changes with it.
    assert 0 <= shard_of(key, count) < count


@settings(max_examples=15, deadline=None)
@given(st.integers(min_value=2, max_value=16), st.text(max_size=8))
def test_shards_are_balanced(count: int, prefix: str) -> None:
    n = 40_000
    sizes = collections.Counter(shard_of(f"{prefix}train/{i:07d}.npz", count) for i in range(n))
    expected = n / count
    # Five standard deviations of a binomial count: a few percent at these sizes.
    tolerance = 5 * (expected * (1 - 1 / count)) ** 0.5
    assert max(abs(sizes[i] - expected) for i in range(count)) <= tolerance
    assert tolerance / expected < 0.1


def test_bad_shard_arguments() -> None:
    with pytest.raises(ValueError):
        shard_of("k", 0)
    with pytest.raises(ValueError):
        in_shard("k", 3, 3)
