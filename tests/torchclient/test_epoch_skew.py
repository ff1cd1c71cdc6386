"""Two real gloo ranks that call for different epochs: both raise before any batch, then go on in step.

Each rank stands for one node with its own plain folder holding epochs 0 to 2. Rank 0 iterates
``epoch(0)`` while rank 1 iterates ``epoch(1)`` (as after restoring from different checkpoints):
the batch-count reduce at the epoch's start would pass with both, and each would train on its own
epoch (its own shuffle, its own schedule) without a word. Both must raise ``EpochSkewError`` (a
``PeerEpochError``) naming both epochs, before any batch; iterating the same epoch afterwards
works. Every batch is followed by an all_reduce, as DDP's gradient sync would be, and any hang is
killed at the deadline and fails.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from epochfs.torchclient.plainfolder import publish_epoch

sys.path.insert(0, str(Path(__file__).parent))
from two_ranks import run_two_ranks

BATCH = 2


def _publish(base: Path, node: int, epoch: int, count: int) -> None:
    objects = base / "objects"
    objects.mkdir(exist_ok=True)
    for i in range(count):
        (objects / f"s{i:04d}.raw").write_bytes(np.array([i], dtype=np.int32).tobytes())
    names = [f"s{i:04d}.raw" for i in range(count)]
    publish_epoch(base / f"node{node}", epoch, {name: objects / name for name in names})


def _loader(kind: str, root: str) -> Any:
    from epochfs.torchclient import ArrayLoader, EpochLoader

    options: dict[str, Any] = dict(batch_size=BATCH, report=False, progress=None, wait=False, timeout=30)
    if kind == "array":
        return ArrayLoader(root, format="raw", dtype="int32", shape=(1,), num_threads=2, **options)
    return EpochLoader(root, num_workers=0, decode="bytes", **options)


def _epoch(loader: Any, epoch: int) -> dict[str, Any]:
    """Read ``epoch`` with an all_reduce per batch; what happened, as plain values."""
    import torch
    import torch.distributed as dist

    from epochfs.torchclient import PeerEpochError

    batches = 0
    try:
        for _ in loader.epoch(epoch):
            batches += 1
            dist.all_reduce(torch.ones(1))  # the gradient sync of a DDP step
    except Exception as exc:  # what the test checks, per rank
        skew = getattr(exc, "epochs", {})
        return {"error": type(exc).__name__, "message": str(exc), "batches": batches,
                "peer_error": isinstance(exc, PeerEpochError), "rank": getattr(exc, "rank", None),
                "epochs": {str(k): v for k, v in skew.items()}}
    return {"batches": batches}


def _rank_main(rank: int, kind: str, base: str) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{base}/store-{kind}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    out: dict[str, Any] = {}
    try:
        with _loader(kind, f"{base}/node{rank}") as loader:
            out["skewed"] = _epoch(loader, rank)  # rank 0: epoch 0, rank 1: epoch 1
            out["same"] = _epoch(loader, 2)
    finally:
        dist.destroy_process_group()
    Path(f"{base}/{kind}-rank{rank}.json").write_text(json.dumps(out))


@pytest.mark.parametrize("kind", ["epoch", "array"])
def test_ranks_iterating_different_epochs_both_raise_then_the_same_epoch_runs(tmp_path: Path,
                                                                              kind: str) -> None:
    for node in range(2):
        for epoch in range(3):
            _publish(tmp_path, node, epoch, 5 + epoch)
    run_two_ranks(__file__, [kind, str(tmp_path)])
    zero, one = (json.loads((tmp_path / f"{kind}-rank{r}.json").read_text()) for r in range(2))
    for rank, out in enumerate((zero, one)):
        skewed = out["skewed"]
        assert skewed.get("error") == "EpochSkewError" and skewed["peer_error"], (rank, out)
        assert skewed["batches"] == 0, "raised before any batch"
        assert skewed["epochs"] == {"0": [0], "1": [1]}, skewed
        assert skewed["rank"] == 1 - rank, "the other rank is the one named"
        assert "different epochs (epoch 0 on rank 0; epoch 1 on rank 1)" in skewed["message"], skewed
        assert f"epoch {rank} cannot start" in skewed["message"]
    assert zero["same"] == one["same"] == {"batches": 4}, "in step again on the same epoch"


if __name__ == "__main__":
    _rank_main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
