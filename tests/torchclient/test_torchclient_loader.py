"""EpochLoader over growing epochs on a plain folder with the mount's layout.

``check_loader_over_growing_epochs`` takes only a root, so the same check runs on a real mount (where
the lookup of epoch-N is what cuts it): pass ``progress=None`` there and let the sidecar cut.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torchclient_helpers import GrowingFolder, check_loader_over_growing_epochs

from epochfs.torchclient import EpochLoader, EpochStats, SampleDecodeError
from epochfs.torchclient.plainfolder import publish_epoch


def die_on_bad(path: str) -> torch.Tensor:
    """Decoder whose worker process dies (as if killed for memory) on a file named bad.npy."""
    if path.endswith("bad.npy"):
        os._exit(3)
    return torch.from_numpy(np.load(path))






def _objects(tmp_path: Path, count: int, *, seed: int = 0) -> Path:
    folder = tmp_path / "objects"
    folder.mkdir()
    rng = np.random.default_rng(seed)
    for i in range(count):
        size = int(rng.integers(1, 40_000))
        (folder / f"{i:02x}{i:06d}.bin").write_bytes(rng.bytes(size))
    return folder


def test_two_workers_over_three_growing_epochs_read_every_byte(tmp_path: Path) -> None:
    root = tmp_path / "mnt"
    events: list[tuple[str, int]] = []
    with GrowingFolder(root, _objects(tmp_path, 20), sizes=[7, 13, 20]) as sidecar:

        def progress(line: str) -> None:
            events.append(("wait", int(line.split("waiting for epoch ")[1].split()[0])))
            sidecar.progress(line)

        history = check_loader_over_growing_epochs(root, progress=progress, events=events)
    assert [s.files for s in history] == [7, 13, 20]
    # Epoch n+1 is asked for at the boundary: after the last batch of epoch n, never before.
    for n in (1, 2):
        assert events.index(("wait", n)) > max(i for i, e in enumerate(events) if e == ("batch", n - 1))
    assert sidecar.asked[:2] == [1, 2]


def test_corrupt_sample_raises_naming_the_file_and_the_loader_goes_on(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    objects.mkdir()
    for i in range(6):
        np.save(objects / f"s{i}.npy", np.full((8,), i, np.float32))
    (objects / "s9.npy").write_bytes(b"\x93NUMPY not an array")
    root = tmp_path / "mnt"
    good = {f"s{i}.npy": objects / f"s{i}.npy" for i in range(6)}
    publish_epoch(root, 0, {**good, "s9.npy": objects / "s9.npy"})
    publish_epoch(root, 1, good)
    with EpochLoader(root, batch_size=2, num_workers=2, progress=None) as loader:
        with pytest.raises(SampleDecodeError, match=r"epoch-0/s9\.npy"):
            for _ in loader.epoch(0):
                pass
        assert loader.history[-1].complete is False
        values = sorted(v for batch in loader.epoch(1) for v in batch[:, 0].tolist())
        assert values == [0, 1, 2, 3, 4, 5]
        assert loader.history[-1].complete


def test_split_over_node_ranks_and_stats(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    objects.mkdir()
    for i in range(11):
        np.save(objects / f"{i:02d}.npy", np.array([i], np.int64))
    root = tmp_path / "mnt"
    publish_epoch(root, 0, {p.name: p for p in objects.iterdir()})
    per_rank = []
    for rank in range(2):
        with EpochLoader(root, batch_size=2, num_workers=0, num_replicas=2, rank=rank, seed=3) as loader:
            per_rank.append([int(v) for b in loader.epoch(0) for v in b[:, 0]])
            stats = loader.history[-1]
            assert stats.samples == 6 and stats.batches == 3 and stats.files == 11
            assert stats.bytes == sum((objects / f"{i:02d}.npy").stat().st_size for i in per_rank[-1])
            assert stats.mb_per_s > 0 and "epoch 0: 6 samples in 3 batches" in stats.line()
    assert set(per_rank[0]) | set(per_rank[1]) == set(range(11))
    assert len(per_rank[0] + per_rank[1]) == 12, "11 files over 2 ranks: one repeated as padding"


def test_drop_last_break_and_shuffle_per_epoch(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    objects.mkdir()
    for i in range(10):
        np.save(objects / f"{i:02d}.npy", np.array([i], np.int64))
    root = tmp_path / "mnt"
    publish_epoch(root, 0, {p.name: p for p in objects.iterdir()})
    publish_epoch(root, 1, {p.name: p for p in objects.iterdir()})
    reports: list[EpochStats] = []
    with EpochLoader(root, batch_size=4, num_workers=1, drop_last=True, progress=None,
                     on_epoch_end=reports.append) as loader:
        first = [b[:, 0].tolist() for b in loader.epoch(0)]
        assert [len(b) for b in first] == [4, 4]
        for _ in loader.epoch(1):
            break
        assert reports[-1].complete is False and reports[-1].batches == 1
        again = [b[:, 0].tolist() for b in loader.epoch(1)]
        assert len(again) == 2 and again != first, "epoch 1 has its own permutation"
    assert [r.epoch for r in reports] == [0, 1, 1]


@pytest.mark.parametrize("kwargs, error, match", [
    ({"batch_size": 0}, ValueError, "batch_size"),
    ({"batch_size": 2, "sampler": None}, TypeError, "sets sampler itself"),
    ({"batch_size": 2, "partition": "rack"}, ValueError, "partition"),
    ({"batch_size": 2, "balance": "avg"}, ValueError, "balance"),
    ({"batch_size": 2, "num_replicas": 2, "rank": 2}, ValueError, "rank must be"),
    ({"batch_size": 2, "decode": "tiff"}, ValueError, "decode must be"),
    ({"batch_size": 2, "timeout": -1}, ValueError, "timeout"),
    ({"batch_size": 2, "num_workers": 0, "prefetch_factor": 2}, ValueError, "prefetch_factor"),
])
def test_options_are_validated_up_front(tmp_path: Path, kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        EpochLoader(tmp_path, **kwargs)


def test_starting_an_epoch_closes_the_unfinished_one(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    objects.mkdir()
    for i in range(8):
        np.save(objects / f"{i:02d}.npy", np.array([i], np.int64))
    root = tmp_path / "mnt"
    for epoch in (0, 1):
        publish_epoch(root, epoch, {p.name: p for p in objects.iterdir()})
    with EpochLoader(root, batch_size=2, num_workers=1, progress=None) as loader:
        first = iter(loader.epoch(0))
        next(first)
        values = sorted(int(v) for batch in loader.epoch(1) for v in batch[:, 0])
        assert values == list(range(8)), "the new epoch gets the workers to itself"
        assert next(first, None) is None, "the unfinished epoch was closed"
        assert [(s.epoch, s.complete, s.batches) for s in loader.history] == [(0, False, 1), (1, True, 4)]


def test_node_partition_from_env_and_warning_without_it(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
                "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.warns(UserWarning, match="assuming they all share this node"):
        everywhere = EpochLoader(tmp_path, batch_size=1, num_workers=0)
    assert (everywhere.num_replicas, everywhere.rank, everywhere.progress) == (4, 3, None)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    node = EpochLoader(tmp_path, batch_size=1, num_workers=0)
    assert (node.num_replicas, node.rank) == (2, 1)
    whole = EpochLoader(tmp_path, batch_size=1, num_workers=0, partition="global")
    assert (whole.num_replicas, whole.rank) == (4, 3)


def test_a_dead_worker_fails_the_epoch_and_the_next_epoch_gets_new_workers(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    objects.mkdir()
    for i in range(6):
        np.save(objects / f"{i}.npy", np.array([i], np.int64))
    np.save(objects / "bad.npy", np.array([9], np.int64))
    good = {f"{i}.npy": objects / f"{i}.npy" for i in range(6)}
    root = tmp_path / "mnt"
    publish_epoch(root, 0, {**good, "bad.npy": objects / "bad.npy"})
    publish_epoch(root, 1, good)
    with EpochLoader(root, batch_size=2, num_workers=2, decode=die_on_bad, progress=None) as loader:
        with pytest.raises(RuntimeError, match="exited unexpectedly"):
            for _ in loader.epoch(0):
                pass
        assert sorted(int(v) for batch in loader.epoch(1) for v in batch[:, 0]) == list(range(6))


def test_npz_samples_batch_into_a_dict_of_tensors(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    objects.mkdir()
    for i in range(5):
        np.savez_compressed(objects / f"clip{i}.npz", frames=np.full((2, 4, 4), i, np.uint8),
                            flow=np.full((2, 2, 4, 4), i / 2, np.float32))
    root = tmp_path / "mnt"
    publish_epoch(root, 0, {f"clips/clip{i}.npz": objects / f"clip{i}.npz" for i in range(5)})
    with EpochLoader(root, batch_size=2, num_workers=2, decode="npz", shuffle=False, progress=None) as loader:
        batches = list(loader.epoch(0))
    assert [tuple(b["frames"].shape) for b in batches] == [(2, 2, 4, 4), (2, 2, 4, 4), (1, 2, 4, 4)]
    assert [int(v) for b in batches for v in b["frames"][:, 0, 0, 0]] == [0, 1, 2, 3, 4]
    assert batches[2]["flow"].dtype == torch.float32 and float(batches[2]["flow"].max()) == 2.0


def test_an_epochs_throughput_leaves_out_its_wait_for_the_cut() -> None:
    """An epoch that waited 18 s of its 20 for its cut read 100 MB in 2 s: 50 MB/s, not 5 (issue 21)."""
    from epochfs.torchclient.loader import EpochStats

    stats = EpochStats(epoch=3, files=10, samples=10, batches=1, bytes=100_000_000, seconds=20.0,
                       cut_wait_seconds=18.0, complete=True)
    assert stats.reading_seconds == 2.0 and stats.mb_per_s == 50.0 and stats.samples_per_s == 5.0
    assert "100.0 MB in 2.00s = 50.0 MB/s" in stats.line() and "18.00s for the cut before" in stats.line()


def test_an_epochs_line_gives_sizes_and_rates_in_the_unit_that_fits() -> None:
    """A small epoch read "0.0 MB in 0.05s = 0.1 MB/s" (the wheel check's own line); issue 21."""
    from epochfs.torchclient.loader import EpochStats

    small = EpochStats(epoch=0, files=24, samples=24, batches=3, bytes=44_000, seconds=0.05, complete=True)
    assert "44.0 kB in 0.05s = 880.0 kB/s" in small.line()
    big = EpochStats(epoch=1, files=1, samples=1, batches=1, bytes=3_500_000_000, seconds=2.0, complete=True)
    assert "3.5 GB in 2.00s = 1.8 GB/s" in big.line()
    assert "512 B in" in EpochStats(epoch=2, files=1, samples=1, batches=1, bytes=512, seconds=1.0).line()
