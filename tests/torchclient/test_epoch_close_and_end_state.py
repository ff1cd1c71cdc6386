"""Where an epoch ends, as the loaders record it: a loader closed mid-epoch, a state saved right after
the last batch, and ``run.start_batch`` of a resumed run before its loop (docs/torchclient.md,
"Breaking out" and "Resuming mid-epoch").

Why these matter: a resume trusts ``complete`` and ``batches_yielded``. An epoch recorded complete
when it was cut short skips its remaining samples for good; one recorded unfinished after its last
batch sends the restarted job back into an epoch the node may have retired. Samples are raw int32
files holding their own number, published into a plain folder (no sidecar) as the mount lays them out.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from epochfs.torchclient import ArrayLoader, EpochLoader
from epochfs.torchclient.plainfolder import publish_epoch

# (loader kind, worker processes): EpochLoader's DataLoader with and without workers, ArrayLoader.
LOADERS = [("epoch", 0), ("epoch", 2), ("array", 0)]


def _folder(tmp_path: Path, counts: list[int]) -> Path:
    """Epoch n holds samples 0 .. counts[n] - 1."""
    objects = tmp_path / "objects"
    objects.mkdir()
    for i in range(max(counts)):
        (objects / f"s{i:04d}.raw").write_bytes(np.array([i], dtype=np.int32).tobytes())
    root = tmp_path / "mnt"
    root.mkdir()
    for epoch, count in enumerate(counts):
        publish_epoch(root, epoch, {f"s{i:04d}.raw": objects / f"s{i:04d}.raw" for i in range(count)})
    return root


def _loader(kind: str, workers: int, root: Path, **kw: Any) -> ArrayLoader | EpochLoader:
    options: dict[str, Any] = dict(batch_size=3, report=False, progress=None, wait=False)
    options.update(kw)
    if kind == "array":
        return ArrayLoader(root, format="raw", dtype="int32", shape=(1,), num_threads=2, **options)
    return EpochLoader(root, num_workers=workers, decode="bytes", **options)


def _ids(batch: torch.Tensor) -> list[int]:
    return batch.contiguous().view(torch.int32).view(-1).tolist()


@pytest.mark.parametrize(("kind", "workers"), LOADERS)
def test_closing_the_loader_mid_epoch_records_an_incomplete_epoch(tmp_path: Path, kind: str,
                                                                    workers: int) -> None:
    root = _folder(tmp_path, [12])
    loader = _loader(kind, workers, root)
    seen: list[int] = []
    for number, batch in enumerate(loader.epoch(0)):
        seen += _ids(batch)
        if number == 0:
            loader.close()  # a preemption handler, or a `with` block left mid-loop
    state = loader.state_dict()
    assert len(seen) == 3, "the loop ends with the loader that served it"
    assert not loader.history[-1].complete
    assert (state["batches_yielded"], state["batches"], state["complete"]) == (1, 4, False)
    assert loader.next_epoch == 0
    # The state resumes the epoch where it stopped.
    with _loader(kind, workers, root) as again:
        again.load_state_dict(state)
        rest = [i for batch in again.epoch(again.next_epoch) for i in _ids(batch)]
    assert sorted(seen + rest) == list(range(12))


@pytest.mark.parametrize(("kind", "workers"), LOADERS)
def test_a_state_saved_after_the_last_step_resumes_the_next_epoch(tmp_path: Path, kind: str,
                                                                  workers: int) -> None:
    root = _folder(tmp_path, [6, 8, 10])
    with _loader(kind, workers, root) as first:
        for _batch in first.epoch(1):
            state = first.state_dict()  # after each step, as the docs' loop checkpoints
    assert (state["epoch"], state["batches_yielded"], state["batches"], state["complete"]) == (1, 3, 3, True)
    # The node retired epoch 1 while the job was down: the restarted job goes on with epoch 2.
    os.rename(root / "epoch-1", tmp_path / "retired")
    with _loader(kind, workers, root) as second:
        second.load_state_dict(state)
        assert second.next_epoch == 2
        got = sorted(i for batch in second.epoch(second.next_epoch) for i in _ids(batch))
        assert second.history[-1].complete
    assert got == list(range(10))


@pytest.mark.parametrize("mode", ["raise", "restart"])
def test_an_all_yielded_state_not_marked_complete_resumes_nothing(tmp_path: Path, mode: str) -> None:
    """A state saved after the last step by an epochfs that left it incomplete: every batch was
    consumed, so it is the end of its epoch, not a position in it to resume or start over."""
    root = _folder(tmp_path, [6, 8, 10])
    with _loader("array", 0, root) as first:
        for _batch in first.epoch(1):
            state = first.state_dict()
    state["complete"] = False
    with _loader("array", 0, root, on_resume_mismatch=mode) as second:
        second.load_state_dict(state)
        assert second.next_epoch == 2
        assert second.state_dict()["complete"]


@pytest.mark.parametrize(("kind", "workers"), LOADERS)
def test_start_batch_is_known_once_the_run_is_measured(tmp_path: Path, kind: str, workers: int) -> None:
    root = _folder(tmp_path, [10])
    with _loader(kind, workers, root, batch_size=2) as first:
        batches = iter(first.epoch(0))
        consumed = [_ids(next(batches)) for _ in range(3)]
        state = first.state_dict()
        del batches
    with _loader(kind, workers, root, batch_size=2) as second:
        second.load_state_dict(state)
        run = second.epoch(second.next_epoch)
        # What tqdm(run, total=len(run), initial=run.start_batch) is given, before the loop.
        total, initial = len(run), run.start_batch
        assert (total, initial) == (5, 3)
        assert second.state_dict() == state, "measuring the run does not move the saved position"
        rest = [_ids(batch) for batch in run]
    assert len(rest) == total - initial
    assert sorted(i for batch in consumed + rest for i in batch) == list(range(10))


def test_an_epoch_whose_workers_stop_under_it_is_incomplete(tmp_path: Path) -> None:
    """``close()`` from inside the run (a signal handler that runs while the run waits for a batch)
    cannot close the running generator; it stops the workers, and torch's stopped iterator then
    ends, silently, after handing out any batch it had received early, out of turn (the stopped
    workers' batches skipped). The run yields none of those and records the epoch incomplete, at
    the position it reached, so a resume reads exactly the rest. The workers are stopped here
    between two batches, by the part close() stops them with."""
    root = _folder(tmp_path, [12])
    with _loader("epoch", 2, root) as loader:
        assert isinstance(loader, EpochLoader)
        seen: list[int] = []
        for number, batch in enumerate(loader.epoch(0)):
            seen += _ids(batch)
            if number == 0:
                loader._workers.close()
        state = loader.state_dict()
        assert len(seen) == 3, "no batch after the workers stopped"
        assert not loader.history[-1].complete
        assert (state["batches_yielded"], state["complete"], loader.next_epoch) == (1, False, 0)
        loader.load_state_dict(state)
        rest = [i for batch in loader.epoch(0) for i in _ids(batch)]
    assert sorted(seen + rest) == list(range(12))
