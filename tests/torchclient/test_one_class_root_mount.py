"""``label="folder"`` with the default ``class_root="."`` on the images layout page's own sidecar.

A sidecar run with ``--include 'train/**'`` holds one folder at the epoch's top, ``train``, so
``classes.json`` maps ``"."`` to ``{"train": 0}``: every image got label 0 and training ran on one
label without a word. A class root of one class is now a ClassMapError naming the folder and the
class_root to pass, as ``EpochImageFolder`` names the class roots for the opposite mistake; the
right class_root reads the same epoch. The cache is filled through the Store API as the sampler
fills it (tests/fuse_helpers.py) and served by ``epochfs mount`` for real.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fuse_helpers import admit, mounted, open_store
from test_hidden_class_folders import png

from epochfs.torchclient import ClassMapError, EpochDataset, EpochLoader, read_classes

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

ADVICE = (r"class_root='\.' has one class, 'train', so every file of epoch 0 would get label 0; it holds "
          r"the class folders ant, bee, cat: pass class_root='train'")


def test_the_default_class_root_over_train_is_refused_naming_train(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache)
    admit(store, {f"train/{c}/{i}.png": png(i) for c in ("ant", "bee", "cat") for i in range(2)})
    store.cut(0)
    with mounted(cache, mnt):
        assert read_classes(mnt) == {".": {"train": 0}, "train": {"ant": 0, "bee": 1, "cat": 2}}
        with pytest.raises(ClassMapError, match=ADVICE):
            EpochDataset(mnt, 0, progress=None, decode="image", label="folder")
        with EpochLoader(mnt, batch_size=6, decode="image", label="folder", num_workers=0, report=False,
                         progress=None) as loader, pytest.raises(ClassMapError, match=ADVICE):
            list(loader.epoch(0))
        with EpochLoader(mnt, batch_size=6, decode="image", label="folder", class_root="train",
                         num_workers=0, report=False, progress=None) as loader:
            (_, labels), = list(loader.epoch(0))
        assert sorted(labels.tolist()) == [0, 0, 1, 1, 2, 2]
        given = EpochDataset(mnt, 0, progress=None, decode="image", label="folder", classes=["train"])
        assert given.targets == [0] * 6  # one class given on purpose is taken
    store.close()
