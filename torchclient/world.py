"""Rank and world size, from torch.distributed when it is initialised, else from the launcher's env.

Two worlds matter to epochfs: the global one (every rank of the job, what DistributedSampler splits
over) and the node-local one (the ranks sharing one node's mount). Each node's sidecar samples its own
shard, so by default :class:`~epochfs.torchclient.loader.EpochLoader` splits an epoch over the ranks
of the node; the global world is used to make batch counts equal (see docs/torchclient.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

# (rank, size) variable pairs of common launchers, first match wins: torchrun, Slurm, Open MPI.
_GLOBAL_VARS = (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"),
                ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"))
_LOCAL_VARS = (("LOCAL_RANK", "LOCAL_WORLD_SIZE"), ("SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
               ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"))


def _env_int(env: Mapping[str, str], name: str) -> int:
    raw = env[name]
    match = re.match(r"\s*(\d+)", raw)  # SLURM_NTASKS_PER_NODE may read "4(x2)"
    if not match:
        raise ValueError(f"environment variable {name}={raw!r} is not a non-negative integer")
    return int(match.group(1))


@dataclass(frozen=True)
class World:
    """This process's place in the job: global rank/size and node-local rank/size."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise ValueError(f"rank must be in [0, size): rank={self.rank}, size={self.size}")
        if self.local_size < 1 or not 0 <= self.local_rank < self.local_size:
            raise ValueError(
                f"local_rank must be in [0, local_size): local_rank={self.local_rank}, "
                f"local_size={self.local_size}")
        if self.local_size > self.size:
            raise ValueError(f"local_size={self.local_size} exceeds size={self.size}")

    @classmethod
    def detect(cls, env: Mapping[str, str] | None = None) -> World:
        """torch.distributed's rank and size if initialised, else the launcher's env, else a world of 1.

        The node-local pair comes from the env (torchrun's LOCAL_RANK/LOCAL_WORLD_SIZE, Slurm, Open
        MPI); without it every rank is taken to share one node, which is right for one machine.
        """
        env = os.environ if env is None else env
        rank, size = 0, 1
        dist_rank = _dist_rank_and_size()
        if dist_rank is not None:
            rank, size = dist_rank
        else:
            for rank_var, size_var in _GLOBAL_VARS:
                if rank_var in env and size_var in env:
                    rank, size = _env_int(env, rank_var), _env_int(env, size_var)
                    break
        local_rank, local_size = rank, size
        for rank_var, size_var in _LOCAL_VARS:
            if rank_var in env and size_var in env:
                local_rank, local_size = _env_int(env, rank_var), _env_int(env, size_var)
                break
        return cls(rank=rank, size=size, local_rank=local_rank, local_size=local_size)


def has_local_env(env: Mapping[str, str] | None = None) -> bool:
    """Whether the launcher said which ranks share this node (else :meth:`World.detect` assumes one node)."""
    env = os.environ if env is None else env
    return any(rank_var in env and size_var in env for rank_var, size_var in _LOCAL_VARS)


def _dist_rank_and_size() -> tuple[int, int] | None:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch without distributed support
        return None
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None
