"""``find_classes`` of a folder with no class folders (a typo'd path) raises, naming the class roots.

It returned ``([], {})``, so the docs' ``StableImageFolder`` (torchvision's ``ImageFolder`` with the
mount's classes) built an empty dataset without a word, where torchvision's own raises
FileNotFoundError and ``EpochImageFolder`` a ClassMapError (issue B53, 4b). A real sidecar's mount.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import _torchvision
import pytest
from shards_helpers import png
from sidecar_helpers import running_sidecar

from epochfs.torchclient import ClassMapError, EpochDataset, find_classes

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]


def test_a_folder_without_classes_is_an_error_naming_the_class_roots(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    for i, name in enumerate(["train/cat/0.png", "train/dog/0.png", "val/cat/0.png"]):
        (remote / name).parent.mkdir(parents=True, exist_ok=True)
        (remote / name).write_bytes(png(i, side=8))
    with running_sidecar(tmp_path, remote=f"file://{remote}", endpoint="",
                         extra=("--min-samples", "3")) as car:
        epoch = EpochDataset(car.mount, 0, progress=None, timeout=60)
        try:
            train = epoch.dir / "train"
            assert find_classes(train) == (["cat", "dog"], {"cat": 0, "dog": 1})
            typo = epoch.dir / "trian"
            with pytest.raises(ClassMapError, match=rf"{typo} has no class folders .* the mount's are "
                                                    rf".*{train}.*{epoch.dir / 'val'}"):
                find_classes(typo)
            with pytest.raises(ClassMapError, match="has no class folders"):
                find_classes(train / "cat")  # a class folder itself: images, no classes below
            tv: Any = _torchvision.require()

            class StableImageFolder(tv.datasets.ImageFolder):
                def find_classes(self, directory: str) -> tuple[list[str], dict[str, int]]:
                    return find_classes(directory)

            assert len(StableImageFolder(str(train), allow_empty=True)) == 2
            with pytest.raises(ClassMapError, match=rf"{typo} has no class folders"):
                StableImageFolder(str(typo), allow_empty=True)
        finally:
            epoch.release()
