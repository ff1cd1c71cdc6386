"""The collective steps of an epoch's plan: the batch-count reduce over two real gloo ranks, and a rank's
own failure to open its epoch when no reduce is made (``balance="none"``).

``all_reduce_int`` (``plan_batches``'s reduce unless a loader passes its own) makes its "min" out of
the one MAX reduce every epoch collective uses, so both ops are checked on real ranks whose values
differ. A loader with ``balance="none"`` makes no reduce at all: the failure to open an epoch must
still reach the caller as what opening raised.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from two_ranks import run_two_ranks

VALUES = {0: 3, 1: 8}  # each rank's batch count


def _rank_main(rank: int, base: str) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    from epochfs.torchclient.epochplan import all_reduce_int, distributed, plan_batches

    dist.init_process_group("gloo", init_method=f"file://{base}/store", rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    try:
        mine = VALUES[rank]
        out: dict[str, Any] = {"world": distributed(), "max": all_reduce_int(mine, "max"),
                               "min": all_reduce_int(mine, "min")}
        for balance in ("pad", "truncate"):  # rank 0 holds 3 files, rank 1 holds 8: 2 and 4 batches of 2
            batches, _ = plan_batches(3 + 5 * rank, epoch=0, batch_size=2, num_replicas=1, rank=0,
                                      shuffle=False, seed=0, drop_last=False, balance=balance)
            out[balance] = len(batches)
    finally:
        dist.destroy_process_group()
    Path(f"{base}/rank{rank}.json").write_text(json.dumps(out))


def test_the_batch_count_reduce_gives_every_rank_the_max_or_the_min(tmp_path: Path) -> None:
    run_two_ranks(__file__, [str(tmp_path)])
    outcomes = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    for rank, out in enumerate(outcomes):
        assert out == {"world": [rank, 2], "max": 8, "min": 3, "pad": 4, "truncate": 2}, (rank, out)


def test_without_a_world_the_reduce_is_the_value_itself() -> None:
    from epochfs.torchclient.epochplan import all_reduce_int, distributed

    assert distributed() is None
    assert (all_reduce_int(5, "max"), all_reduce_int(5, "min")) == (5, 5)


def _loader(kind: str, root: Path) -> Any:
    from epochfs.torchclient import ArrayLoader, EpochLoader

    options: dict[str, Any] = dict(batch_size=2, report=False, progress=None, wait=False, balance="none")
    if kind == "array":
        return ArrayLoader(root, format="raw", dtype="int32", shape=(1,), num_threads=2, **options)
    return EpochLoader(root, num_workers=0, decode="bytes", **options)


@pytest.mark.parametrize("kind", ["epoch", "array"])
def test_an_epoch_that_cannot_be_opened_raises_its_own_error_without_a_reduce(tmp_path: Path,
                                                                              kind: str) -> None:
    from epochfs.torchclient.plainfolder import publish_epoch

    sample = tmp_path / "s0.raw"
    sample.write_bytes(np.array([7], dtype=np.int32).tobytes())
    publish_epoch(tmp_path / "node", 0, {"s0.raw": sample})
    with _loader(kind, tmp_path / "node") as loader:
        with pytest.raises(FileNotFoundError):
            list(loader.epoch(1))
        assert [int(batch[0][0]) if kind == "array" else len(batch) for batch in loader.epoch(0)] == \
            ([7] if kind == "array" else [1]), "the next epoch runs"


if __name__ == "__main__":
    _rank_main(int(sys.argv[1]), sys.argv[2])
