"""World.detect takes one launcher's variables as a set: never one launcher's rank beside another's sizes.

A process started by torchrun inside a Slurm allocation (or by a wrapper under mpirun) carries the
outer launcher's variables too; they describe another launch. The rule: the first launcher present
by precedence (torchrun, Slurm, Open MPI, the chart's Kubernetes Indexed Job) is the only one read,
its set must be complete and consistent, and an error names the variables otherwise.
"""

from __future__ import annotations

import pytest

from epochfs.torchclient.world import World, has_local_env

STALE_SLURM = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "4"}
STALE_OMPI = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
              "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}


@pytest.mark.parametrize("stale", [STALE_SLURM, STALE_OMPI], ids=["slurm", "openmpi"])
def test_torchrun_global_pair_is_never_mixed_with_another_launchers_local_pair(stale: dict[str, str]) -> None:
    """RANK/WORLD_SIZE without LOCAL_*: the node is unknown (one node assumed), not another launch's."""
    env = {**stale, "RANK": "3", "WORLD_SIZE": "4"}
    assert World.detect(env) == World(rank=3, size=4, local_rank=3, local_size=4)
    assert not has_local_env(env), "the loaders warn that they assume one node"


def test_torchrun_set_wins_whole_over_slurm() -> None:
    env = {**STALE_SLURM, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert World.detect(env) == World(1, 2, 1, 2)
    assert World.detect(STALE_SLURM) == World(5, 8, 1, 4)
    assert World.detect({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1",
                         "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_NODEID": "1"}) == World(3, 4, 1, 2)
    assert World.detect({"SLURM_PROCID": "4", "SLURM_NTASKS": "5", "SLURM_LOCALID": "0",
                         "SLURM_TASKS_PER_NODE": "2(x2),1", "SLURM_NODEID": "2"}) == World(4, 5, 0, 1)


@pytest.mark.parametrize(("env", "names"), [
    ({**STALE_SLURM, "RANK": "1"}, "RANK=1 is set but WORLD_SIZE is not"),
    ({**STALE_SLURM, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0"},
     "LOCAL_RANK=0 is set but LOCAL_WORLD_SIZE is not"),
    ({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}, "LOCAL_RANK is set but RANK and WORLD_SIZE are not"),
    ({"RANK": "4", "WORLD_SIZE": "4"}, "RANK=4 is not below WORLD_SIZE=4"),
    ({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
     "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4"},
     "LOCAL_WORLD_SIZE=4 is above WORLD_SIZE=2"),
    ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1"},
     "SLURM_LOCALID=1 is set but SLURM_NTASKS_PER_NODE is not"),
    ({"OMPI_COMM_WORLD_RANK": "1"}, "OMPI_COMM_WORLD_RANK=1 is set but OMPI_COMM_WORLD_SIZE is not"),
], ids=["rank-only", "local-rank-only", "local-only", "rank-too-big", "local-too-big", "local-above-world",
        "slurm-local", "ompi-rank-only"])
def test_an_incomplete_or_inconsistent_set_is_an_error_naming_its_variables(env: dict[str, str],
                                                                            names: str) -> None:
    with pytest.raises(ValueError, match=names):
        World.detect(env)


def test_kubernetes_indexed_job_of_the_chart_is_one_rank_per_pod() -> None:
    """The chart sets WORLD_SIZE (nodes) and NODE_RANK (the completion index) for a process per pod;
    under torchrun in that pod, torchrun's own RANK/WORLD_SIZE win."""
    assert World.detect({"WORLD_SIZE": "3", "NODE_RANK": "2"}) == World(2, 3, 0, 1)
    assert has_local_env({"WORLD_SIZE": "3", "NODE_RANK": "2"})
    torchrun = {"WORLD_SIZE": "6", "NODE_RANK": "2", "RANK": "5", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert World.detect(torchrun) == World(5, 6, 1, 2)
    with pytest.raises(ValueError, match="NODE_RANK=3 is not below WORLD_SIZE=3"):
        World.detect({"WORLD_SIZE": "3", "NODE_RANK": "3"})
    assert World.detect({"WORLD_SIZE": "3"}) == World(), "WORLD_SIZE alone (the chart's, no rank): one"


def test_a_lone_process_of_a_slurm_batch_script_is_a_world_of_one() -> None:
    """Slurm sets SLURM_PROCID in a batch script's own process too, without SLURM_NTASKS unless -n."""
    assert World.detect({"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}) == World()
