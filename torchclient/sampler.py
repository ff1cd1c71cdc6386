"""``EpochSampler``: DistributedSampler's exact semantics, with rank and world found without ceremony.

Same permutation on every rank for a given (seed, epoch) (``torch.randperm`` seeded with
``seed + epoch``); then, without ``drop_last``, the list is padded by repeating its head until it
divides evenly, and with ``drop_last`` its tail is cut; rank r takes every world-th index from r. So
each rank gets the same number of indices, and without padding every index appears exactly once
across ranks. Unlike DistributedSampler it needs no initialised process group: rank and world come
from torch.distributed when initialised, else from the launcher's environment (RANK/WORLD_SIZE...).

Which world: by default the ranks of this node (``partition="node"``), as ``EpochLoader`` does, since
each node's sidecar samples its own part of the keys (``--shard-index``) and a node's epoch holds only
that part: split over the job's world, each node's ranks would read 1/nodes of their own files and
never the rest. ``partition="global"`` (DistributedSampler's world) is for a dataset that is the
same on every node: one node, or a schedule-mode job whose nodes all sample the same keys.
:func:`rank_shards` is the same split for a shard list handed to another library (WebDataset).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence, Sized
from typing import TYPE_CHECKING, TypeVar

import torch
from torch.utils.data import Sampler

if TYPE_CHECKING:
    from .epochplan import Partition

T = TypeVar("T")


def check_int(name: str, value: object, minimum: int) -> int:
    """``value``, refused with a ValueError that names the argument unless it is an int (not a
    bool) of at least ``minimum``: the sampler's and the array loader's arguments, checked alike."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


MAX_SEED = 2**63 - 1
"""The largest seed: ``seed + epoch`` seeds torch's generator, which takes at most 2**64 - 1."""


def check_seed(seed: object) -> int:
    """``seed``, refused with a ValueError naming it unless an int in [0, :data:`MAX_SEED`]: a
    larger one was taken and failed at the first shuffle ("Overflow when unpacking long long")."""
    value = check_int("seed", seed, 0)
    if value > MAX_SEED:
        raise ValueError(f"seed must be at most 2**63 - 1, got {value}")
    return value


def check_split(num_replicas: object, rank: object) -> tuple[int, int]:
    """(num_replicas, rank), refused with a ValueError naming them unless rank is below a world of
    at least one: a rank past the world read another rank's indices, a negative one the tail's."""
    world, me = check_int("num_replicas", num_replicas, 1), check_int("rank", rank, 0)
    if me >= world:
        raise ValueError(f"rank must be below num_replicas: rank={me}, num_replicas={world}")
    return world, me


def epoch_indices(length: int, *, num_replicas: int, rank: int, shuffle: bool, seed: int, epoch: int,
                  drop_last: bool) -> list[int]:
    """The indices rank ``rank`` of ``num_replicas`` reads in ``epoch`` (the sampler's pure function);
    arguments out of range are refused (:func:`check_split`, :func:`check_seed`)."""
    check_int("length", length, 0)
    check_split(num_replicas, rank)
    check_seed(seed)
    check_int("epoch", epoch, 0)
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

    ``num_replicas``/``rank`` default to the ranks of this node (``partition="node"``: LOCAL_RANK/
    LOCAL_WORLD_SIZE and friends, as ``EpochLoader``), or to the job's world with ``partition="global"``
    (torch.distributed, else RANK/WORLD_SIZE and friends); else a world of one. On one node both are
    the same; on several, each node's epoch holds other files, which only the node's ranks can read.
    """

    def __init__(self, dataset: Sized, *, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False,
                 partition: Partition = "node") -> None:
        from .epochplan import resolve_split  # epochplan imports this module

        if not hasattr(dataset, "__len__"):
            raise TypeError(f"EpochSampler needs a dataset with a length, got {type(dataset).__name__}")
        if num_replicas is None or rank is None:
            found_replicas, found_rank, _ = resolve_split(partition, num_replicas, None, who="EpochSampler")
            num_replicas = found_replicas if num_replicas is None else num_replicas
            rank = found_rank if rank is None else rank
        self.partition = partition
        self.num_replicas, self.rank = check_split(num_replicas, rank)
        self.seed = check_seed(seed)
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


def rank_shards(shards: Sequence[T], *, partition: Partition = "node") -> list[T]:
    """This rank's part of ``shards`` (one epoch's shard files, in the manifest's order): every
    ``local_world_size``-th from ``local_rank`` with ``partition="node"`` (the default), every
    ``world_size``-th from ``rank`` with ``"global"``.

    Why: a library's own rank split (WebDataset's ``split_by_node``) splits over the job's world, but
    each node's epoch holds only that node's part of the keys, so on N nodes it would leave
    (N-1)/N of every node's shards unread. Give the result to the library with its own split off
    (``nodesplitter=None``). The ranks are found as ``EpochSampler``'s (with its warning when several
    ranks run without node-local variables).
    """
    from .epochplan import resolve_split  # epochplan imports this module

    num_replicas, rank, _ = resolve_split(partition, None, None, who="rank_shards")
    return list(shards[rank::num_replicas])
