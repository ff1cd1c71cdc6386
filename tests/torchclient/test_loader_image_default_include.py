"""``EpochLoader(decode="image")`` leaves hidden files out by default and decodes every other file.

A bucket uploaded from a laptop holds a ``.DS_Store`` (or a Jupyter ``.ipynb_checkpoints/``) beside
the images of a class folder: the loader took every file and failed the epoch at the stray file's
decode (``SampleDecodeError ... .DS_Store ... UnidentifiedImageError``). Taking only ImageFolder's
extensions instead (as ``EpochImageFolder`` does) dropped, without a word, the images an object
store often holds: keys without an extension, GIFs. So with ``decode="image"`` and neither
``include=`` nor ``exclude=`` the hidden files and folders are left out and the rest decoded;
an ``include=`` given still decides.

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
    """Epoch 0 of images, one without an extension and a GIF among them, with a ``.DS_Store`` and a
    notebook checkpoint folder in class folders, published by the folder view."""
    store = open_store(tmp_path / "cache")
    try:
        admit(store, {"train/cat/1.png": _image("PNG", 1), "train/cat/.DS_Store": b"\0\0\0\1Bud1",
                      "train/cat/photo": _image("PNG", 4),
                      "train/dog/.ipynb_checkpoints/explore-checkpoint.ipynb": b"{}",
                      "train/dog/2.JPG": _image("JPEG", 2), "train/dog/anim.gif": _image("GIF", 5),
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


def test_the_loader_leaves_hidden_files_out_and_decodes_every_image(view: Path) -> None:
    loader = _loader(view)
    try:
        batches = list(loader.epoch(0))
        assert loader.history[-1].files == 5
    finally:
        loader.close()
    [(images, labels)] = batches
    assert tuple(images.shape) == (5, 3, 4, 4)
    assert labels.tolist() == [0, 0, 1, 1, 1]  # cat: 1.png, photo; dog: 2.JPG, 3.webp, anim.gif
    # EpochImageFolder keeps ImageFolder's rule (its extensions), as documented: 3 of them.
    assert len(EpochImageFolder(view, 0, "train", progress=None)) == 3


def test_an_include_given_still_decides(view: Path) -> None:
    """``include=`` of one's own takes what it names, hidden files included (as EpochImageFolder's)."""
    loader = _loader(view, include="train/**")
    try:
        with pytest.raises(SampleDecodeError, match=r"\.DS_Store|\.ipynb"):
            list(loader.epoch(0))
    finally:
        loader.close()


def test_the_torch_extra_brings_pillow() -> None:
    """``pip install '.[torch]'`` must install what ``decode="image"`` needs without torchvision."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {canonicalize_name(Requirement(r).name) for r in extras["torch"]}
    assert {"torch", "numpy", "pillow"} <= names
