"""What an exploratory bad-input run of the torch client found, each now refused in words or
passed over with a warning: a fifo in an epoch folder without manifest (a read of it blocked for
ever), a manifest entry outside the epoch folder (``/etc/hostname`` was read as a sample) or not
UTF-8 (a bare UnicodeDecodeError), ``epoch_indices`` given a rank past the world (another rank's
indices, silently), a seed past what torch's generator takes (accepted, then failing at the first
shuffle), and an ``EpochDataset`` alive at interpreter exit (an "Exception ignored in __del__"
traceback on stderr). Real folders, real subprocesses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from epochfs.torchclient import EpochDataset, EpochLoader, EpochSampler, ManifestError, epoch_indices
from epochfs.torchclient.layout import manifest_path, read_manifest
from epochfs.torchclient.plainfolder import publish_epoch
from epochfs.torchclient.world import World


def _epoch(root: Path, names: list[str]) -> None:
    objects = root.parent / "objects"
    objects.mkdir(exist_ok=True)
    for name in names:
        np.save(objects / f"{name}.npy", np.arange(4, dtype=np.float32))
    publish_epoch(root, 0, {f"{n}.npy": objects / f"{n}.npy" for n in names})


def test_a_fifo_in_a_walked_epoch_is_passed_over_with_a_warning(tmp_path: Path) -> None:
    folder = tmp_path / "mnt" / "epoch-0"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "pipe.npy")
    np.save(folder / "a.npy", np.arange(3))
    with pytest.warns(UserWarning, match=r"skipped 1 entries that are no regular file .*: pipe\.npy"):
        ds = EpochDataset(tmp_path / "mnt", 0, progress=None)
    assert ds.files == ["a.npy"]
    assert list(ds[0]) == [0, 1, 2]


@pytest.mark.parametrize("entry", ["/etc/hostname", "../../../etc/hostname", "a/../../b.npy", ".."])
def test_a_manifest_entry_outside_the_epoch_folder_is_refused(tmp_path: Path, entry: str) -> None:
    root = tmp_path / "mnt"
    _epoch(root, ["a"])
    path = manifest_path(root, 0)
    lines = path.read_text().splitlines()
    header, first = lines[0], lines[1].split("\t")
    path.write_text("\n".join([header, "\t".join([entry, *first[1:]]), *lines[2:]]) + "\n")
    with pytest.raises(ManifestError, match=rf"{path}: line 2: .* is not a path inside the epoch folder"):
        read_manifest(root, 0)


def test_a_manifest_that_is_not_utf8_is_refused_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "mnt"
    _epoch(root, ["a"])
    path = manifest_path(root, 0)
    path.write_bytes(path.read_bytes().replace(b"a.npy", b"a\xff.npy"))
    with pytest.raises(ManifestError, match=rf"{path}: not UTF-8 text \(at byte \d+\)"):
        read_manifest(root, 0)


@pytest.mark.parametrize(("replicas", "rank", "said"), [
    (4, 7, "rank must be below num_replicas: rank=7, num_replicas=4"),
    (4, -1, "rank must be an int >= 0, got -1"),
    (0, 0, "num_replicas must be an int >= 1, got 0"),
])
def test_epoch_indices_refuses_a_rank_outside_the_world(replicas: int, rank: int, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        epoch_indices(10, num_replicas=replicas, rank=rank, shuffle=True, seed=0, epoch=0, drop_last=False)


def test_a_seed_past_torchs_generator_is_refused_where_it_is_given(tmp_path: Path) -> None:
    root = tmp_path / "mnt"
    _epoch(root, ["a", "b"])
    with pytest.raises(ValueError, match=r"seed must be at most 2\*\*63 - 1, got 18446744073709551616"):
        EpochLoader(root, batch_size=1, num_workers=0, report=False, seed=2**64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = EpochDataset(root, 0, progress=None)
    with pytest.raises(ValueError, match="seed must be at most"):
        EpochSampler(ds, num_replicas=1, rank=0, seed=2**63)
    sampler = EpochSampler(ds, num_replicas=1, rank=0, seed=2**63 - 1)
    sampler.set_epoch(536_870_910)
    assert sorted(sampler) == [0, 1]


def test_a_dataset_alive_at_exit_leaves_stderr_quiet(tmp_path: Path) -> None:
    root = tmp_path / "mnt"
    _epoch(root, ["a"])
    script = f"import epochfs.torchclient as tc\nds = tc.EpochDataset({str(root)!r}, 0, progress=None)\n"
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       check=False)
    assert r.returncode == 0 and r.stderr == "", r.stderr


@pytest.mark.parametrize("size", ["4abc", "4.5", "-1"])
def test_a_world_size_variable_with_more_than_a_number_is_refused(size: str) -> None:
    with pytest.raises(ValueError, match=rf"environment variable WORLD_SIZE='{re.escape(size)}' is not a"):
        World.detect({"RANK": "0", "WORLD_SIZE": size})
    assert World.detect({"RANK": "0", "WORLD_SIZE": " 4 "}).size == 4


@pytest.mark.parametrize(("kwargs", "said"), [({"rank": 0.5, "size": 2}, "rank must be an int, got 0.5"),
                                              ({"rank": "0", "size": 1}, "rank must be an int, got '0'")])
def test_a_world_of_other_than_ints_is_refused(kwargs: dict[str, object], said: str) -> None:
    with pytest.raises(ValueError, match=re.escape(said)):
        World(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "value"), [("epoch", -3), ("epoch", "x"), ("batches_yielded", -5),
                                             ("samples_yielded", 1.5)])
def test_a_loaded_state_with_a_count_out_of_range_is_refused(tmp_path: Path, name: str,
                                                             value: object) -> None:
    root = tmp_path / "mnt"
    _epoch(root, ["a", "b"])
    loader = EpochLoader(root, batch_size=1, num_workers=0, report=False)
    state = {**loader.state_dict(), "epoch": 0, name: value}
    with pytest.raises(ValueError, match=re.escape(f"the loader state's {name} must be a whole number >= 0, "
                                                   f"got {value!r}")):
        loader.load_state_dict(state)
    loader.load_state_dict({**state, name: np.int64(1) if name != "epoch" else np.int64(0)})
