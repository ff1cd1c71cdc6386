"""Two real gloo ranks: one rank's failure to open, plan or resume an epoch never hangs the other.

Each rank stands for one node with its own folder (LOCAL_WORLD_SIZE=1). Every batch is followed by
an all_reduce, as DDP's gradient sync would be. A rank whose epoch cannot be opened (gone from its
node), or cannot be padded (no files), must make every rank raise before the first batch, the others
with PeerEpochError naming it; after the failure both ranks go on with the next epoch in step. A
resume whose epoch changed on one node only is decided the same on both ranks: both restart the
epoch (on_resume_mismatch="restart") or both raise. Any hang is killed at the deadline and fails.

A rank is a process importing torch (most of a test's time), so one pair of ranks runs every
failure case in turn, each on folders of its own, as a training job goes on after a failed epoch;
a resume runs restart and raise in one pair of restarted ranks, the save in the pair before it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from epochfs.torchclient.layout import manifest_path
from epochfs.torchclient.plainfolder import publish_epoch

sys.path.insert(0, str(Path(__file__).parent))
from two_ranks import run_two_ranks

BATCH = 2


def _objects(base: Path, count: int) -> Path:
    objects = base / "objects"
    objects.mkdir(exist_ok=True)
    for i in range(count):
        (objects / f"s{i:04d}.raw").write_bytes(np.array([i], dtype=np.int32).tobytes())
    return objects


def _publish(base: Path, node: int, epoch: int, numbers: list[int]) -> None:
    objects = _objects(base, 40)
    publish_epoch(base / f"node{node}", epoch, {f"s{i:04d}.raw": objects / f"s{i:04d}.raw" for i in numbers})


def _loader(kind: str, root: str, **kw: Any) -> Any:
    from epochfs.torchclient import ArrayLoader, EpochLoader

    options: dict[str, Any] = dict(batch_size=BATCH, report=False, progress=None, wait=False, timeout=30)
    options.update(kw)
    if kind == "array":
        return ArrayLoader(root, format="raw", dtype="int32", shape=(1,), num_threads=2, **options)
    return EpochLoader(root, num_workers=0, decode="bytes", **options)


def _epoch(loader: Any, epoch: int, stop: int | None = None) -> dict[str, Any]:
    """Read ``epoch`` with an all_reduce per batch; what happened, as plain values."""
    import torch
    import torch.distributed as dist

    batches = 0
    run = loader.epoch(epoch)
    try:
        for _ in run:
            batches += 1
            dist.all_reduce(torch.ones(1))  # the gradient sync of a DDP step
            if batches == stop:
                break
    except Exception as exc:  # what the test checks: the type and the message, per rank
        return {"error": type(exc).__name__, "message": str(exc), "batches": batches}
    return {"batches": batches, "start": run.start_batch}


def _run_case(rank: int, scenario: str, kind: str, base: str, mode: str) -> dict[str, Any]:
    """One loader's run on this rank's node folder under ``base``: what happened, as plain values."""
    root = f"{base}/node{rank}"
    out: dict[str, Any] = {}
    if scenario == "fail":
        with _loader(kind, root) as loader:
            out["epoch0"] = _epoch(loader, 0)
            out["epoch1"] = _epoch(loader, 1)
    elif scenario == "save":
        with _loader(kind, root) as loader:
            out["epoch0"] = _epoch(loader, 0, stop=1)
            Path(f"{base}/state{rank}.json").write_text(json.dumps(loader.state_dict()))
    else:
        with _loader(kind, root, on_resume_mismatch=mode) as loader:
            loader.load_state_dict(json.loads(Path(f"{base}/state{rank}.json").read_text()))
            out["epoch0"] = _epoch(loader, 0)
            out["epoch1"] = _epoch(loader, 1)
    return out


def _rank_main(rank: int, scenario: str, cases: str, base: str, modes: str) -> None:
    """Every case (``folder:kind``, comma-separated) under every mode, in order, on both ranks."""
    from datetime import timedelta

    import torch.distributed as dist

    # A rendezvous file of each run's own: torch's file:// store must not be reused, and a test runs
    # two pairs of ranks (save, resume); a file left by one made the next hang in the loaded suite.
    dist.init_process_group("gloo", init_method=f"file://{base}/store-{scenario}", rank=rank,
                            world_size=2, timeout=timedelta(seconds=60))
    try:
        for case in cases.split(","):
            folder, kind = case.split(":")
            for mode in modes.split(","):
                out = _run_case(rank, scenario, kind, f"{base}/{folder}", mode)
                Path(f"{base}/{folder}/{scenario}-{mode}-rank{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


def _outcomes(base: Path, scenario: str, cases: dict[str, str],
              modes: tuple[str, ...] = ("-",)) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Run ``scenario`` on both ranks for each case (folder under ``base``: kind) and mode, in one pair
    of rank processes; each (folder, mode)'s outcome per rank."""
    run_two_ranks(__file__, [scenario, ",".join(f"{f}:{k}" for f, k in cases.items()), str(base),
                             ",".join(modes)])
    return {(folder, mode): [json.loads((base / folder / f"{scenario}-{mode}-rank{r}.json").read_text())
                             for r in range(2)]
            for folder in cases for mode in modes}


def _gone_on_rank_1(base: Path) -> None:
    """Rank 1's epoch 0 is not on its node; epoch 1 is on both (7 and 8 files)."""
    _publish(base, 0, 0, list(range(5)))
    for node in range(2):
        _publish(base, node, 1, list(range(7 + node)))


def _empty_on_rank_1(base: Path) -> None:
    """Rank 1's epoch 0 holds no file; epoch 1 is on both (4 files each)."""
    _publish(base, 0, 0, list(range(5)))
    _publish(base, 1, 0, [])
    for node in range(2):
        _publish(base, node, 1, list(range(4)))


FAILURES = {"gone-epoch": ("epoch", _gone_on_rank_1), "gone-array": ("array", _gone_on_rank_1),
            "empty-array": ("array", _empty_on_rank_1)}


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[dict[str, Any]]]:
    """Each failure case's outcome per rank, all cases run in turn by one pair of ranks. A case
    whose ranks crashed or hung fails its own test with their outputs; the cases before it stand."""
    base = tmp_path_factory.mktemp("peer-epochs")
    for folder, (_kind, publish) in FAILURES.items():
        (base / folder).mkdir()
        publish(base / folder)
    ranks_said = ""
    try:
        run_two_ranks(__file__, ["fail", ",".join(f"{f}:{kind}" for f, (kind, _) in FAILURES.items()),
                                 str(base), "-"])
    except AssertionError as exc:
        ranks_said = str(exc)

    def outcome(folder: str) -> list[dict[str, Any]]:
        files = [base / folder / f"fail---rank{r}.json" for r in range(2)]
        if not all(f.exists() for f in files):
            pytest.fail(f"{folder}: no outcome from both ranks; {ranks_said}")
        return [json.loads(f.read_text()) for f in files]

    return outcome


@pytest.mark.parametrize("kind", ["epoch", "array"])
def test_an_epoch_gone_on_one_rank_fails_every_rank_then_the_next_runs(
        failed: Callable[[str], list[dict[str, Any]]], kind: str) -> None:
    """Rank 1's epoch 0 is not on its node (wait=False: FileNotFoundError before the batch-count reduce)."""
    zero, one = failed(f"gone-{kind}")
    assert one["epoch0"]["error"] == "FileNotFoundError", one
    assert zero["epoch0"]["error"] == "PeerEpochError", zero
    assert "rank 1" in zero["epoch0"]["message"] and "epoch 0" in zero["epoch0"]["message"]
    assert "FileNotFoundError" in zero["epoch0"]["message"], "the peer's reason"
    assert zero["epoch0"]["batches"] == one["epoch0"]["batches"] == 0
    assert zero["epoch1"] == one["epoch1"] == {"batches": 4, "start": 0}, "in step again after the failure"


def test_a_rank_with_no_files_to_pad_fails_every_rank(failed: Callable[[str], list[dict[str, Any]]]) -> None:
    """Rank 1's epoch 0 is empty: with balance="pad" it fails right after the batch-count reduce."""
    zero, one = failed("empty-array")
    assert one["epoch0"]["error"] == "RuntimeError" and "no files for this rank" in one["epoch0"]["message"]
    assert zero["epoch0"]["error"] == "PeerEpochError" and "rank 1" in zero["epoch0"]["message"], zero
    assert zero["epoch1"] == one["epoch1"] == {"batches": 2, "start": 0}


@pytest.mark.long
def test_a_resume_whose_epoch_changed_on_one_node_is_decided_the_same_on_every_rank(tmp_path: Path) -> None:
    """Both ranks saved their state after batch 1 of epoch 0; then node 1's epoch 0 is cut anew (a cold
    cache: other files, the same count). Restart: both ranks read epoch 0 from its first batch; raise:
    both raise EpochResumeError before any batch, rank 0 naming rank 1."""
    case = tmp_path / "case"
    case.mkdir()
    for node in range(2):
        _publish(case, node, 0, list(range(10 * node, 10 * node + 6)))
        _publish(case, node, 1, list(range(5)))
    zero, one = _outcomes(tmp_path, "save", {case.name: "epoch"})[case.name, "-"]
    assert zero["epoch0"] == one["epoch0"] == {"batches": 1, "start": 0}
    shutil.rmtree(case / "node1" / "epoch-0")
    os.unlink(manifest_path(case / "node1", 0))
    _publish(case, 1, 0, list(range(20, 26)))
    # The restarted job: one pair of ranks resumes with "restart", then with "raise", each loader
    # loading the saved states anew.
    resumed = _outcomes(tmp_path, "resume", {case.name: "epoch"}, ("restart", "raise"))
    zero, one = resumed[case.name, "restart"]
    assert zero["epoch0"] == one["epoch0"] == {"batches": 3, "start": 0}, (zero, one)
    assert zero["epoch1"] == one["epoch1"] == {"batches": 3, "start": 0}
    zero, one = resumed[case.name, "raise"]
    assert one["epoch0"]["error"] == "EpochResumeError", one
    assert "not the one the state" in one["epoch0"]["message"]
    assert zero["epoch0"]["error"] == "EpochResumeError" and "rank 1" in zero["epoch0"]["message"], zero
    assert zero["epoch0"]["batches"] == one["epoch0"]["batches"] == 0
    assert zero["epoch1"] == one["epoch1"] == {"batches": 3, "start": 0}


if __name__ == "__main__":
    _rank_main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
