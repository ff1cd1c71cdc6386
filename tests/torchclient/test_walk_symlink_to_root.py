"""The walk of a plain folder does not follow a symlink to a folder above the epoch.

docs/torchclient.md: the walk follows symlinked folders, "not one that leads back to a folder
above it: a loop". Only the epoch folder itself counted as "above", so ``epoch-0/up -> ..`` (the
root) was walked: epoch 0 gained ``up/epoch-1/...`` and ``up/latest/...``, other epochs' files.
Real folders and symlinks; the root also reached through a symlink of its own.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from epochfs.torchclient import EpochDataset
from epochfs.torchclient.epochwalk import walk_epoch


def _root(tmp_path: Path) -> Path:
    """root/epoch-0/x.npy, root/epoch-1/y.npy, root/latest -> epoch-1, and a folder elsewhere."""
    root = tmp_path / "data" / "root"
    for n, name in ((0, "x"), (1, "y")):
        (root / f"epoch-{n}").mkdir(parents=True)
        np.save(root / f"epoch-{n}" / f"{name}.npy", np.zeros(2))
    os.symlink("epoch-1", root / "latest")
    (tmp_path / "elsewhere").mkdir()
    np.save(tmp_path / "elsewhere" / "z.npy", np.zeros(2))
    return root


@pytest.mark.parametrize("link", ["..", "../..", "../../.."])
def test_a_link_to_a_folder_above_the_epoch_is_a_loop(tmp_path: Path, link: str) -> None:
    root = _root(tmp_path)
    os.symlink(link, root / "epoch-0" / "up")  # the root, the folder above it, tmp_path
    with pytest.warns(UserWarning, match=r"symlinked folder\(s\) leading to a folder above them: up$"):
        files = walk_epoch(root, 0)
    assert [rel for rel, _ in files] == ["x.npy"]


def test_through_a_symlinked_root_too(tmp_path: Path) -> None:
    root = _root(tmp_path)
    os.symlink(root, tmp_path / "mnt")  # the reader's path to the root is itself a link
    os.symlink("..", root / "epoch-0" / "up")
    os.symlink(tmp_path / "mnt", root / "epoch-0" / "again")  # the root by its linked name
    with pytest.warns(UserWarning, match="leading to a folder above them"):
        ds = EpochDataset(tmp_path / "mnt", 0, progress=None, wait=False)
    assert ds.files == ["x.npy"]


def test_a_link_to_a_folder_beside_is_still_walked(tmp_path: Path) -> None:
    root = _root(tmp_path)
    os.symlink(tmp_path / "elsewhere", root / "epoch-0" / "more")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing skipped, nothing to warn about
        files = walk_epoch(root, 0)
    assert [rel for rel, _ in files] == ["more/z.npy", "x.npy"]


@pytest.mark.parametrize("target", ["self", "ring"])
def test_a_symlink_that_leads_to_itself_is_skipped_with_a_warning(tmp_path: Path, target: str) -> None:
    """``a -> a`` (or ``b -> c -> b``) in a plain folder: no file and no folder, skipped with the
    walk's one warning as a dangling link is; the walk raised a bare ELOOP before."""
    root = _root(tmp_path)
    epoch = root / "epoch-0"
    if target == "self":
        os.symlink("a", epoch / "a")
    else:
        os.symlink("c", epoch / "b")
        os.symlink("b", epoch / "c")
    with pytest.warns(UserWarning, match="symlink\\(s\\) that lead to themselves"):
        files = walk_epoch(root, 0)
    assert [path for path, _ in files] == ["x.npy"]
