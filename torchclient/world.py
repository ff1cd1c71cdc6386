"""Rank and world size, from torch.distributed when it is initialised, else from the launcher's env.

Two worlds matter to epochfs: the global one (every rank of the job, what DistributedSampler splits
over) and the node-local one (the ranks sharing one node's mount). Each node's sidecar samples its own
shard, so by default :class:`~epochfs.torchclient.loader.EpochLoader` splits an epoch over the ranks
of the node; the global world is used to make batch counts equal (see docs/torchclient.md).

One launcher's variables are read, as a set: a process started by torchrun inside a Slurm allocation
(or by a wrapper under mpirun) also carries the outer launcher's variables, which describe another
launch, so a rank of one beside a size of the other would be a wrong world. The first launcher
present by precedence is read alone; its set must be complete and consistent, else ValueError
naming the variables.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Launcher:
    """The variables one launcher sets: the global pair, and the node-local pair (None: the launcher
    runs one process per node, so the local world is (0, 1) whenever the global pair is there)."""

    name: str
    rank: str
    size: str
    local_rank: str | None
    local_size: str | None
    marks: tuple[str, ...]
    """Any of these present means the launcher is this one (then its set must be complete)."""
    whole: bool = False
    """Present only with its global pair whole: Slurm's variables are in every process of an
    allocation, also a lone process of a batch script that no ``srun`` started as a task."""


# By precedence: torchrun's RANK/WORLD_SIZE when present (an inner launch wins over the allocation it
# runs in), Slurm, Open MPI, then the chart's Kubernetes Indexed Job (WORLD_SIZE = nodes, NODE_RANK =
# the completion index, one process per pod; torchrun in that pod sets RANK and so wins). WORLD_SIZE
# alone marks nothing: the chart sets it for torchrun's --nnodes.
LAUNCHERS = (
    Launcher("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
             marks=("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")),
    Launcher("Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
             marks=("SLURM_PROCID",), whole=True),
    Launcher("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
             "OMPI_COMM_WORLD_LOCAL_SIZE", marks=("OMPI_COMM_WORLD_RANK",)),
    Launcher("Kubernetes Indexed Job", "NODE_RANK", "WORLD_SIZE", None, None, marks=("NODE_RANK",)),
)


def _env_int(env: Mapping[str, str], name: str) -> int:
    raw = env[name]
    # SLURM_NTASKS_PER_NODE may read "4(x2)"; anything else after the number ("4abc", "4.5") is a
    # mistake, not a world of 4.
    match = re.fullmatch(r"\s*(\d+)(?:\(x\d+\))?\s*", raw)
    if not match:
        raise ValueError(f"environment variable {name}={raw!r} is not a non-negative integer")
    return int(match.group(1))


def _slurm_tasks_on_node(env: Mapping[str, str]) -> int | None:
    """Tasks on this node from SLURM_TASKS_PER_NODE ("2(x3),1") at SLURM_NODEID, which srun always
    sets (SLURM_NTASKS_PER_NODE only with --ntasks-per-node, and then as the requested maximum, not
    this node's count); None when either is missing or bad."""
    if "SLURM_TASKS_PER_NODE" not in env or "SLURM_NODEID" not in env:
        return None
    node = _env_int(env, "SLURM_NODEID")
    for part in env["SLURM_TASKS_PER_NODE"].split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match:
            return None
        repeat = int(match.group(2) or 1)
        if node < repeat:
            return int(match.group(1))
        node -= repeat
    return None


@dataclass(frozen=True)
class World:
    """This process's place in the job: global rank/size and node-local rank/size."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1

    def __post_init__(self) -> None:
        for name in ("rank", "size", "local_rank", "local_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an int, got {value!r}")
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

        The node-local pair comes from the same launcher (torchrun's LOCAL_RANK/LOCAL_WORLD_SIZE,
        Slurm, Open MPI; one per pod for the chart's Indexed Job); without it every rank is taken to
        share one node, which is right for one machine. Without torch.distributed an incomplete or
        inconsistent launcher set is an error (ValueError naming its variables). Under it, the env's
        local pair is used only where its launcher's set is whole and names torch.distributed's own
        rank and size (:func:`_local_under_dist`).
        """
        env = os.environ if env is None else env
        dist = dist_rank_and_size()
        if dist is None:
            rank, size, local = _from_env(env) or (0, 1, None)
        else:
            (rank, size), local = dist, _local_under_dist(env, *dist)
        local_rank, local_size = local or (rank, size)
        if local_size > size:  # torch.distributed's world may be smaller than the launch's
            local_rank, local_size = rank, size
        return cls(rank=rank, size=size, local_rank=local_rank, local_size=local_size)


def launcher(env: Mapping[str, str] | None = None) -> Launcher | None:
    """The launcher whose variables the env holds, by precedence (None: none of them)."""
    env = os.environ if env is None else env
    return next((one for one in LAUNCHERS if any(name in env for name in one.marks)
                 and (not one.whole or (one.rank in env and one.size in env))), None)


def _from_env(env: Mapping[str, str]) -> tuple[int, int, tuple[int, int] | None] | None:
    """(rank, size, (local_rank, local_size)) of the launcher in ``env``, the local pair None when it
    does not say; None without a launcher. ValueError naming the variables of an incomplete or
    inconsistent set."""
    one = launcher(env)
    if one is None:
        return None
    if one.rank not in env or one.size not in env:
        present = [name for name in (*one.marks, one.rank, one.size) if name in env]
        missing = [name for name in (one.rank, one.size) if name not in env]
        said = f"{present[0]}={env[present[0]]}" if present[0] in (one.rank, one.size) else present[0]
        raise ValueError(f"incomplete {one.name} environment: {said} is set but {' and '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} not (set both, or neither)")
    rank, size = _env_int(env, one.rank), _env_int(env, one.size)
    if size < 1 or rank >= size:
        raise ValueError(f"inconsistent {one.name} environment (rank must be below the world size): "
                         f"{one.rank}={rank} is not below {one.size}={size}")
    if one.local_rank is None or one.local_size is None:
        return rank, size, (0, 1)
    local_size: int | None = None
    said_size = one.local_size  # the variable the local size was read from, for the errors
    if one.name == "Slurm":
        # This node's own count first: SLURM_NTASKS_PER_NODE is the requested maximum, so with
        # --ntasks=5 --ntasks-per-node=3 it reads 3 on the node that runs 2 ("3,2"), and a split of
        # that node's epoch over 3 would leave a third of it unread.
        local_size = _slurm_tasks_on_node(env)
        if local_size is not None:
            said_size = f"SLURM_TASKS_PER_NODE[SLURM_NODEID={env['SLURM_NODEID'].strip()}]"
    if local_size is None and one.local_size in env:
        local_size = _env_int(env, one.local_size)
    if one.local_rank not in env and local_size is None:
        return rank, size, None
    if one.local_rank not in env or local_size is None:
        there = (f"{one.local_rank}={env[one.local_rank]}" if one.local_rank in env
                 else f"{said_size}={env.get(said_size, local_size)}")
        absent = one.local_size if one.local_rank in env else one.local_rank
        raise ValueError(f"incomplete {one.name} environment: {there} is set but {absent} "
                         "is not (set both, or neither)")
    local_rank = _env_int(env, one.local_rank)
    if local_size < 1 or local_rank >= local_size:
        raise ValueError(f"inconsistent {one.name} environment: {one.local_rank}={local_rank} is not below "
                         f"{said_size}={local_size}")
    if local_size > size:
        raise ValueError(f"inconsistent {one.name} environment: {said_size}={local_size} is above "
                         f"{one.size}={size}")
    return rank, size, (local_rank, local_size)


def _local_under_dist(env: Mapping[str, str], rank: int, size: int) -> tuple[int, int] | None:
    """The env's node-local pair for torch.distributed's ``rank`` of ``size``, or None where the env
    cannot say it. torch.distributed's pair is this process's whatever launched it; the env's local
    pair is only as good as the launch it describes, which is another one where

    - a launcher sets the local rank but not the global pair it belongs to: PyTorch Lightning's
      ``ddp`` launcher sets LOCAL_RANK, NODE_RANK and WORLD_SIZE but not RANK, its ``ddp_spawn``
      LOCAL_RANK alone (an error without torch.distributed: a torchrun set that is incomplete);
    - the processes were started by ``torch.multiprocessing.spawn`` inside a Slurm step or batch
      script, whose variables all of them inherit: the step's task, not these ranks.

    Such a set is not read (the local world is then taken as every rank, with the loaders'
    warning that names what to set); a whole set naming the same rank and size is."""
    try:
        found = _from_env(env)
    except ValueError:
        return None
    if found is None or found[:2] != (rank, size):
        return None
    return found[2]


def has_local_env(env: Mapping[str, str] | None = None) -> bool:
    """Whether the launcher said which ranks share this node (else :meth:`World.detect` assumes one node)."""
    env = os.environ if env is None else env
    dist = dist_rank_and_size()
    if dist is not None:
        return _local_under_dist(env, *dist) is not None
    found = _from_env(env)
    return found is not None and found[2] is not None


def dist_rank_and_size() -> tuple[int, int] | None:
    """(rank, world size) from torch.distributed when it is initialised (a world of one too), else None."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch without distributed support
        return None
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None
