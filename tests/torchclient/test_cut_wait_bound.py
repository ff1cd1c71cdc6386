"""A rank whose cut never comes ends its wait before its peers' collective times out.

With torch.distributed initialised, a rank waits for its node's cut while its peers already sit in
the batch-count all_reduce; the process group's timeout bounds how long they sit there (gloo raises
past it, NCCL's watchdog aborts the job). So the loaders' wait for a cut is lowered below that
timeout: the late rank's TimeoutError is carried through the reduce and every rank raises a clear
error in time. Two real gloo ranks with a 10 s process-group timeout and the loaders' default
``timeout`` (600 s): rank 1's epoch 0 never appears, for an EpochLoader and an ArrayLoader in turn.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from two_ranks import run_two_ranks

GROUP_TIMEOUT = 10.0  # seconds: the process group's, far below the loaders' default wait of 600 s
# (the loaders wait half of it, 5 s, twice: the test's length; rank 0 waits in its all_reduce 5 s
# short of the group's timeout)


def _publish(base: Path, node: int, epoch: int, count: int) -> None:
    from epochfs.torchclient.plainfolder import publish_epoch

    objects = base / "objects"
    objects.mkdir(exist_ok=True)
    files = {}
    for i in range(count):
        path = objects / f"s{i:04d}.raw"
        path.write_bytes(np.array([i], dtype=np.int32).tobytes())
        files[path.name] = path
    publish_epoch(base / f"node{node}", epoch, files)


def _read(loader: Any, epoch: int) -> dict[str, Any]:
    """Read ``epoch`` with an all_reduce per batch (DDP's gradient sync); what happened, and how long
    the epoch's start took."""
    import torch
    import torch.distributed as dist

    start = time.monotonic()
    batches = 0
    try:
        for _ in loader.epoch(epoch):
            batches += 1
            dist.all_reduce(torch.ones(1))
    except Exception as exc:  # the test checks the type, the message and the time, per rank
        return {"error": type(exc).__name__, "message": str(exc), "seconds": time.monotonic() - start}
    return {"batches": batches}


def _rank_main(rank: int, base: str) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    from epochfs.torchclient import ArrayLoader, EpochLoader

    os.environ.pop("EPOCHFS_REPORT_URL", None)  # no sidecar to ask for the cut: the epoch never comes
    dist.init_process_group("gloo", init_method=f"file://{base}/store", rank=rank, world_size=2,
                            timeout=timedelta(seconds=GROUP_TIMEOUT))
    root = f"{base}/node{rank}"
    options: dict[str, Any] = dict(batch_size=2, report=False, progress=None)  # timeout: the default
    out: dict[str, Any] = {}
    try:
        with EpochLoader(root, num_workers=0, decode="bytes", **options) as loader:
            out["epoch"] = _read(loader, 0)
            out["next"] = _read(loader, 1)
        with ArrayLoader(root, format="raw", dtype="int32", shape=(1,), num_threads=1, **options) as arrays:
            out["array"] = _read(arrays, 0)
    finally:
        dist.destroy_process_group()
    Path(f"{base}/rank{rank}.json").write_text(json.dumps(out))


@pytest.mark.long
def test_a_rank_whose_cut_never_comes_fails_every_rank_before_the_group_times_out(tmp_path: Path) -> None:
    _publish(tmp_path, 0, 0, 4)
    (tmp_path / "node1").mkdir()  # rank 1's node never cuts epoch 0
    for node in range(2):
        _publish(tmp_path, node, 1, 4)
    outputs = run_two_ranks(__file__, [str(tmp_path)], timeout=75.0)
    zero, one = (json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2))
    for kind in ("epoch", "array"):
        assert one[kind]["error"] == "TimeoutError", one
        assert "did not appear" in one[kind]["message"] and "init_process_group" in one[kind]["message"], one
        assert zero[kind]["error"] == "PeerEpochError", zero  # not gloo's timeout of the all_reduce
        assert "rank 1: TimeoutError" in zero[kind]["message"], zero
        for out in (zero[kind], one[kind]):
            assert out["seconds"] < GROUP_TIMEOUT, (kind, out)
    assert zero["next"] == one["next"] == {"batches": 2}, "in step again after the failure"
    for output in outputs:  # each loader says once, at its start, that it lowered the wait, and why
        said = [line for line in output.splitlines() if "waits at most" in line]
        assert len(said) == 2, output
        group = f"{GROUP_TIMEOUT:g}s"
        assert all("init_process_group(timeout=" in line and group in line for line in said), said


def test_the_wait_ends_a_margin_before_the_group_timeout() -> None:
    """30 s before it, a tenth of it when that is more, never more than half of it."""
    from epochfs.torchclient.groupwait import wait_bound

    assert wait_bound(600.0, 600.0) == 540.0  # NCCL's default against the loaders' default
    assert wait_bound(math.inf, 600.0) == 540.0
    assert wait_bound(600.0, 7200.0) == 600.0 and wait_bound(100.0, 600.0) == 100.0  # below it: as given
    assert wait_bound(600.0, 1800.0) == 600.0  # gloo's default leaves the loaders' default alone
    assert wait_bound(600.0, 120.0) == 90.0 and wait_bound(600.0, GROUP_TIMEOUT) == GROUP_TIMEOUT / 2
    assert wait_bound(600.0, None) == 600.0  # no world of several ranks


def test_the_documented_defaults_stand_in_when_the_group_timeout_cannot_be_read() -> None:
    from epochfs.torchclient.groupwait import default_group_timeout

    assert default_group_timeout("nccl") == 600.0
    assert default_group_timeout("gloo") == default_group_timeout("mpi") == 1800.0


def test_without_a_world_the_wait_is_the_timeout_as_given(caplog: pytest.LogCaptureFixture) -> None:
    from epochfs.torchclient.groupwait import CutWait, group_timeout

    assert group_timeout() is None
    with caplog.at_level(logging.INFO, logger="epochfs.torchclient"):
        assert CutWait(who="EpochLoader", speak=True).seconds(math.inf) == math.inf
    assert caplog.records == []


if __name__ == "__main__":
    _rank_main(int(sys.argv[1]), sys.argv[2])
