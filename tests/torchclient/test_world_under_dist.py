"""World under an initialised torch.distributed, beside launchers' variables that do not describe it.

torch.distributed's rank and size are this process's whatever started it; the env's node-local pair is
read only from a whole launcher set that names that same pair. Two real ranks (gloo, a file store),
each a process of its own, read the world under each launcher's env in turn:

- PyTorch Lightning's ``ddp`` launcher sets LOCAL_RANK, NODE_RANK and WORLD_SIZE, never RANK (its
  ``ddp_spawn`` LOCAL_RANK alone): every loader raised "incomplete torchrun environment" on every rank;
- ``torch.multiprocessing.spawn`` inside a Slurm step or batch script: both ranks inherit the
  task's SLURM_PROCID/SLURM_LOCALID, and both were given its local pair, so both read the same
  part of the epoch (all of it in a one-task step) and no rank read the rest.

The world is read from ``os.environ`` at each call (World.detect, has_local_env, resolve_split), so
one pair of ranks serves every launcher: before each, every launcher variable is removed and that
launcher's set alone is put in the environment, as its launch would give it. One pair instead of one
per launcher spares a torch import and a gloo mesh per launcher.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from typing import Any

import pytest

LIGHTNING_DDP = {"LOCAL_RANK": "{rank}", "NODE_RANK": "0", "WORLD_SIZE": "2"}
LIGHTNING_SPAWN = {"LOCAL_RANK": "{rank}"}
SLURM_ONE_TASK = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0",
                  "SLURM_NTASKS_PER_NODE": "1", "SLURM_NODEID": "0", "SLURM_TASKS_PER_NODE": "1"}
SLURM_BATCH_TWO = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
                   "SLURM_NTASKS_PER_NODE": "2"}
TORCHRUN = {"RANK": "{rank}", "WORLD_SIZE": "2", "LOCAL_RANK": "{rank}", "LOCAL_WORLD_SIZE": "2"}
MISLEADING = {"lightning-ddp": LIGHTNING_DDP, "lightning-ddp-spawn": LIGHTNING_SPAWN,
              "spawn-in-one-slurm-task": SLURM_ONE_TASK, "spawn-in-a-slurm-batch-script": SLURM_BATCH_TWO}
LAUNCHES = {**MISLEADING, "torchrun": TORCHRUN}
TORCHRUN_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")


def _launcher_variable(name: str) -> bool:
    """Whether ``name`` is one of the variables a launcher sets (any launcher World.detect reads)."""
    return name.startswith(("SLURM_", "OMPI_")) or name in TORCHRUN_NAMES


def _seen_under(env: dict[str, str], rank: int) -> dict[str, Any]:
    """What the loaders make of the world with only ``env``'s launcher variables set; an exception
    is recorded (as the launch's outcome) so that the other launches are still read."""
    from epochfs.torchclient.epochplan import resolve_split
    from epochfs.torchclient.world import World, has_local_env

    for name in [name for name in os.environ if _launcher_variable(name)]:
        del os.environ[name]
    os.environ.update({k: v.format(rank=rank) for k, v in env.items()})
    try:
        world = World.detect()
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            split = resolve_split("node", None, None, who="EpochLoader")
        local_env = has_local_env()
    except Exception as exc:  # the launch's outcome, checked by its own test
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"world": [world.rank, world.size, world.local_rank, world.local_size],
            "local_env": local_env, "split": list(split[:2]), "warned": [str(w.message) for w in said]}


def _child(rank: int, store: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
    try:
        print(json.dumps({name: _seen_under(env, rank) for name, env in LAUNCHES.items()}))
    finally:
        # Both ranks past their set-up before either leaves: a rank that destroyed its group while
        # the other still finished gloo's mesh made that one fail "Connection closed by peer"
        # under the loaded suite.
        dist.barrier()
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def seen_by_rank(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, dict[str, Any]]]:
    """Per rank, per launch: what the two ranks saw (one pair of processes for the whole module)."""
    store = tmp_path_factory.mktemp("world-under-dist") / "store"
    keep = {k: v for k, v in os.environ.items() if not _launcher_variable(k)}
    procs = [subprocess.Popen([sys.executable, __file__, str(rank), str(store)], env=keep,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(2)]
    out = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=120)
            assert proc.returncode == 0, stderr
            out.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return out


@pytest.mark.parametrize("launch", list(MISLEADING))
def test_a_launch_the_env_does_not_describe_splits_over_torch_distributed_s_ranks(
        launch: str, seen_by_rank: list[dict[str, dict[str, Any]]]) -> None:
    for rank, seen in enumerate(by_launch[launch] for by_launch in seen_by_rank):
        # Each rank its own part of the epoch (never two ranks on one part, never an error), and the
        # loaders' warning that the ranks are taken to share one node.
        assert "error" not in seen, seen
        assert seen["world"][:2] == [rank, 2] and seen["split"] == [2, rank], seen
        if seen["local_env"]:
            assert not seen["warned"], seen
        else:
            assert any("assuming they all share this node's mount" in w for w in seen["warned"]), seen


def test_a_whole_launcher_set_naming_torch_distributed_s_pair_gives_the_local_pair(
        seen_by_rank: list[dict[str, dict[str, Any]]]) -> None:
    ranks = [by_launch["torchrun"] for by_launch in seen_by_rank]
    assert [seen.get("world") for seen in ranks] == [[0, 2, 0, 2], [1, 2, 1, 2]], ranks
    assert all(seen["local_env"] and not seen["warned"] for seen in ranks), ranks


if __name__ == "__main__":
    _child(int(sys.argv[1]), sys.argv[2])
