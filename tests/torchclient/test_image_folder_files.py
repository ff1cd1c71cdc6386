"""EpochImageFolder takes the image files ImageFolder takes, and find_classes reads through ``latest``.

A bucket uploaded from a laptop holds a ``.DS_Store`` or a ``notes.txt`` beside the images of a class
folder: torchvision's ImageFolder takes only names with an image extension (any case), and so does
EpochImageFolder now; before, it took every file, and the epoch failed mid-way at the stray file's
decode (``SampleDecodeError``). ``find_classes(f"{root}/latest/train")`` refused ``latest`` (a link to
the newest epoch, part of the layout) as "not inside an epoch-N/ folder".

Served by the folder view (a plain folder of links and ``.epochfs/classes.json``, as the sidecar's
``--view folder`` publishes it); the FUSE view serves the same layout (test_class_labels_mount.py)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from fuse_helpers import admit, open_store
from PIL import Image

from epochfs.sidecar.folderview import FolderPublisher
from epochfs.torchclient import ClassMapError, EpochDataset, EpochImageFolder, find_classes


def _image(fmt: str) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(out, format=fmt)
    return out.getvalue()


def test_only_image_files_are_taken_and_latest_is_an_epoch(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache")
    try:
        admit(store, {"train/cat/1.png": _image("PNG"), "train/cat/.DS_Store": b"\0\0\0\1Bud1",
                      "train/dog/2.JPG": _image("JPEG"), "train/dog/notes.txt": b"from the photographer",
                      "train/dog/3.webp": _image("WEBP")})
        assert store.cut(0) == 0
        folder = tmp_path / "view"
        publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir, grace=False)
        publisher.recover()
        publisher.step()
        train = EpochImageFolder(folder, 0, progress=None)
        assert sorted(train.files) == ["train/cat/1.png", "train/dog/2.JPG", "train/dog/3.webp"]
        assert train.excluded == 2 and train.class_to_idx == {"cat": 0, "dog": 1}
        assert [tuple(train[i][0].shape) for i in range(len(train))] == [(3, 4, 4)] * 3
        assert len(EpochImageFolder(folder, 0, progress=None, include="*.txt")) == 1  # include= still wins
        # A decoder of one's own takes every file of the class folders, as before.
        assert len(EpochImageFolder(folder, 0, progress=None, decode=lambda data: data)) == 5
        assert find_classes(folder / "latest" / "train") == (["cat", "dog"], {"cat": 0, "dog": 1})
        assert find_classes(folder / "epoch-0" / "train") == find_classes(folder / "latest" / "train")
    finally:
        store.close()


def test_a_class_root_the_cache_never_held_is_an_error_not_an_empty_dataset(tmp_path: Path) -> None:
    """Classes at the top of the epoch, and the default ``folder="train"`` (or a typo): before, a
    dataset of no file (len 0, every file ``excluded``) and a loader of no batch, without a word."""
    store = open_store(tmp_path / "cache")
    try:
        admit(store, {"cat/1.png": _image("PNG"), "dog/2.png": _image("PNG")})
        assert store.cut(0) == 0
        folder = tmp_path / "view"
        publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir, grace=False)
        publisher.recover()
        publisher.step()
        root_named = r"'train' holds no class folder .* class roots with classes: '\.'"
        with pytest.raises(ClassMapError, match=root_named):
            EpochImageFolder(folder, 0, progress=None)
        with pytest.raises(ClassMapError, match="'tarin' holds no class folder"):
            EpochDataset(folder, 0, progress=None, label="folder", class_root="tarin")
        assert EpochImageFolder(folder, 0, ".", progress=None).class_to_idx == {"cat": 0, "dog": 1}
        with pytest.raises(ClassMapError, match="'train' holds no class folder"):  # a map given, too
            EpochImageFolder(folder, 0, progress=None, classes=["cat", "dog"])
    finally:
        store.close()
