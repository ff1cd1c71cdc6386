"""``classes=`` must number its classes 0..K-1, each once; a class root of one class is an error.

``classes`` is "names by index" and the docs size the model with ``len(train.classes)``: a map with
a gap (a subset keeping ImageNet's indexes, ``{"aaa": 7}`` among 5 classes) made a head too small
(torch's "Target 7 is out of bounds" mid-epoch), and a repeated index (two classes merged) made
``classes[label]`` name the wrong class. Both are refused when the dataset or loader is made,
naming the classes and indexes. ``label="folder"`` with the default ``class_root="."`` over the
``train/<class>/`` layout found one class, ``train``, and labelled every file 0; a class root of
one class is now a ClassMapError naming the folder and the class_root to pass. The epochs are bare
folders of PNG files (read by a walk, no manifest), as a user lays them out.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from epochfs.torchclient import ClassMapError, EpochDataset, EpochImageFolder, EpochLoader

CLASSES = ("ant", "bee", "cat", "zebra", "aaa")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """``epoch-0/train/<class>/<n>.png``: 5 classes of 2 images."""
    for cls in CLASSES:
        for i in range(2):
            path = tmp_path / "epoch-0" / "train" / cls / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(path)
    return tmp_path


GAP = {"ant": 0, "bee": 1, "cat": 2, "zebra": 3, "aaa": 7}
REPEAT = {"ant": 0, "bee": 0, "cat": 1, "zebra": 2, "aaa": 3}


@pytest.mark.parametrize(("classes", "named"), [
    (GAP, r"must be 0\.\.4, each once \('aaa': 7 is past 4, leaving 4 unused\)"),
    (REPEAT, r"must be 0\.\.4, each once \(index 0 is given to 'ant', 'bee'\)"),
])
def test_a_gap_or_a_repeat_is_refused_up_front(root: Path, classes: dict[str, int], named: str) -> None:
    with pytest.raises(ClassMapError, match=named):
        EpochImageFolder(root, 0, progress=None, classes=classes)
    with pytest.raises(ClassMapError, match=named):
        EpochDataset(root / "none-yet", 0, wait=False, label="folder", class_root="train", classes=classes)
    with pytest.raises(ClassMapError, match=named):  # at construction, before any epoch is read
        EpochLoader(root, batch_size=2, decode="image", label="folder", class_root="train", classes=classes,
                    num_workers=0, report=False, progress=None)


def test_a_dense_map_in_any_order_is_taken(root: Path) -> None:
    given = {"zebra": 3, "ant": 0, "cat": 2, "aaa": 4, "bee": 1}
    ds = EpochImageFolder(root, 0, progress=None, classes=given)
    assert ds.classes == ["ant", "bee", "cat", "zebra", "aaa"]
    assert all(ds.classes[label] == Path(path).parent.name for path, label in ds.samples)


def test_class_root_dot_over_the_train_layout_names_train(root: Path) -> None:
    advice = (r"class_root='\.' has one class, 'train', so every file of epoch 0 would get label 0; it "
              r"holds the class folders aaa, ant, bee, cat, zebra: pass class_root='train'")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no .epochfs/classes.json"
        with pytest.raises(ClassMapError, match=advice):
            EpochDataset(root, 0, progress=None, decode="image", label="folder")
        with EpochLoader(root, batch_size=4, decode="image", label="folder", num_workers=0,
                         report=False, progress=None) as loader, pytest.raises(ClassMapError, match=advice):
            list(loader.epoch(0))
        right = EpochDataset(root, 0, progress=None, decode="image", label="folder", class_root="train")
    assert right.classes == sorted(CLASSES) and len(set(right.targets or [])) == 5


def test_one_class_folder_of_files_is_refused_unless_given(tmp_path: Path) -> None:
    for i in range(3):
        path = tmp_path / "epoch-0" / "train" / "cat" / f"{i}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no .epochfs/classes.json"
        with pytest.raises(ClassMapError, match=r"'train' has one class, 'cat'.* two classes or more"):
            EpochImageFolder(tmp_path, 0, progress=None)
    one = EpochImageFolder(tmp_path, 0, progress=None, classes=["cat"])  # meant: taken as given
    assert one.classes == ["cat"] and one.targets == [0, 0, 0]
