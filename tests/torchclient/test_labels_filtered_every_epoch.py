"""Without ``classes.json`` two identical epochs number their classes the same.

A plain folder shaped like the mount (no ``.epochfs/classes.json``) numbers the classes from the
class folders of the epochs up to this one. This epoch's folders were counted from the files the
dataset reads (its ``include``; the image files by default under ``decode="image"``), the earlier
epochs' from every file: a ``train/.ipynb_checkpoints/`` that Jupyter leaves beside the classes (no
image in it) was no class in epoch 0 and the first class in epoch 1, so every label moved by one
between two epochs of the very same files, silently. A class is now a folder holding at least one
file the dataset reads, in every epoch alike.

Epochs are published by :func:`~epochfs.torchclient.plainfolder.publish_epoch` (manifests, as the
view writes them) or made as bare folders (no manifest: the earlier epochs are walked)."""

from __future__ import annotations

import io
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from epochfs.torchclient import EpochDataset, EpochImageFolder, EpochLoader
from epochfs.torchclient.plainfolder import publish_epoch

NOTEBOOK = "train/.ipynb_checkpoints/explore-checkpoint.ipynb"


def _png() -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(out, format="PNG")
    return out.getvalue()


def _same_files_twice(tmp_path: Path, files: dict[str, bytes], *, manifests: bool) -> Path:
    """Epochs 0 and 1 holding exactly ``files``; with ``manifests`` as the view publishes them,
    else as bare folders of files (read by a walk)."""
    root = tmp_path / "mnt"
    objects = tmp_path / "objects"
    objects.mkdir()
    links: dict[str, Path] = {}
    for rel, body in files.items():
        target = objects / rel.replace("/", "_")
        target.write_bytes(body)
        links[rel] = target
    for epoch in (0, 1):
        if manifests:
            publish_epoch(root, epoch, dict(links))
            continue
        for rel, target in links.items():
            path = root / f"epoch-{epoch}" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(target, path)
    return root


@pytest.mark.parametrize("manifests", [True, False], ids=["manifests", "walk"])
def test_a_folder_of_no_image_is_no_class_in_any_epoch(tmp_path: Path, manifests: bool) -> None:
    png = _png()
    root = _same_files_twice(tmp_path, {"train/ant/0.png": png, "train/bee/0.png": png,
                                        "train/cat/0.png": png, NOTEBOOK: b"{}"}, manifests=manifests)
    want = {"ant": 0, "bee": 1, "cat": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no .epochfs/classes.json": tested elsewhere
        for epoch in (0, 1):
            train = EpochImageFolder(root, epoch, "train", progress=None)
            assert (epoch, train.class_to_idx, train.targets) == (epoch, want, [0, 1, 2])
            assert train.excluded == 1  # the notebook
        loader = EpochLoader(root, batch_size=8, decode="image", label="folder", class_root="train",
                             include="*.png", num_workers=0, shuffle=False, report=False, progress=None)
        try:
            labels = [[y.tolist() for _, y in loader.epoch(epoch)] for epoch in (0, 1)]
        finally:
            loader.close()
    assert labels == [[[0, 1, 2]], [[0, 1, 2]]]


def test_exclude_decides_the_classes_of_every_epoch(tmp_path: Path) -> None:
    """The same through ``exclude=`` with another decoder: ``train/meta/`` holds only JSON, which
    the dataset leaves out, so it is no class in epoch 1 either."""
    root = _same_files_twice(tmp_path, {"train/ant/0.bin": b"a", "train/cat/0.bin": b"c",
                                        "train/meta/info.json": b"{}"}, manifests=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        maps = [EpochDataset(root, epoch, decode="bytes", label="folder", class_root="train",
                             exclude="*.json", progress=None).class_to_idx for epoch in (0, 1)]
        # Without the filter the JSON folder is a class in both epochs alike.
        every = [EpochDataset(root, epoch, decode="bytes", label="folder", class_root="train",
                              progress=None).class_to_idx for epoch in (0, 1)]
    assert maps == [{"ant": 0, "cat": 1}] * 2
    assert every == [{"ant": 0, "cat": 1, "meta": 2}] * 2
