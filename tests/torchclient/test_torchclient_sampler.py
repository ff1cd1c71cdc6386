"""EpochSampler: DistributedSampler's semantics, checked as properties; World from env and dist."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler

from epochfs.torchclient import EpochSampler, World


class _Sized:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def _all_ranks(n: int, world: int, *, seed: int, epoch: int, drop_last: bool, shuffle: bool = True):
    out = []
    for rank in range(world):
        sampler = EpochSampler(_Sized(n), num_replicas=world, rank=rank, seed=seed, drop_last=drop_last,
                               shuffle=shuffle)
        sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out


@settings(max_examples=150, deadline=None)
@given(n=st.integers(0, 300), world=st.integers(1, 9), seed=st.integers(0, 2**31), epoch=st.integers(0, 50),
       drop_last=st.booleans(), shuffle=st.booleans())
def test_same_indices_as_torch_distributed_sampler(n, world, seed, epoch, drop_last, shuffle):
    ours = _all_ranks(n, world, seed=seed, epoch=epoch, drop_last=drop_last, shuffle=shuffle)
    for rank in range(world):
        reference = DistributedSampler(_Sized(n), num_replicas=world, rank=rank, shuffle=shuffle,  # type: ignore[arg-type]
                                       seed=seed, drop_last=drop_last)
        reference.set_epoch(epoch)
        assert ours[rank] == list(reference)
        sized = EpochSampler(_Sized(n), num_replicas=world, rank=rank, drop_last=drop_last)
        assert len(sized) == len(reference)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 300), world=st.integers(1, 9), seed=st.integers(0, 2**31), epoch=st.integers(0, 50),
       drop_last=st.booleans())
def test_split_covers_pads_and_truncates(n, world, seed, epoch, drop_last):
    ranks = _all_ranks(n, world, seed=seed, epoch=epoch, drop_last=drop_last)
    lengths = {len(r) for r in ranks}
    assert len(lengths) == 1, "every rank gets the same number of indices"
    counts = Counter(i for r in ranks for i in r)
    assert all(0 <= i < n for i in counts)
    if drop_last:
        assert max(counts.values(), default=0) <= 1 and len(counts) == (n // world) * world
    else:
        assert set(counts) == set(range(n)), "every index is read"
        repeats = sum(counts.values()) - n
        assert (repeats == lengths.pop() * world - n and repeats < world) or n < world
        if n % world == 0:
            assert max(counts.values()) == 1, "no padding: each index exactly once"


@settings(max_examples=80, deadline=None)
@given(n=st.integers(12, 300), world=st.integers(1, 4), seed=st.integers(0, 2**31), epoch=st.integers(0, 50))
def test_new_order_every_epoch_same_on_every_rank(n, world, seed, epoch):
    this = _all_ranks(n, world, seed=seed, epoch=epoch, drop_last=False)
    again = _all_ranks(n, world, seed=seed, epoch=epoch, drop_last=False)
    following = _all_ranks(n, world, seed=seed, epoch=epoch + 1, drop_last=False)
    assert this == again, "a given (seed, epoch) gives one permutation, whichever process asks"
    assert this != following, "set_epoch reshuffles"


def test_rank_and_world_from_env_and_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert World.detect() == World(0, 1, 0, 1)
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert World.detect() == World(rank=5, size=8, local_rank=1, local_size=4)
    sampler = EpochSampler(_Sized(10))  # this node's ranks by default, as EpochLoader
    assert (sampler.rank, sampler.num_replicas) == (1, 4)
    sampler = EpochSampler(_Sized(10), partition="global")
    assert (sampler.rank, sampler.num_replicas) == (5, 8)
    assert World.detect({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1",
                         "SLURM_NTASKS_PER_NODE": "2(x2)"}) == World(3, 4, 1, 2)
    with pytest.raises(ValueError, match="rank must be"):
        World.detect({"RANK": "4", "WORLD_SIZE": "4"})
    with pytest.raises(ValueError, match="not a non-negative integer"):
        World.detect({"RANK": "x", "WORLD_SIZE": "4"})
    with pytest.raises(ValueError, match="rank must be below num_replicas"):
        EpochSampler(_Sized(3), num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="seed must be"):
        EpochSampler(_Sized(3), num_replicas=1, rank=0, seed=-1)
    with pytest.raises(TypeError, match="needs a dataset with a length"):
        EpochSampler(object(), num_replicas=1, rank=0)  # type: ignore[arg-type]
