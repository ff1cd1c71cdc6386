"""``include=``/``exclude=`` that leave out every file of an epoch that has files are said.

A typo'd or wrong-case pattern (``"trian/*.npz"``, ``"train/*.NPZ"`` over ``.npz`` files) made a
dataset of no file: ``EpochLoader``, ``ArrayLoader`` and ``EpochDataset`` trained zero steps every
epoch without a word, and ``EpochImageFolder`` with an include of its own too. All four share
``EpochDataset``'s filter, which now names the patterns, the epoch's file count and a few names:
a warning on an epoch of fewer than ``NOTHING_KEPT_RAISES`` files (an early epoch of a few samples
may hold only files the patterns rightly leave out, ``x.json`` beside ``x.jpg``: a raise there
killed a real run at epoch 0), a ValueError from that many; an epoch with no file at all stays an
empty dataset. The epoch stats line counts the files left out apart from those read. Plain
folders published like the mount (``publish_epoch``).
"""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from epochfs.torchclient import ArrayLoader, EpochDataset, EpochImageFolder, EpochLoader
from epochfs.torchclient.dataset import NOTHING_KEPT_RAISES
from epochfs.torchclient.plainfolder import publish_epoch


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Epoch 0 of arrays.md's layout: 12 ``train/NN.npz`` of x (float32, 4) and y."""
    files: dict[str, Path] = {}
    for i in range(12):
        path = tmp_path / "objects" / f"train/{i:02d}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, x=np.full(4, i, np.float32), y=np.array(i))
        files[f"train/{i:02d}.npz"] = path
    publish_epoch(tmp_path / "mnt", 0, files)
    return tmp_path / "mnt"


def _npz_epoch(mnt: Path, objects: Path, count: int) -> Path:
    files: dict[str, Path] = {}
    for i in range(count):
        path = objects / f"train/{i:04d}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, x=np.full(4, i, np.float32))
        files[f"train/{i:04d}.npz"] = path
    publish_epoch(mnt, 0, files)
    return mnt


@pytest.mark.parametrize("include", ["trian/*.npz", "train/*.NPZ", "*.npy"])
def test_a_small_epoch_whose_files_the_patterns_all_leave_out_is_warned(
        root: Path, include: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="epochfs.torchclient"):
        dataset = EpochDataset(root, 0, progress=None, include=include)
    assert len(dataset) == 0 and dataset.excluded == 12
    (said,) = [r.getMessage() for r in caplog.records if "keep none" in r.getMessage()]
    assert re.search(r"keep none of epoch 0's 12 files .*case-sensitive.*trains no step", said), said
    assert repr(include) in said


def test_a_large_epoch_whose_files_the_patterns_all_leave_out_is_an_error(tmp_path: Path) -> None:
    root = _npz_epoch(tmp_path / "mnt", tmp_path / "objects", NOTHING_KEPT_RAISES)
    with pytest.raises(ValueError, match=rf"include='trian/\*\.npz' keep none of epoch 0's "
                                         rf"{NOTHING_KEPT_RAISES} files \(e\.g\. train/0000\.npz"):
        EpochDataset(root, 0, progress=None, include="trian/*.npz")
    with EpochLoader(root, batch_size=4, decode="npz", include="trian/*.npz", num_workers=0,
                     report=False, progress=None) as loader, pytest.raises(ValueError, match="keep none"):
        list(loader.epoch(0))
    with ArrayLoader(root, batch_size=4, include="trian/*.npz", member="x", report=False,
                     progress=None) as arrays, pytest.raises(ValueError, match="keep none"):
        list(arrays.epoch(0))
    with pytest.raises(ValueError, match=r"include='train/\*\*' and exclude='\*\.npz' keep none"):
        EpochDataset(root, 0, progress=None, include="train/**", exclude="*.npz")


def test_both_loaders_go_on_past_a_small_epoch_of_no_kept_file(
        root: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="epochfs.torchclient"):
        with EpochLoader(root, batch_size=4, decode="npz", include="trian/*.npz", num_workers=0,
                         report=False, progress=None) as loader:
            assert list(loader.epoch(0)) == []
        with ArrayLoader(root, batch_size=4, include="trian/*.npz", member="x", report=False,
                         progress=None) as arrays:
            assert list(arrays.epoch(0)) == []
    assert sum("keep none of epoch 0's 12 files" in r.getMessage() for r in caplog.records) >= 2


def test_an_image_folder_with_an_include_of_no_image(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "img"
    for i, name in enumerate(["ant/0.JPEG", "ant/1.jpg", "cat/2.PNG"]):
        path = root / "epoch-0" / "train" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((4, 4, 3), i, np.uint8)).save(path, format="PNG")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no .epochfs/classes.json"
        with caplog.at_level(logging.WARNING, logger="epochfs.torchclient"):
            assert len(EpochImageFolder(root, 0, progress=None, include="train/**/*.jpeg")) == 0
        assert len(EpochImageFolder(root, 0, progress=None)) == 3  # the default include, any case
    assert any("include='train/**/*.jpeg' keep none of epoch 0's 3 files" in r.getMessage()
               for r in caplog.records)


def test_an_epoch_with_no_file_stays_an_empty_dataset(tmp_path: Path) -> None:
    publish_epoch(tmp_path / "mnt", 0, {})
    empty = EpochDataset(tmp_path / "mnt", 0, progress=None, include="trian/*.npz")
    assert len(empty) == 0 and empty.excluded == 0


def test_the_stats_line_counts_the_files_left_out(root: Path) -> None:
    with EpochLoader(root, batch_size=4, decode="npz", include="train/0*.npz", num_workers=0,
                     report=False, progress=None, shuffle=False) as loader:
        assert len(list(loader.epoch(0))) == 3
        line = loader.history[-1].line()
    assert "(10 of the epoch's 12 files, 2 left out)" in line, line
    with EpochLoader(root, batch_size=4, decode="npz", num_workers=0, report=False, progress=None) as every:
        list(every.epoch(0))
        assert "(12 files in the epoch)" in every.history[-1].line()
