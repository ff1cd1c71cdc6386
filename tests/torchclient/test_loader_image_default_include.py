"""``EpochLoader(decode="image")`` takes the image files only, as ``EpochImageFolder`` does.

A bucket uploaded from a laptop holds a ``.DS_Store`` or a ``notes.txt`` beside the images of a class
folder. ``EpochImageFolder`` left them out (ImageFolder's extensions, any case), but the loader the
docs introduce as "the same through EpochLoader" took every file and failed the epoch at the stray
file's decode (``SampleDecodeError ... .DS_Store ... UnidentifiedImageError``). With
``decode="image"`` and no ``include=`` it now takes the same files; an ``include=`` given still wins.

Served by the folder view (the links and ``.epochfs/classes.json`` the sidecar's ``--view folder``
publishes), filled through the Store as the sampler fills it. Also here: the ``torch`` extra, which
the docs say installs the client, brings Pillow, the decoder ``decode="image"`` needs without
torchvision (torch does not depend on it)."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fuse_helpers import admit, open_store
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from PIL import Image

from epochfs.sidecar.folderview import FolderPublisher
from epochfs.torchclient import EpochImageFolder, EpochLoader
from epochfs.torchclient.decode import SampleDecodeError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the dev environment's Python is 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def _image(fmt: str, value: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.full((4, 4, 3), value, np.uint8)).save(out, format=fmt)
    return out.getvalue()


@pytest.fixture
def view(tmp_path: Path) -> Iterator[Path]:
    """Epoch 0 of images with a ``.DS_Store`` and a ``notes.txt`` in class folders, published by
    the folder view."""
    store = open_store(tmp_path / "cache")
    try:
        admit(store, {"train/cat/1.png": _image("PNG", 1), "train/cat/.DS_Store": b"\0\0\0\1Bud1",
                      "train/dog/2.JPG": _image("JPEG", 2), "train/dog/notes.txt": b"from the photographer",
                      "train/dog/3.webp": _image("WEBP", 3)})
        assert store.cut(0) == 0
        folder = tmp_path / "view"
        publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir, grace=False)
        publisher.recover()
        publisher.step()
        yield folder
    finally:
        store.close()


def _loader(root: Path, include: str | None = None) -> EpochLoader:
    return EpochLoader(root, batch_size=8, decode="image", label="folder", class_root="train",
                       num_workers=0, shuffle=False, report=False, progress=None, include=include)


def test_the_loader_takes_the_image_files_the_image_folder_takes(view: Path) -> None:
    folder = EpochImageFolder(view, 0, "train", progress=None)
    loader = _loader(view)
    try:
        batches = list(loader.epoch(0))
        assert loader.history[-1].files == len(folder) == 3
    finally:
        loader.close()
    [(images, labels)] = batches
    assert tuple(images.shape) == (3, 3, 4, 4)
    assert labels.tolist() == folder.targets == [0, 1, 1]


def test_an_include_given_still_decides(view: Path) -> None:
    """``include=`` of one's own takes what it names, stray files included (as EpochImageFolder's)."""
    loader = _loader(view, include="train/**")
    try:
        with pytest.raises(SampleDecodeError, match=r"\.DS_Store|notes\.txt"):
            list(loader.epoch(0))
    finally:
        loader.close()


def test_the_torch_extra_brings_pillow() -> None:
    """``pip install '.[torch]'`` must install what ``decode="image"`` needs without torchvision."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {canonicalize_name(Requirement(r).name) for r in extras["torch"]}
    assert {"torch", "numpy", "pillow"} <= names
