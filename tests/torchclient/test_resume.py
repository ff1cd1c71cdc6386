"""Resuming both loaders mid-epoch (torchclient/resume.py) and ``len()`` of an epoch run.

Samples are raw int32 files holding their own number, so a batch says which samples it holds; the
epochs are published into a plain folder (no sidecar) as the mount lays them out.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from epochfs.torchclient import ArrayLoader, EpochLoader, EpochResumeError
from epochfs.torchclient.epochplan import plan_batches
from epochfs.torchclient.layout import manifest_path
from epochfs.torchclient.plainfolder import publish_epoch

KINDS = ("array", "epoch")
HERE = Path(__file__).parent


def _objects(tmp_path: Path, count: int) -> Path:
    objects = tmp_path / "objects"
    objects.mkdir(exist_ok=True)
    for i in range(count):
        (objects / f"s{i:04d}.raw").write_bytes(np.array([i], dtype=np.int32).tobytes())
    return objects


def _folder(tmp_path: Path, count: int, epochs: int = 1) -> Path:
    """Epoch n holds the first count + n objects (a growing cache)."""
    objects = _objects(tmp_path, count + epochs)
    root = tmp_path / "mnt"
    root.mkdir()
    names = sorted(os.listdir(objects))
    for epoch in range(epochs):
        publish_epoch(root, epoch, {n: objects / n for n in names[:count + epoch]})
    return root


def _loader(kind: str, root: Path, **kw: Any) -> ArrayLoader | EpochLoader:
    options: dict[str, Any] = dict(batch_size=4, report=False, progress=None, wait=False)
    options.update(kw)
    if kind == "array":
        return ArrayLoader(root, format="raw", dtype="int32", shape=(1,), num_threads=2, **options)
    return EpochLoader(root, num_workers=0, decode="bytes", **options)


def _ids(batch: torch.Tensor) -> list[int]:
    return batch.contiguous().view(torch.int32).view(-1).tolist()


def _read(loader: ArrayLoader | EpochLoader, epoch: int, stop: int | None = None) -> list[list[int]]:
    """The batches of ``epoch`` as lists of sample numbers; ``stop``: break after that many."""
    got = []
    for batch in loader.epoch(epoch):
        got.append(_ids(batch))
        if stop is not None and len(got) == stop:
            break
    return got


@pytest.mark.parametrize("kind", KINDS)
def test_state_round_trip_resumes_with_the_remaining_batches(tmp_path: Path, kind: str) -> None:
    root = _folder(tmp_path, 30, epochs=2)
    with _loader(kind, root, num_replicas=2, rank=1) as whole:
        full = _read(whole, 0)
    assert len(full) == 4  # 15 samples for rank 1 in batches of 4
    for k in range(1, len(full)):
        with _loader(kind, root, num_replicas=2, rank=1) as first:
            assert _read(first, 0, stop=k) == full[:k]
            state = first.state_dict()
        state = json.loads(json.dumps(state))  # plain values: a checkpoint holds them as they are
        assert (state["epoch"], state["batches_yielded"], state["samples_yielded"], state["batches"],
                state["complete"], state["files"]) == (0, k, 4 * k, 4, False, 30)
        with _loader(kind, root, num_replicas=2, rank=1) as second:
            second.load_state_dict(state)
            assert second.state_dict() == state, "a loaded state is saved again unchanged"
            assert second.next_epoch == 0
            run = second.epoch(0)
            assert len(run) == 4, "len() counts the whole epoch, the consumed batches included"
            assert _read_run(run) == full[k:]
            assert run.start_batch == k
            after = second.state_dict()
            assert (after["batches_yielded"], after["complete"], second.next_epoch) == (4, True, 1)
            assert second.history[-1].batches == 4 - k
            # The next epoch is a fresh one, read from its first batch.
            with _loader(kind, root, num_replicas=2, rank=1) as reference:
                assert _read(second, 1) == _read(reference, 1)


def _read_run(run: Any) -> list[list[int]]:
    return [_ids(batch) for batch in run]


def _flat(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_saved_at_the_end_of_an_epoch_starts_the_next_one(tmp_path: Path, kind: str) -> None:
    root = _folder(tmp_path, 9, epochs=2)
    with _loader(kind, root) as first:
        assert first.next_epoch == 0 and first.state_dict()["epoch"] is None
        _read(first, 0)
        state = first.state_dict()
    with _loader(kind, root) as second:
        second.load_state_dict(state)
        assert second.next_epoch == 1
        got = _read(second, 1)
    assert sorted(_flat(got)) == list(range(10))


@pytest.mark.parametrize("kind", KINDS)
def test_another_ranks_state_resumes_this_rank_at_the_same_position(tmp_path: Path, kind: str) -> None:
    """A checkpoint written by rank 0 only (Lightning's) restores every rank: counts are equal."""
    root = _folder(tmp_path, 23)
    with _loader(kind, root, num_replicas=3, rank=0) as zero:
        _read(zero, 0, stop=1)
        state = zero.state_dict()
    with _loader(kind, root, num_replicas=3, rank=2) as whole:
        full = _read(whole, 0)
    with _loader(kind, root, num_replicas=3, rank=2) as two:
        two.load_state_dict(state)
        assert _read(two, 0) == full[1:]
    with _loader(kind, root, num_replicas=3, rank=2, balance="none") as unbalanced, \
            pytest.raises(ValueError, match="rank 0's and this is rank 2"):
        unbalanced.load_state_dict(dict(state, balance="none"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_made_with_other_settings_is_refused(tmp_path: Path, kind: str) -> None:
    root = _folder(tmp_path, 12)
    with _loader(kind, root) as first:
        _read(first, 0, stop=1)
        state = first.state_dict()
    with _loader(kind, root, batch_size=3, seed=5) as other:
        with pytest.raises(ValueError, match=r"batch_size=4 \(this loader: 3\), seed=0 \(this loader: 5\)"):
            other.load_state_dict(state)
        with pytest.raises(ValueError, match="version"):
            other.load_state_dict(dict(state, version=99))


@pytest.mark.parametrize("kind", KINDS)
def test_a_resumed_epoch_that_is_gone_from_the_node_is_an_error_naming_it(tmp_path: Path, kind: str) -> None:
    root = _folder(tmp_path, 12)
    with _loader(kind, root) as first:
        _read(first, 0, stop=1)
        state = first.state_dict()
    shutil.rmtree(root / "epoch-0")  # the node was drained: a new one has nothing
    manifest_path(root, 0).unlink()
    with _loader(kind, root) as second:
        second.load_state_dict(state)
        with pytest.raises(EpochResumeError, match=r"cannot resume epoch 0 at batch 1 of 3: the epoch is not "
                           r"on this node any more .*on_resume_mismatch='restart'") as caught:
            _read(second, 0)
        assert (caught.value.epoch, caught.value.position) == (0, 1)
        assert second.history == [] or not second.history[-1].complete


@pytest.mark.parametrize("kind", KINDS)
def test_a_resumed_epoch_cut_anew_is_refused_or_restarted(tmp_path: Path, kind: str,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A cold cache: the sidecar cut its own epoch 0 (other files) under the checkpoint's number."""
    root = _folder(tmp_path, 12)
    with _loader(kind, root) as first:
        _read(first, 0, stop=2)
        state = first.state_dict()
    for changed in ("count", "paths"):
        shutil.rmtree(root / "epoch-0")
        manifest_path(root, 0).unlink()
        objects = _objects(tmp_path, 14)
        names = sorted(os.listdir(objects))
        names = names[:13] if changed == "count" else names[:11] + names[13:14]
        publish_epoch(root, 0, {n: objects / n for n in names})
        with _loader(kind, root) as second:
            second.load_state_dict(state)
            with pytest.raises(EpochResumeError, match="epoch 0 on this node is not the one the state was "
                               "saved in"):
                _read(second, 0)
        with _loader(kind, root, on_resume_mismatch="restart") as third, caplog.at_level(logging.WARNING):
            third.load_state_dict(state)
            got = _read(third, 0)
            assert sorted(_flat(got)) == sorted(int(n[1:5]) for n in names), "the new epoch, whole"
            assert "training on it from its first batch" in caplog.text
            assert third.state_dict()["batches_yielded"] == len(got)


@pytest.mark.parametrize("kind", KINDS)
def test_a_loaded_state_of_another_epoch_is_not_applied(tmp_path: Path, kind: str) -> None:
    root = _folder(tmp_path, 12, epochs=2)
    with _loader(kind, root) as first:
        _read(first, 0, stop=1)
        state = first.state_dict()
    with _loader(kind, root) as second, _loader(kind, root) as reference:
        second.load_state_dict(state)
        assert _read(second, 1) == _read(reference, 1)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("drop_last", [False, True])
def test_len_is_the_batches_each_rank_gets(tmp_path: Path, kind: str, drop_last: bool) -> None:
    root = _folder(tmp_path, 17)
    for world in (1, 2, 3, 4, 5, 8):
        counts = []
        for rank in range(world):
            with _loader(kind, root, num_replicas=world, rank=rank, batch_size=3,
                         drop_last=drop_last) as loader:
                run = loader.epoch(0)
                length = len(run)
                assert length == len(_read_run(run)) == loader.history[-1].batches
                expected, _ = plan_batches(17, epoch=0, batch_size=3, num_replicas=world, rank=rank,
                                           shuffle=True, seed=0, drop_last=drop_last, balance="pad")
                assert length == len(expected)
                counts.append(length)
        assert len(set(counts)) == 1, f"world {world}: equal on every rank"


def test_len_looks_the_epoch_up_once(tmp_path: Path) -> None:
    """``len()`` before the loop plans the epoch; the loop uses that plan (one lookup, one all_reduce)."""
    root = _folder(tmp_path, 10)
    with _loader("array", root, retry_seconds=0) as loader:
        run = loader.epoch(0)
        assert len(run) == 3
        shutil.rmtree(root / "epoch-0")  # the plan holds the epoch's list (and, on a mount, its hold)
        manifest_path(root, 0).unlink()
        with pytest.raises(Exception, match="epoch-0"):  # reads fail, but no second lookup happened
            _read_run(run)
        with pytest.raises(FileNotFoundError, match="epoch 0 is not under"):
            len(loader.epoch(0))


@pytest.mark.long
@pytest.mark.parametrize("kind", KINDS)
def test_killed_mid_epoch_and_resumed_from_the_checkpoint(tmp_path: Path, kind: str) -> None:
    """A training process writes the loader's state after every batch and is SIGKILLed mid-epoch; the
    restarted one reads exactly the rest of the epoch for its rank: nothing missing, nothing twice."""
    objects = _objects(tmp_path, 24)
    root = tmp_path / "mnt"
    root.mkdir()
    publish_epoch(root, 0, {n: objects / n for n in sorted(os.listdir(objects))})
    ckpt, log = tmp_path / "loader.pt", tmp_path / "seen.log"
    command = [sys.executable, str(HERE / "resume_train.py"), str(root), str(ckpt), str(log), kind, "1", "2"]
    first = subprocess.Popen([*command, "2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None and first.stdout.readline() == "paused\n"
        os.kill(first.pid, signal.SIGKILL)
    finally:
        first.wait(timeout=60)
    assert first.returncode == -signal.SIGKILL
    before = [line.split("\t")[1].split() for line in log.read_text().splitlines()]
    assert len(before) == 2 and torch.load(ckpt)["batches_yielded"] == 2
    second = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0 and second.stdout == "done\n", second.stderr
    lines = log.read_text().splitlines()
    assert all(line.startswith("0\t") for line in lines), "the restarted process resumed epoch 0"
    after = [line.split("\t")[1].split() for line in lines[len(before):]]
    plan, _ = plan_batches(24, epoch=0, batch_size=5, num_replicas=2, rank=1, shuffle=True, seed=0,
                           drop_last=False, balance="pad")
    assert [list(map(int, b)) for b in before + after] == plan, "the rank's epoch, in its order"
    seen_before = Counter(int(i) for b in before for i in b)
    seen_after = Counter(int(i) for b in after for i in b)
    assert not seen_before & seen_after, "nothing after the checkpoint was read before it"
    assert sorted((seen_before + seen_after).elements()) == sorted(_flat(plan))
