"""A wrong class root over a plain folder is a ``ClassMapError``, not a dataset of no file.

On a mount (``.epochfs/classes.json``) a class root the cache never held a folder under (the default
``folder="train"`` where the classes are at the top of the epoch, or a typo) raises ClassMapError
naming the class roots that do have classes (test_image_folder_files.py). A plain folder shaped
like the mount (no ``classes.json``) gave an empty dataset instead: zero training steps and only
the generic "no classes.json" warning. Now it raises the same error, named from the folders of the
epoch's files, where no epoch up to this one has a file the dataset reads in a folder under the root.

The epochs are bare folders of PNG files (read by a walk, no manifest), as a user lays them out.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from epochfs.torchclient import ClassMapError, EpochDataset, EpochImageFolder, EpochLoader


def _epoch(root: Path, epoch: int, paths: list[str]) -> None:
    for rel in paths:
        path = root / f"epoch-{epoch}" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(path)


@pytest.fixture
def top(tmp_path: Path) -> Path:
    """Classes at the top of the epoch: ``epoch-0/{ant,cat}/<n>.png``."""
    root = tmp_path / "top"
    _epoch(root, 0, [f"{cls}/{i}.png" for cls in ("ant", "cat") for i in range(2)])
    return root


def test_the_default_train_over_classes_at_the_top_is_an_error(top: Path) -> None:
    named = r"'train' holds no class folder .*class roots with classes: '\.'"
    with pytest.raises(ClassMapError, match=named):
        EpochImageFolder(top, 0, progress=None)
    with pytest.raises(ClassMapError, match="'train' holds no class folder"):  # a map given, too
        EpochImageFolder(top, 0, progress=None, classes=["ant", "cat"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no .epochfs/classes.json"
        right = EpochImageFolder(top, 0, ".", progress=None)
    assert right.class_to_idx == {"ant": 0, "cat": 1} and len(right) == 4


def test_a_typo_in_class_root_fails_the_loader_not_trains_zero_steps(top: Path) -> None:
    with pytest.raises(ClassMapError, match="'trian' holds no class folder"):
        EpochDataset(top, 0, progress=None, decode="image", label="folder", class_root="trian")
    loader = EpochLoader(top, batch_size=2, decode="image", label="folder", class_root="trian",
                         num_workers=0, report=False, progress=None)
    try:
        with pytest.raises(ClassMapError, match="'trian' holds no class folder"):
            list(loader.epoch(0))
    finally:
        loader.close()


def test_a_class_root_of_an_earlier_epoch_is_no_error(tmp_path: Path) -> None:
    """An epoch whose files all lie outside the class folders, after one that had classes there:
    the root is a class root of this dataset (as on a mount, whose classes.json remembers it), so
    the epoch is empty without an error."""
    root = tmp_path / "grow"
    _epoch(root, 0, ["train/ant/0.png"])
    _epoch(root, 1, ["train/loose.png"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        later = EpochImageFolder(root, 1, progress=None)
        given = EpochImageFolder(root, 1, progress=None, classes=["ant"])
    assert later.class_to_idx == {"ant": 0} and len(later) == 0 and later.excluded == 1
    assert len(given) == 0
