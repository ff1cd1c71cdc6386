"""A plain folder (no manifest) is walked as any reader of it would: symlinked folders are followed.

The docs say the client works on any folder shaped like the mount and walks it without a manifest.
A folder linked in (``epoch-0/b -> /data/b``) must contribute its files (it contributed none: a
dataset could be empty and train zero steps without a word), a link back to a folder above must not
recurse forever, and one dangling symlink is skipped with a warning at once, not retried for
``retry_seconds`` as if the mount were away and then failing the whole listing.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from epochfs.torchclient import EpochDataset
from epochfs.torchclient.epochwalk import walk_epoch


def make_epoch(tmp_path: Path) -> tuple[Path, Path]:
    """root/epoch-0/a/{0,1}.npy and root/epoch-0/b -> elsewhere/ holding {0,1}.npy."""
    root = tmp_path / "root"
    epoch = root / "epoch-0"
    (epoch / "a").mkdir(parents=True)
    other = tmp_path / "elsewhere"
    other.mkdir()
    for i in range(2):
        np.save(epoch / "a" / f"{i}.npy", np.array([i]))
        np.save(other / f"{i}.npy", np.array([10 + i]))
    os.symlink(other, epoch / "b")
    return root, epoch


def test_a_symlinked_folder_is_walked(tmp_path: Path) -> None:
    root, _ = make_epoch(tmp_path)
    ds = EpochDataset(root, 0, decode="npy", progress=None, wait=False, retry_seconds=5)
    assert ds.source == "walk"
    assert ds.files == ["a/0.npy", "a/1.npy", "b/0.npy", "b/1.npy"]
    assert [int(ds[i][0]) for i in range(4)] == [0, 1, 10, 11]


def test_class_folders_linked_in_are_classes(tmp_path: Path) -> None:
    root, _ = make_epoch(tmp_path)
    ds = EpochDataset(root, 0, decode="npy", progress=None, wait=False, label="folder", classes=["a", "b"])
    assert ds.targets == [0, 0, 1, 1]


def test_a_link_to_a_folder_above_is_not_followed_forever(tmp_path: Path) -> None:
    root, epoch = make_epoch(tmp_path)
    os.symlink(epoch, epoch / "a" / "up")          # back to the epoch folder
    os.symlink(".", tmp_path / "elsewhere" / "self")  # the linked folder to itself
    with pytest.warns(UserWarning, match=r"2 symlinked folder\(s\) leading to a folder above them"):
        listing = walk_epoch(root, 0)
    paths = [p for p, _ in listing]
    assert "a/0.npy" in paths and "b/1.npy" in paths
    assert len(paths) == len(set(paths)), "each path once"
    assert not any(p.startswith(("a/up/", "b/self/")) for p in paths)


def test_a_dangling_symlink_is_skipped_with_a_warning_not_retried(tmp_path: Path) -> None:
    root, epoch = make_epoch(tmp_path)
    os.symlink(tmp_path / "nope.npy", epoch / "a" / "dangling.npy")
    said = r"skipped 1 dangling symlink\(s\) \(target missing\): a/dangling\.npy"
    with pytest.warns(UserWarning, match=said):
        ds = EpochDataset(root, 0, decode="npy", progress=None, wait=False, retry_seconds=5)
    assert ds.files == ["a/0.npy", "a/1.npy", "b/0.npy", "b/1.npy"]


def test_a_walk_without_links_says_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "epoch-0" / "x").mkdir(parents=True)
    (root / "epoch-0" / "x" / "f.bin").write_bytes(b"abc")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert walk_epoch(root, 0) == [("x/f.bin", 3)]
    assert walk_epoch(root, 1) == [], "an epoch folder that is not there walks empty (the caller looks again)"
