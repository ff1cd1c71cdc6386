"""find_classes under a dataset folder named like an epoch reads the mount's classes.json.

``find_classes`` took the innermost ``epoch-N`` component of the path for the mount's epoch folder:
for ``<mount>/epoch-0/runs/epoch-3`` it looked for ``<mount>/epoch-0/runs/.epochfs/classes.json``
(ClassMapError "has no .epochfs/classes.json"), and for a dataset whose keys start ``epoch-1/``
and an ``.epochfs/classes.json`` sample of its own it parsed that sample (UnicodeDecodeError).
docs/torchclient.md: it "reads the same map for any folder inside epoch-N/". It now finds the
mount as :mod:`epochfs.torchclient.lost` does (the outermost ``epoch-N`` beside ``.epochfs/``,
one shared helper). A plain folder shaped like a published view (as the folder view publishes
it: epochs, ``latest``, ``.epochfs/classes.json``); the mount serves the same layout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from epochfs.torchclient import ClassMapError, find_classes
from epochfs.torchclient.layout import format_classes
from epochfs.torchclient.lost import _mount_root

FOLDERS = ["runs", "runs/epoch-3", "runs/epoch-3/cat", "runs/epoch-3/dog", "train", "train/cat",
           ".epochfs", "epoch-1", "epoch-1/bird"]


def _view(root: Path) -> Path:
    """A published view: epoch 0 holds ``runs/epoch-3/{cat,dog}``, ``train/cat`` and the dataset's
    own sample ``.epochfs/classes.json`` (bytes that are no JSON) and ``epoch-1/bird``."""
    for folder in FOLDERS:
        (root / "epoch-0" / folder).mkdir(parents=True, exist_ok=True)
    (root / "epoch-0" / ".epochfs" / "classes.json").write_bytes(b"\xff\xfe not a map \x00")
    (root / ".epochfs").mkdir()
    (root / ".epochfs" / "classes.json").write_text(format_classes(FOLDERS), encoding="utf-8")
    (root / "latest").symlink_to("epoch-0")
    return root


def test_a_dataset_folder_named_epoch_n_reads_the_mounts_map(tmp_path: Path) -> None:
    view = _view(tmp_path / "view")
    assert find_classes(view / "epoch-0" / "runs" / "epoch-3") == (["cat", "dog"], {"cat": 0, "dog": 1})
    assert find_classes(view / "latest" / "runs" / "epoch-3") == (["cat", "dog"], {"cat": 0, "dog": 1})
    assert find_classes(view / "epoch-0" / "train") == (["cat"], {"cat": 0})


def test_a_dataset_folder_epoch_n_beside_its_own_control_folder_reads_the_mounts_map(tmp_path: Path) -> None:
    view = _view(tmp_path / "view")
    # epoch-0/epoch-1 has an .epochfs/ beside it too (the dataset's): the outermost one is the mount.
    assert find_classes(view / "epoch-0" / "epoch-1") == (["bird"], {"bird": 0})
    top = {"runs": 0, "train": 1, ".epochfs": 2, "epoch-1": 3}
    assert find_classes(view / "epoch-0") == (list(top), top)


def test_the_client_names_one_mount_for_classes_and_lost_samples(tmp_path: Path) -> None:
    from epochfs.torchclient.mountroot import mount_root  # the one helper both use

    view = _view(tmp_path / "view")
    sample = view / "epoch-0" / "runs" / "epoch-3" / "cat" / "1.jpg"
    assert _mount_root(str(sample)) == mount_root(sample.parent) == view
    relative = os.path.relpath(sample, Path.cwd())
    assert Path(_mount_root(relative) or "").resolve() == view.resolve()


def test_a_plain_copy_of_an_epoch_keeps_the_nearest_epoch_folder(tmp_path: Path) -> None:
    """No ``.epochfs/`` anywhere: the nearest ``epoch-N`` is the epoch, and there is no map."""
    (tmp_path / "epoch-0" / "runs" / "epoch-3").mkdir(parents=True)
    with pytest.raises(ClassMapError, match=r"epoch-0/runs has no \.epochfs/classes\.json"):
        find_classes(tmp_path / "epoch-0" / "runs" / "epoch-3")
    with pytest.raises(ClassMapError, match="not inside an epoch-N/ folder"):
        find_classes(tmp_path)
