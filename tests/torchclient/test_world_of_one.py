"""The epoch collectives and the process group's timeout, read from a real process group of one rank.

The loaders lower their wait for a cut below the process group's timeout (:mod:`.groupwait`), read
from torch's backend options, and reduce the batch counts on the device the backend reduces on (the
rank's GPU under NCCL). Two ranks with gloo cover the waits (test_cut_wait_bound.py); NCCL refuses
two ranks on one GPU, so its reading and its reduce are checked in a world of one, on a machine with
CUDA (the GPU machine lent to some sessions), and the same checks run with gloo everywhere.
Each runs in a process of its own: a process group is process-wide state.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

TIMEOUT = 47.0  # seconds: neither backend's default, so a default read back instead cannot pass


def _child(backend: str, store: str) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    from epochfs.torchclient.epochplan import all_reduce_max, reduce_device
    from epochfs.torchclient.groupwait import backend_timeout, group_timeout

    if backend == "nccl":
        torch.cuda.set_device(0)
    dist.init_process_group(backend, store=dist.FileStore(store, 1), rank=0, world_size=1,
                            timeout=timedelta(seconds=TIMEOUT))
    try:
        read = backend_timeout()
        print(json.dumps({"device": str(reduce_device()), "reduced": all_reduce_max([3, -5, 0]),
                          "read": [read.seconds, read.backend, read.read], "alone": group_timeout() is None}))
    finally:
        dist.destroy_process_group()


def _run(backend: str, tmp_path: Path) -> dict:
    done = subprocess.run([sys.executable, __file__, backend, str(tmp_path / "store")], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without distributed support")
def test_gloo_reduces_on_the_cpu_and_its_timeout_is_read(tmp_path: Path) -> None:
    out = _run("gloo", tmp_path)
    assert out == {"device": "cpu", "reduced": [3, -5, 0], "read": [TIMEOUT, "gloo", True], "alone": True}


@pytest.mark.skipif(not torch.cuda.is_available() or not torch.distributed.is_nccl_available(),
                    reason="needs CUDA and NCCL")
def test_nccl_reduces_on_the_gpu_and_its_timeout_is_read(tmp_path: Path) -> None:  # pragma: no cover
    out = _run("nccl", tmp_path)
    assert out == {"device": "cuda:0", "reduced": [3, -5, 0], "read": [TIMEOUT, "nccl", True], "alone": True}


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
