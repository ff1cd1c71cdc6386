"""One epoch's batches for one rank: the split, the padding and the equal batch counts, as pure functions.

Why a module of its own: :class:`~epochfs.torchclient.loader.EpochLoader` and
:class:`~epochfs.torchclient.arrayloader.ArrayLoader` must cut an epoch into exactly the same batches
(``EpochSampler`` order and rank split, the same balancing rule across ranks), and a pure function
can be checked against ``EpochSampler`` over thousands of (files, world, rank, seed, epoch, batch)
combinations in a test without starting a process group: the only collective step, the all_reduce
of the batch count, is passed in as ``reduce``.

The rule (docs/torchclient.md, "Equal batch counts"): the epoch's files are shuffled with
``seed + epoch`` and split over ``num_replicas`` ranks with ``DistributedSampler`` semantics (padding
by repeating the head of the permutation); this rank's batch count is then made equal to the
world's largest (``balance="pad"``: this rank's samples are repeated, cycling from the start of its
list) or smallest (``"truncate"``: its last batches are dropped); ``"none"`` leaves it alone.
``drop_last`` drops a last partial batch.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from .sampler import epoch_indices
from .world import World, dist_rank_and_size, has_local_env

if TYPE_CHECKING:
    import torch

Partition = Literal["node", "global"]
Balance = Literal["pad", "truncate", "none"]
ReduceOp = Literal["max", "min"]
Reduce = Callable[[int, ReduceOp], int]


def count_batches(samples: int, batch_size: int, drop_last: bool) -> int:
    """Batches ``samples`` make: a last partial batch counts unless ``drop_last``."""
    return samples // batch_size if drop_last else math.ceil(samples / batch_size)


def distributed() -> tuple[int, int] | None:
    """(rank, world size) when torch.distributed is initialised with more than one rank, else None:
    whether an epoch's start is collective at all."""
    world = dist_rank_and_size()
    return None if world is None or world[1] == 1 else world


def reduce_device() -> torch.device:
    """The device the epoch collectives reduce on (torch.distributed initialised): this rank's GPU
    under NCCL, which reduces only tensors there, else the CPU. Its backend's timeout is the one a
    rank waiting in them is held to (:mod:`.groupwait`)."""
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_max(values: list[int]) -> list[int]:
    """``values`` reduced elementwise with MAX over the world (collective: every rank calls it, in the
    same order). One MAX serves a MIN too, negated, so every collective of an epoch is this one."""
    import torch
    import torch.distributed as dist

    tensor = torch.tensor(values, dtype=torch.int64, device=reduce_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [int(v) for v in tensor.tolist()]


def all_reduce_int(value: int, op: ReduceOp) -> int:
    """``value`` reduced over the world when torch.distributed is initialised (else ``value``).

    Collective: every rank must call it, once per epoch, in the same order.
    """
    if distributed() is None:
        return value
    sign = 1 if op == "max" else -1
    return sign * all_reduce_max([sign * value])[0]


def plan_batches(length: int, *, epoch: int, batch_size: int, num_replicas: int, rank: int, shuffle: bool,
                 seed: int, drop_last: bool, balance: Balance, reduce: Reduce = all_reduce_int,
                 where: str = "") -> tuple[list[list[int]], int]:
    """This rank's batches of epoch ``epoch`` as lists of file indices, and the padding.

    The padding is the number of samples repeated (positive) or dropped (negative) to make the batch
    count equal across the world. ``reduce(count, "max"|"min")`` returns the world's largest or
    smallest batch count (the all_reduce; tests pass a simulated world). ``where`` (the root) is
    named in the error of a rank that has no files to pad with.
    """
    indices = epoch_indices(length, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed,
                            epoch=epoch, drop_last=False)
    mine = count_batches(len(indices), batch_size, drop_last)
    padded = 0
    if balance != "none":
        target = reduce(mine, "max" if balance == "pad" else "min")
        if target > mine:
            if not indices:
                raise RuntimeError(f"epoch {epoch}{' under ' + where if where else ''} has no files for this "
                                   f"rank, so it cannot pad to the {target} batches other ranks have")
            want = target * batch_size
            padded = want - len(indices)
            indices = (indices * math.ceil(want / len(indices)))[:want]
        elif target < mine:
            keep = target * batch_size
            padded = keep - len(indices)
            indices = indices[:keep]
    batches = [indices[start:start + batch_size] for start in range(0, len(indices), batch_size)]
    if drop_last and batches and len(batches[-1]) < batch_size:
        batches.pop()
    return batches, padded


def resolve_split(partition: str, num_replicas: int | None, rank: int | None, *, who: str,
                  stacklevel: int = 3) -> tuple[int, int, World]:
    """The (num_replicas, rank) an epoch is split over, and the detected world.

    ``partition="node"``: the ranks of this node (each node's sidecar samples its own shard);
    ``"global"``: every rank of the job. Explicit ``num_replicas``/``rank`` win. With several ranks
    and no node-local variables, warns (naming ``who``) and assumes one node.
    """
    if partition not in ("node", "global"):
        raise ValueError(f"partition must be 'node' or 'global', got {partition!r}")
    world = World.detect()
    if partition == "node" and num_replicas is None and world.size > 1 and not has_local_env():
        warnings.warn(f"{who}: {world.size} ranks but no LOCAL_RANK/LOCAL_WORLD_SIZE with RANK (or Slurm/"
                      "Open MPI equivalents) for this world: assuming they all share this node's mount. "
                      "On several nodes, set them (torchrun does) or pass num_replicas= and rank=.",
                      stacklevel=stacklevel)
    if num_replicas is None:
        num_replicas = world.local_size if partition == "node" else world.size
    if rank is None:
        rank = world.local_rank if partition == "node" else world.rank
    if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
        raise ValueError(f"num_replicas must be an int >= 1, got {num_replicas!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < num_replicas:
        raise ValueError(f"rank must be an int in [0, num_replicas={num_replicas}), got {rank!r}")
    return num_replicas, rank, world
