"""Slurm with --ntasks not a multiple of --ntasks-per-node: each node's local world is its own task count.

``srun --ntasks=5 --ntasks-per-node=3`` runs tasks 0-2 on node 0 and tasks 3-4 on node 1. Slurm sets
SLURM_NTASKS_PER_NODE=3 (the requested maximum) in every task, and SLURM_TASKS_PER_NODE="3,2" (the
count of each node). With partition="node" each node's ranks split that node's epoch between them, so
a local size of 3 on the node that runs 2 leaves a third of its epoch unread.
"""

from __future__ import annotations

import pytest

from epochfs.torchclient.epochplan import plan_batches
from epochfs.torchclient.world import World

# (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID) of srun --ntasks=5 --ntasks-per-node=3
TASKS = ((0, 0, 0), (1, 1, 0), (2, 2, 0), (3, 0, 1), (4, 1, 1))


def slurm_env(procid: int, localid: int, nodeid: int) -> dict[str, str]:
    return {"SLURM_PROCID": str(procid), "SLURM_NTASKS": "5", "SLURM_LOCALID": str(localid),
            "SLURM_NODEID": str(nodeid), "SLURM_NTASKS_PER_NODE": "3", "SLURM_TASKS_PER_NODE": "3,2"}


def test_uneven_slurm_nodes_get_their_own_task_count() -> None:
    worlds = {procid: World.detect(slurm_env(procid, localid, nodeid)) for procid, localid, nodeid in TASKS}
    assert [worlds[p].local_size for p in range(5)] == [3, 3, 3, 2, 2]
    assert [worlds[p].local_rank for p in range(5)] == [0, 1, 2, 0, 1]


@pytest.mark.parametrize("files", [12, 7, 1])
def test_each_node_reads_its_whole_epoch_under_partition_node(files: int) -> None:
    """The node-local split over the detected local world covers every file of the node's epoch."""
    read: dict[int, list[int]] = {0: [], 1: []}
    for procid, localid, nodeid in TASKS:
        world = World.detect(slurm_env(procid, localid, nodeid))
        batches, _ = plan_batches(files, epoch=0, batch_size=2, num_replicas=world.local_size,
                                  rank=world.local_rank, shuffle=True, seed=0, drop_last=False,
                                  balance="none")
        read[nodeid] += [i for batch in batches for i in batch]
    for nodeid, got in read.items():
        unread = sorted(set(range(files)) - set(got))
        assert not unread, f"node {nodeid} never reads {unread}"


def test_a_node_count_without_a_local_rank_names_its_variables() -> None:
    """Without SLURM_NTASKS_PER_NODE the count comes from SLURM_TASKS_PER_NODE; an incomplete set is
    a ValueError naming them (it was a KeyError on the absent SLURM_NTASKS_PER_NODE)."""
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "2", "SLURM_NODEID": "0"}
    with pytest.raises(ValueError, match=r"SLURM_TASKS_PER_NODE.* is set but SLURM_LOCALID is not"):
        World.detect(env)
