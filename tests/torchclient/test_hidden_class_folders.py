"""A hidden folder is no class, on the mount and on a plain folder alike.

``train/.ipynb_checkpoints/`` (Jupyter's) was recorded by the sidecar as a class folder, taking
index 0 in ``classes.json`` and shifting every real class by one, while a plain copy of the same
epoch (no ``classes.json``: the client numbers the folders of the files it reads) did not count
it. One rule now: the store records no hidden folder (``hidden_folder``) and the client labels no
file inside one (``is_hidden``); the two packages may not import each other, so the last test
checks the two predicates agree. The cache is filled through the Store API as the sampler fills
it (tests/fuse_helpers.py) and served by ``epochfs mount`` for real.
"""

from __future__ import annotations

import io
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
from fuse_helpers import admit, mounted, open_store
from PIL import Image

from epochfs.sidecar.store import classes as store_classes
from epochfs.sidecar.store.listings import Part
from epochfs.torchclient import EpochImageFolder, EpochLoader, read_classes
from epochfs.torchclient.labels import is_hidden
from epochfs.torchclient.layout import epoch_dir
from epochfs.torchclient.plainfolder import publish_epoch

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]


def png(value: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.full((4, 5, 3), value, np.uint8)).save(out, format="PNG")
    return out.getvalue()


OBJECTS = {
    **{f"train/{c}/{i}.png": png(10 * n + i) for n, c in enumerate(("cat", "dog", "emu")) for i in range(2)},
    "train/.ipynb_checkpoints/look-checkpoint.ipynb": b"{}",
    "train/.thumbs/t.png": png(99),  # an image, but in a hidden folder
    "train/.DS_Store": b"\0\0\0\1Bud1",
}


def test_the_mount_and_a_plain_copy_number_the_same_classes(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache)
    discovered = ["train/.ipynb_checkpoints/", "train/.thumbs/", "train/cat/", "train/dog/", "train/emu/"]
    store.listings().begin([Part(i, prefix, "", None) for i, prefix in enumerate(discovered)], "list")
    admit(store, OBJECTS)
    store.cut(0)
    with mounted(cache, mnt):
        on_mount = EpochImageFolder(mnt, 0, progress=None)
        assert read_classes(mnt) == {".": {"train": 0}, "train": {"cat": 0, "dog": 1, "emu": 2}}
        with EpochLoader(mnt, batch_size=8, decode="image", label="folder", class_root="train",
                         num_workers=0, report=False, progress=None, shuffle=False) as loader:
            (_, labels), = list(loader.epoch(0))
        assert sorted(os.listdir(epoch_dir(mnt, 0) / "train")) == sorted(
            {rel.split("/")[1] for rel in OBJECTS})  # the mount shows them all
    store.close()
    publish_epoch(tmp_path / "plain", 0, {rel: tmp_path / "objects" / rel for rel in OBJECTS})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no .epochfs/classes.json"
        plain = EpochImageFolder(tmp_path / "plain", 0, progress=None)
    assert on_mount.class_to_idx == plain.class_to_idx == {"cat": 0, "dog": 1, "emu": 2}
    assert list(zip(on_mount.files, on_mount.targets or [], strict=True)) == list(
        zip(plain.files, plain.targets or [], strict=True))
    assert on_mount.targets == [0, 0, 1, 1, 2, 2] and labels.tolist() == [0, 0, 1, 1, 2, 2]
    assert on_mount.excluded == plain.excluded == 3  # t.png, the notebook, .DS_Store


@pytest.fixture(autouse=True)
def _objects(tmp_path: Path) -> None:
    """The objects' bodies as files, for the plain copy (``publish_epoch`` links to them)."""
    for rel, body in OBJECTS.items():
        path = tmp_path / "objects" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)


def test_a_list_that_names_a_hidden_folder_keeps_its_indexes() -> None:
    """A cache whose list already holds one keeps it where it is: a recorded index never moves."""
    known = ("train", "train/.ipynb_checkpoints", "train/cat")
    assert store_classes.merged(known, ["train/dog/", "train/.git/x/", ".cache/"]) == (
        *known, "train/.git/x", "train/dog")  # the folder below a hidden one is recorded


def test_classes_below_a_hidden_folder_are_classes_on_the_mount_as_on_a_plain_folder(tmp_path: Path) -> None:
    """``.v2/train/<class>/``: the hidden folder is no class, the class root below it has its
    classes on the mount as on a plain copy (recording nothing below a hidden folder left
    ``classes.json`` empty, and ``label="folder", class_root=".v2/train"`` failed on the mount)."""
    objects = {f".v2/train/{c}/{i}.png": png(10 * n + i)
               for n, c in enumerate(("c0", "c1")) for i in range(2)}
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    with open_store(cache) as store:
        admit(store, objects)
        store.cut(0)
    with mounted(cache, mnt):
        assert read_classes(mnt).get(".v2/train") == {"c0": 0, "c1": 1}, read_classes(mnt)
        # include= given: the image decoder's default leaves out every file below a hidden folder.
        with EpochLoader(mnt, batch_size=8, decode="image", label="folder", class_root=".v2/train",
                         include="**/*.png", num_workers=0, report=False, progress=None,
                         shuffle=False) as loader:
            (_, labels), = list(loader.epoch(0))
    assert labels.tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize("name", [".ipynb_checkpoints", ".git", "._x", "..a", "cat", "_thumbs", "a.b", "x."])
def test_the_store_and_the_client_share_the_rule(name: str) -> None:
    assert store_classes.hidden_folder(name) == is_hidden(name) == name.startswith(".")
