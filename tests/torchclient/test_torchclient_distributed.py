"""Two ranks (gloo) whose nodes hold epochs of different sizes: equal batch counts, no hang.

Each rank stands for one node with its own mount (one rank per node: LOCAL_WORLD_SIZE=1), so each
reads its whole shard. Every batch is followed by an all_reduce, as DDP's gradient sync would be: if
the batch counts differed, one rank would wait forever, and the subprocess timeout would fail the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from epochfs.torchclient.plainfolder import publish_epoch

SIZES = {0: [5, 12], 1: [9, 4]}  # files per epoch on rank 0's and rank 1's node
BATCH = 2


def _rank_main(rank: int, root: str, store: str, out: str, balance: str) -> None:
    import torch
    import torch.distributed as dist

    from epochfs.torchclient import EpochLoader

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    report: dict[str, object] = {"epochs": {}}
    try:
        with EpochLoader(root, batch_size=BATCH, num_workers=1, balance=balance, progress=None,  # type: ignore[arg-type]
                         timeout=60) as loader:
            assert (loader.num_replicas, loader.rank) == (1, 0), "one rank per node: it reads the whole shard"
            for epoch in SIZES:
                seen: list[int] = []
                batches = 0
                for batch in loader.epoch(epoch):
                    seen += [int(v) for v in batch[:, 0]]
                    batches += 1
                    dist.all_reduce(torch.ones(1))  # the gradient sync of a DDP step
                stats = loader.history[-1]
                report["epochs"][epoch] = {"seen": seen, "batches": batches, "padded": stats.padded}  # type: ignore[index]
    finally:
        dist.destroy_process_group()
    Path(out).write_text(json.dumps(report))


@pytest.mark.parametrize("balance", ["pad", "truncate"])
def test_two_ranks_different_epoch_sizes_equal_batches(tmp_path: Path, balance: str) -> None:
    objects = tmp_path / "objects"
    objects.mkdir()
    for i in range(12):
        np.save(objects / f"{i:02d}.npy", np.array([i], np.int64))
    for rank in range(2):
        for epoch, sizes in SIZES.items():
            publish_epoch(tmp_path / f"node{rank}", epoch,
                          {f"{i:02d}.npy": objects / f"{i:02d}.npy" for i in range(sizes[rank])})
    procs = []
    for rank in range(2):
        env = {**os.environ, "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "RANK": str(rank), "WORLD_SIZE": "2"}
        args = [sys.executable, __file__, str(rank), str(tmp_path / f"node{rank}"), str(tmp_path / "store"),
                str(tmp_path / f"rank{rank}.json"), balance]
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=120)[0].decode(errors="replace"))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text())["epochs"] for r in range(2)]
    for epoch, sizes in SIZES.items():
        mine = [reports[r][str(epoch)] for r in range(2)]
        counts = [-(-s // BATCH) for s in sizes]
        assert mine[0]["batches"] == mine[1]["batches"] == (max(counts) if balance == "pad" else min(counts))
        for rank in range(2):
            seen = Counter(mine[rank]["seen"])
            if balance == "pad":
                assert set(seen) == set(range(sizes[rank])), "every sample of the rank's shard is seen"
                assert sum(seen.values()) - sizes[rank] == mine[rank]["padded"]
            else:
                assert max(seen.values()) == 1 and len(seen) == min(sizes[rank], min(counts) * BATCH)


if __name__ == "__main__":
    _rank_main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
