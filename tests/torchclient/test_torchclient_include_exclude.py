"""``include=``/``exclude=`` on EpochDataset, EpochLoader and ArrayLoader (issue 22, "Choose the
files"): over an epoch holding ``arrays/*.npy`` beside ``train/<class>/*.png`` and a few ``*.json``
(a cache shared by readers of different files), a loader that fails on the first PNG reads the
arrays with ``include="*.npy"``; the manifest's order is kept, patterns are checked up front, and
the rule is the sidecar's ``--include``/``--exclude`` one. Plain folders published like the mount
(``publish_epoch``), no sidecar."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from epochfs.torchclient import (
    ArrayLoader,
    ArraySampleError,
    EpochDataset,
    EpochLoader,
    SampleDecodeError,
)
from epochfs.torchclient.layout import manifest_path
from epochfs.torchclient.plainfolder import md5_of, publish_epoch

CLASSES = ("cat", "dog")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Epoch 0 of the issue's prefix: 12 arrays, 6 images per class, 3 JSON files."""
    objects = tmp_path / "objects"
    files: dict[str, Path] = {}
    for i in range(12):
        path = objects / f"arrays/{i:02d}.npy"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, np.full(4, i, dtype=np.float32))
        files[f"arrays/{i:02d}.npy"] = path
    for c in CLASSES:
        for i in range(6):
            path = objects / f"train/{c}/{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes([i]) * 40)
            files[f"train/{c}/{i}.png"] = path
    for rel in ("meta.json", "arrays/index.json", "train/cat/labels.json"):
        path = objects / rel
        path.write_text("{}")
        files[rel] = path
    mnt = tmp_path / "mnt"
    publish_epoch(mnt, 0, files)
    return mnt


def all_files(root: Path) -> list[str]:
    return EpochDataset(root, 0, wait=False).files


def npy(root: Path) -> list[str]:
    return [f for f in all_files(root) if f.endswith(".npy")]


def test_dataset_include_keeps_the_arrays_in_manifest_order(root: Path) -> None:
    everything = EpochDataset(root, 0, wait=False)
    with pytest.raises(SampleDecodeError):  # the issue: the arrays' reader fails on what is beside them
        for i in range(len(everything)):
            EpochDataset(root, 0, wait=False, decode="npy")[i]
    ds = EpochDataset(root, 0, wait=False, decode="npy", include="*.npy")
    assert ds.files == [f for f in everything.files if f.endswith(".npy")] == [
        f"arrays/{i:02d}.npy" for i in range(12)]
    assert ds.excluded == len(everything) - 12 and len(ds) == 12
    assert ds.sizes == [(ds.dir / f).stat().st_size for f in ds.files]
    assert ds.checksums == [md5_of(ds.dir / f) for f in ds.files]
    assert ds.nbytes == sum(ds.sizes)
    assert [int(ds[i][0]) for i in range(len(ds))] == list(range(12))
    assert "excluded=" in repr(ds) and "excluded=" not in repr(everything)


@pytest.mark.parametrize(
    ("globs", "keep"),
    [
        ({"exclude": "*.json"}, lambda f: not f.endswith(".json")),
        ({"exclude": ["**/*.json", "train/dog/**"]}, lambda f: not f.endswith(".json") and "/dog/" not in f),
        ({"include": "train/**", "exclude": "*.json"}, lambda f: f.endswith(".png")),
        ({"include": "train/*/*.png, /*.json"}, lambda f: f.endswith(".png") or f == "meta.json"),
        ({"include": ["arrays/**"], "exclude": "arrays/1?.npy"},
         lambda f: f.startswith("arrays/") and not f.startswith("arrays/1")),
    ],
)
def test_exclude_and_both_from_the_manifest_and_from_a_walk(root: Path, globs: dict, keep) -> None:
    expected = [f for f in all_files(root) if keep(f)]
    assert 0 < len(expected) < len(all_files(root))
    assert EpochDataset(root, 0, wait=False, **globs).files == expected
    manifest_path(root, 0).unlink()  # a plain folder: the list comes from a walk
    walked = EpochDataset(root, 0, wait=False, **globs)
    assert walked.source == "walk" and walked.files == expected


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"include": ""}, "include: an empty pattern"),
        ({"include": "*.npy,"}, "include: an empty pattern in"),
        ({"exclude": ["a\x00b"]}, "exclude: 'a\\x00b': a pattern must not hold a NUL"),
        ({"exclude": "train//x"}, "exclude: 'train//x': an empty path component"),
        ({"include": "a**"}, "'**' must be a whole path component"),
        ({"include": 3}, "include: a comma-separated string or a list of patterns"),
    ],
)
def test_patterns_are_checked_before_the_epoch_is_looked_up(tmp_path: Path, kwargs: dict, words: str) -> None:
    missing = tmp_path / "no-mount"  # looked up, this would be a FileNotFoundError (or a wait)
    for make in (lambda: EpochDataset(missing, 0, wait=False, **kwargs),
                 lambda: EpochLoader(missing, batch_size=2, num_workers=0, report=False, **kwargs),
                 lambda: ArrayLoader(missing, batch_size=2, num_threads=2, report=False, **kwargs)):
        with pytest.raises(ValueError) as info:
            make()
        assert words in str(info.value)


def test_epoch_loader_reads_only_what_include_and_exclude_keep(root: Path) -> None:
    arrays = npy(root)
    plain = EpochLoader(root, batch_size=4, num_workers=0, decode="npy", report=False, progress=None)
    with pytest.raises(SampleDecodeError):
        for _ in plain.epoch(0):
            pass
    loader = EpochLoader(root, batch_size=4, num_workers=0, decode="npy", report=False, progress=None,
                         include="*.npy", shuffle=False)
    batches = list(loader.epoch(0))
    assert torch.cat(batches)[:, 0].tolist() == [float(i) for i in range(12)]
    stats = loader.history[-1]
    assert (stats.files, stats.samples, stats.complete) == (len(arrays), 12, True)
    other = EpochLoader(root, batch_size=5, num_workers=0, decode="bytes", report=False, progress=None,
                        exclude="*.npy,**/*.json", collate_fn=list)
    run = other.epoch(0)
    seen = sum(len(b) for b in run)
    assert run.dataset is not None and seen == len(run.dataset) == 12
    assert all(f.endswith(".png") for f in run.dataset.files)


def test_array_loader_reads_the_arrays_beside_images(root: Path) -> None:
    plain = ArrayLoader(root, batch_size=4, num_threads=2, shuffle=False, report=False, progress=None)
    with pytest.raises(ArraySampleError):
        for _ in plain.epoch(0):
            pass
    plain.close()
    with ArrayLoader(root, batch_size=4, num_threads=2, shuffle=False, report=False, progress=None,
                     include=["arrays/*.npy"], copy=True) as loader:
        values = torch.cat(list(loader.epoch(0)))
    assert values.shape == (12, 4)
    assert values[:, 0].tolist() == [float(i) for i in range(12)]
    assert loader.history[-1].files == 12
