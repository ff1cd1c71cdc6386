"""World under an initialised torch.distributed, beside launchers' variables that do not describe it.

torch.distributed's rank and size are this process's whatever started it; the env's node-local pair is
read only from a whole launcher set that names that same pair. Two real ranks (gloo, a file store), each
in a process of its own with the env a launcher gives it:

- PyTorch Lightning's ``ddp`` launcher sets LOCAL_RANK, NODE_RANK and WORLD_SIZE, never RANK (its
  ``ddp_spawn`` LOCAL_RANK alone): every loader raised "incomplete torchrun environment" on every rank;
- ``torch.multiprocessing.spawn`` inside a Slurm step or batch script: both ranks inherit the
  task's SLURM_PROCID/SLURM_LOCALID, and both were given its local pair, so both read the same
  part of the epoch (all of it in a one-task step) and no rank read the rest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

LIGHTNING_DDP = {"LOCAL_RANK": "{rank}", "NODE_RANK": "0", "WORLD_SIZE": "2"}
LIGHTNING_SPAWN = {"LOCAL_RANK": "{rank}"}
SLURM_ONE_TASK = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0",
                  "SLURM_NTASKS_PER_NODE": "1", "SLURM_NODEID": "0", "SLURM_TASKS_PER_NODE": "1"}
SLURM_BATCH_TWO = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
                   "SLURM_NTASKS_PER_NODE": "2"}
TORCHRUN = {"RANK": "{rank}", "WORLD_SIZE": "2", "LOCAL_RANK": "{rank}", "LOCAL_WORLD_SIZE": "2"}


def _child(rank: int, store: str) -> None:
    import torch.distributed as dist

    from epochfs.torchclient.epochplan import resolve_split
    from epochfs.torchclient.world import World, has_local_env

    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
    try:
        world = World.detect()
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            split = resolve_split("node", None, None, who="EpochLoader")
        print(json.dumps({"world": [world.rank, world.size, world.local_rank, world.local_size],
                          "local_env": has_local_env(), "split": list(split[:2]),
                          "warned": [str(w.message) for w in said]}))
    finally:
        # Both ranks past their set-up before either leaves: a rank that destroyed its group while
        # the other still finished gloo's mesh made that one fail "Connection closed by peer"
        # under the loaded suite.
        dist.barrier()
        dist.destroy_process_group()


def _run(env: dict[str, str], tmp_path: Path) -> list[dict]:
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "OMPI_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                                    "LOCAL_WORLD_SIZE", "NODE_RANK")}
    procs = [subprocess.Popen([sys.executable, __file__, str(rank), str(tmp_path / "store")],
                              env={**keep, **{k: v.format(rank=rank) for k, v in env.items()}},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(2)]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


@pytest.mark.parametrize("env", [LIGHTNING_DDP, LIGHTNING_SPAWN, SLURM_ONE_TASK, SLURM_BATCH_TWO],
                         ids=["lightning-ddp", "lightning-ddp-spawn", "spawn-in-one-slurm-task",
                              "spawn-in-a-slurm-batch-script"])
def test_a_launch_the_env_does_not_describe_splits_over_torch_distributed_s_ranks(
        env: dict[str, str], tmp_path: Path) -> None:
    ranks = _run(env, tmp_path)
    for rank, seen in enumerate(ranks):
        # Each rank its own part of the epoch (never two ranks on one part, never an error), and the
        # loaders' warning that the ranks are taken to share one node.
        assert seen["world"][:2] == [rank, 2] and seen["split"] == [2, rank], seen
        if seen["local_env"]:
            assert not seen["warned"], seen
        else:
            assert any("assuming they all share this node's mount" in w for w in seen["warned"]), seen


def test_a_whole_launcher_set_naming_torch_distributed_s_pair_gives_the_local_pair(tmp_path: Path) -> None:
    ranks = _run(TORCHRUN, tmp_path)
    assert [seen["world"] for seen in ranks] == [[0, 2, 0, 2], [1, 2, 1, 2]], ranks
    assert all(seen["local_env"] and not seen["warned"] for seen in ranks), ranks


if __name__ == "__main__":
    _child(int(sys.argv[1]), sys.argv[2])
