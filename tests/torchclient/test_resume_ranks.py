"""A loader state is keyed by the global rank and the job's size, not by the rank in the node's split.

With partition="node" (the default) every node has a rank 0 in its split. Node 1's rank 0 is global
rank 1: a checkpoint of global rank 0 (Lightning's, written by rank 0 alone) is another node's state,
whose epoch holds other files, so only its batch count can be checked; it is not this rank's own
state, whose file list must match. The launcher's variables are set as torchrun sets them for one
rank per node (the loaders read them when made); no process group is needed for what is checked here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from epochfs.torchclient import ArrayLoader, EpochLoader, EpochResumeError
from epochfs.torchclient.plainfolder import publish_epoch

KINDS = ("array", "epoch")


def _node(tmp_path: Path, node: int, numbers: range) -> Path:
    objects = tmp_path / "objects"
    objects.mkdir(exist_ok=True)
    files = {}
    for i in numbers:
        (objects / f"s{i:04d}.raw").write_bytes(np.array([i], dtype=np.int32).tobytes())
        files[f"s{i:04d}.raw"] = objects / f"s{i:04d}.raw"
    root = tmp_path / f"node{node}"
    publish_epoch(root, 0, files)
    return root


def _as_rank(monkeypatch: pytest.MonkeyPatch, rank: int, world: int) -> None:
    for name, value in (("RANK", rank), ("WORLD_SIZE", world), ("LOCAL_RANK", 0), ("LOCAL_WORLD_SIZE", 1)):
        monkeypatch.setenv(name, str(value))


def _loader(kind: str, root: Path, **kw: Any) -> ArrayLoader | EpochLoader:
    options: dict[str, Any] = dict(batch_size=2, report=False, progress=None, wait=False)
    options.update(kw)
    if kind == "array":
        return ArrayLoader(root, format="raw", dtype="int32", shape=(1,), num_threads=2, **options)
    return EpochLoader(root, num_workers=0, decode="bytes", **options)


def _ids(batches: list[torch.Tensor]) -> list[list[int]]:
    return [b.contiguous().view(torch.int32).view(-1).tolist() for b in batches]


def _saved_after_one_batch(kind: str, root: Path, **kw: Any) -> dict[str, Any]:
    with _loader(kind, root, **kw) as loader:
        for _ in loader.epoch(0):
            break
        state = json.loads(json.dumps(loader.state_dict()))
    return state


@pytest.mark.parametrize("kind", KINDS)
def test_another_nodes_rank_zero_state_is_not_this_ranks_own(tmp_path: Path, kind: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Global rank 0's state (node 0) restores global rank 1 (node 1, other files, as many batches)."""
    node0, node1 = _node(tmp_path, 0, range(0, 6)), _node(tmp_path, 1, range(10, 16))
    _as_rank(monkeypatch, 0, 2)
    state = _saved_after_one_batch(kind, node0)
    _as_rank(monkeypatch, 1, 2)
    with _loader(kind, node1) as reference:
        full = _ids(list(reference.epoch(0)))
    with _loader(kind, node1) as resumed:
        resumed.load_state_dict(state)
        assert _ids(list(resumed.epoch(0))) == full[1:], "the same position on this node's epoch"
    with _loader(kind, node1, balance="none") as unbalanced, \
            pytest.raises(ValueError, match="global rank 0's and this is global rank 1"):
        unbalanced.load_state_dict(dict(state, balance="none"))
    assert (state["rank"], state["global_rank"], state["world_size"]) == (0, 0, 2)


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_of_a_job_of_another_size_does_not_resume(tmp_path: Path, kind: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Saved in a job of 2 ranks, loaded in a job of 3: the batch counts were equalised over another
    world, so the position is not this epoch's: EpochResumeError, or with "restart" the whole epoch."""
    root = _node(tmp_path, 0, range(0, 6))
    _as_rank(monkeypatch, 0, 2)
    state = _saved_after_one_batch(kind, root)
    _as_rank(monkeypatch, 0, 3)
    with _loader(kind, root) as resumed:
        resumed.load_state_dict(state)
        with pytest.raises(EpochResumeError, match="a job of 3 ranks, not 2"):
            list(resumed.epoch(0))
    with _loader(kind, root, on_resume_mismatch="restart") as restarted:
        restarted.load_state_dict(state)
        assert len(list(restarted.epoch(0))) == 3
