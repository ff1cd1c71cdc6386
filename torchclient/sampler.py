"""``EpochSampler``: DistributedSampler's exact semantics, with rank and world found without ceremony.

Same permutation on every rank for a given (seed, epoch) (``torch.randperm`` seeded with
``seed + epoch``); then, without ``drop_last``, the list is padded by repeating its head until it
divides evenly, and with ``drop_last`` its tail is cut; rank r takes every world-th index from r. So
each rank gets the same number of indices, and without padding every index appears exactly once
across ranks. Unlike DistributedSampler it needs no initialised process group: rank and world come
from torch.distributed when initialised, else from the launcher's environment (RANK/WORLD_SIZE...).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sized

import torch
from torch.utils.data import Sampler

from .world import World


def check_int(name: str, value: object, minimum: int) -> int:
    """``value``, refused with a ValueError that names the argument unless it is an int (not a
    bool) of at least ``minimum``: the sampler's and the array loader's arguments, checked alike."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def epoch_indices(length: int, *, num_replicas: int, rank: int, shuffle: bool, seed: int, epoch: int,
                  drop_last: bool) -> list[int]:
    """The indices rank ``rank`` of ``num_replicas`` reads in ``epoch`` (the sampler's pure function)."""
    if drop_last and length % num_replicas:
        num_samples = math.ceil((length - num_replicas) / num_replicas)
    else:
        num_samples = math.ceil(length / num_replicas)
    total = num_samples * num_replicas
    if shuffle:
        generator = torch.Generator()
        generator.manual_seed(seed + epoch)
        indices: list[int] = torch.randperm(length, generator=generator).tolist()
    else:
        indices = list(range(length))
    if not drop_last:
        padding = total - len(indices)
        if padding and indices:
            indices += (indices * math.ceil(padding / len(indices)))[:padding]
    else:
        indices = indices[:total]
    return indices[rank:total:num_replicas]


class EpochSampler(Sampler[int]):
    """Split a dataset over ranks like ``DistributedSampler``; call ``set_epoch(n)`` to reshuffle.

    ``num_replicas``/``rank`` default to the global world (torch.distributed, else RANK/WORLD_SIZE and
    friends, else a world of one).
    """

    def __init__(self, dataset: Sized, *, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
        if not hasattr(dataset, "__len__"):
            raise TypeError(f"EpochSampler needs a dataset with a length, got {type(dataset).__name__}")
        if num_replicas is None or rank is None:
            world = World.detect()
            num_replicas = world.size if num_replicas is None else num_replicas
            rank = world.rank if rank is None else rank
        self.num_replicas = check_int("num_replicas", num_replicas, 1)
        self.rank = check_int("rank", rank, 0)
        if self.rank >= self.num_replicas:
            raise ValueError(f"rank must be below num_replicas: rank={rank}, num_replicas={num_replicas}")
        self.seed = check_int("seed", seed, 0)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.dataset = dataset
        self.epoch = 0

    @property
    def num_samples(self) -> int:
        length = len(self.dataset)
        if self.drop_last and length % self.num_replicas:
            return math.ceil((length - self.num_replicas) / self.num_replicas)
        return math.ceil(length / self.num_replicas)

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s permutation (the same on every rank)."""
        self.epoch = check_int("epoch", epoch, 0)

    def __iter__(self) -> Iterator[int]:
        return iter(epoch_indices(len(self.dataset), num_replicas=self.num_replicas, rank=self.rank,
                                  shuffle=self.shuffle, seed=self.seed, epoch=self.epoch,
                                  drop_last=self.drop_last))

    def __len__(self) -> int:
        return self.num_samples
