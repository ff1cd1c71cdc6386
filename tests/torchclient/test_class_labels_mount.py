"""Stable class labels through a real mount: ``.epochfs/classes.json`` and the client's labels.

The cache is filled through the Store API as the sampler fills it (tests/fuse_helpers.py), with PNG
images in class folders (``train/<class>/<n>.png``); ``epochfs mount`` serves it for real. An
epoch that lacks a class must not move the others' labels (what sorting the folders of each
epoch, as torchvision's ImageFolder does, gets wrong); a class that comes later takes the next
index; two nodes whose first epochs hold different classes agree when the listing's discovery
named the same folders; the folder view publishes the same file.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import random
from pathlib import Path
from typing import Any

import _torchvision
import numpy as np
import pytest
import torch
from fuse_helpers import admit, mounted, open_store
from PIL import Image

from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.listings import Part
from epochfs.torchclient import (
    BatchShapeError,
    EpochImageFolder,
    EpochLoader,
    find_classes,
    read_classes,
)
from epochfs.torchclient.layout import epoch_dir

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]


def png(seed: int, size: tuple[int, int], mode: str = "RGB") -> bytes:
    rng = np.random.default_rng(seed)
    shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
    img = Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode)
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def images(classes: list[str], per_class: int, *, start: int = 0, size: tuple[int, int] | None = None,
           folder: str = "train") -> dict[str, bytes]:
    rng = random.Random(start)
    out = {}
    for c in classes:
        for i in range(start, start + per_class):
            out[f"{folder}/{c}/{i:03d}.png"] = png(hash((c, i)) & 0xFFFF,
                                                    size or (rng.randint(9, 20), rng.randint(9, 20)))
    return out


def expected_pixels(body: bytes) -> torch.Tensor:
    with Image.open(io.BytesIO(body)) as img:
        return torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1)


def test_a_class_missing_from_an_early_epoch_moves_no_label(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache, keep_epochs=3)
    first = images(["ant", "cat", "dog"], 3)  # no "bee" yet
    admit(store, first)
    store.cut(0)
    later = images(["bee"], 3, start=10) | images(["ant"], 2, start=20)
    bodies = first | later
    with mounted(cache, mnt):
        e0 = EpochImageFolder(mnt, 0, "train", progress=None)  # trained on before epoch 1 exists
        admit(store, later)  # as the sampler goes on fetching
        e1 = EpochImageFolder(mnt, 1, "train", progress=None)  # the lookup cuts it
        # Sorting each epoch's folders (ImageFolder's way) gives cat 1 in epoch 0 and 2 in epoch 1.
        assert sorted(os.listdir(epoch_dir(mnt, 1) / "train")).index("cat") == 2
        assert e0.class_to_idx == {"ant": 0, "cat": 1, "dog": 2}
        assert e1.class_to_idx == {"ant": 0, "cat": 1, "dog": 2, "bee": 3}
        assert e1.classes == ["ant", "cat", "dog", "bee"]
        for ds in (e0, e1):
            assert len(ds) == sum(1 for p in bodies if ds.epoch == 1 or p in first)
            for i in range(len(ds)):
                image, label = ds[i]
                path = ds.files[i]
                assert label == ds.class_to_idx[path.split("/")[1]], path
                assert image.dtype == torch.uint8 and image.shape[0] == 3
                assert torch.equal(image, expected_pixels(bodies[path])), path
        # The same file a reader of the mount sees, per class root (the epoch's own folder too).
        maps = read_classes(mnt)
        assert maps == {".": {"train": 0}, "train": e1.class_to_idx}
        assert find_classes(epoch_dir(mnt, 0) / "train") == (e1.classes, e1.class_to_idx)
        # Recorded outside the index, in the cache: it survives the server.
    with mounted(cache, mnt):
        assert read_classes(mnt) == maps
    store.close()


def test_the_listings_folders_number_classes_before_any_epoch_holds_them(tmp_path: Path) -> None:
    """Two nodes (two caches) whose first epochs hold different classes agree, because the
    listing's folder discovery (its parts, the same on every node) named every class first; one
    is served by FUSE, the other by the folder view."""
    classes = ["ant", "bee", "cat", "dog"]
    node_a, node_b = open_store(tmp_path / "a"), open_store(tmp_path / "b")
    for store, held in ((node_a, ["ant", "dog"]), (node_b, ["bee", "cat", "dog"])):
        store.listings().begin([Part(i, f"train/{c}/", "", None) for i, c in enumerate(classes)], "list")
        admit(store, images(held, 2))
        store.cut(0)
    folder = tmp_path / "folder-view"
    publisher = FolderPublisher(store=node_b, folder=folder, link_root=node_b.objects_dir, grace=False)
    publisher.recover()
    publisher.step()
    with mounted(tmp_path / "a", tmp_path / "mnt"):
        on_a = EpochImageFolder(tmp_path / "mnt", 0, progress=None)
        on_b = EpochImageFolder(folder, 0, progress=None)
        assert on_a.class_to_idx == on_b.class_to_idx == {"ant": 0, "bee": 1, "cat": 2, "dog": 3}
        assert sorted(set(on_a.targets or [])) == [0, 3] and sorted(set(on_b.targets or [])) == [1, 2, 3]
        # A relist that finds a new class appends it: nothing is renumbered, on either view.
        for store in (node_a, node_b):
            store.listings().begin([Part(0, "train/aardvark/", "", None)], "list")
            admit(store, images(["aardvark"], 1, start=50))
            store.cut(1)
        publisher.step()
        after = {"ant": 0, "bee": 1, "cat": 2, "dog": 3, "aardvark": 4}
        assert EpochImageFolder(tmp_path / "mnt", 1, progress=None).class_to_idx == after
        assert EpochImageFolder(folder, 1, progress=None).class_to_idx == after
        assert EpochImageFolder(tmp_path / "mnt", 0, progress=None).class_to_idx == after
    for store in (node_a, node_b):
        store.close()


def test_the_loader_labels_decodes_and_transforms_in_its_workers(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache)
    bodies = images(["cat", "dog"], 5) | {"train/readme.txt": b"not in a class folder"}
    admit(store, bodies)
    store.cut(0)
    with mounted(cache, mnt):
        def checked_loader(**kwargs: Any) -> EpochLoader:
            return EpochLoader(mnt, batch_size=4, num_workers=2, decode="image", label="folder",
                               class_root="train", shuffle=False, progress=None, report=False, **kwargs)

        # Images of different sizes cannot be stacked: the error names the fix.
        with checked_loader() as loader, pytest.raises(BatchShapeError, match=r"transform=.*collate_fn="):
            for _ in loader.epoch(0):
                pass
        # A transform run in the workers gives them one shape; labels follow classes.json.
        with checked_loader(transform=_worker_resize) as loader:
            seen = []
            for batch_images, labels in loader.epoch(0):
                assert batch_images.shape[1:] == (3, 8, 8) and batch_images.dtype == torch.float32
                assert labels.dtype == torch.int64
                seen += labels.tolist()
            assert sorted(seen) == [0] * 5 + [1] * 5
            assert loader.history[-1].files == 10  # the text file is outside every class folder
        # collate_fn=list keeps each batch a list of (image, label), whatever the sizes.
        with checked_loader(collate_fn=list) as loader:
            pairs = [pair for batch in loader.epoch(0) for pair in batch]
        by_label: dict[int, list[torch.Tensor]] = {label: [] for label in (0, 1)}
        for image, label in pairs:
            by_label[label].append(image)
        want = {0: [expected_pixels(b) for p, b in sorted(bodies.items()) if p.startswith("train/cat/")],
                1: [expected_pixels(b) for p, b in sorted(bodies.items()) if p.startswith("train/dog/")]}
        for label in (0, 1):
            assert len(by_label[label]) == 5
            assert all(torch.equal(a, b) for a, b in zip(by_label[label], want[label], strict=True))
    store.close()


def _worker_resize(image: torch.Tensor) -> torch.Tensor:
    """Resize to 8x8 (run in the loader's worker processes, where samples are decoded)."""
    return torch.nn.functional.interpolate(image[None].float(), size=(8, 8))[0]


def test_torchvisions_image_folder_with_the_recipe_keeps_its_labels(tmp_path: Path) -> None:
    """torchvision's own ImageFolder code (pure Python: no C extension needed) with the recipe's
    ``find_classes``, through a real mount: epoch 0 has no "bee", which epoch 1 brings."""
    torchvision = _torchvision.require()
    v2 = importlib.import_module("torchvision.transforms.v2")
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache, keep_epochs=3)
    admit(store, images(["ant", "cat"], 2))
    store.cut(0)

    image_folder: Any = torchvision.datasets.ImageFolder

    class StableImageFolder(image_folder):
        def find_classes(self, directory: str) -> tuple[list[str], dict[str, int]]:
            return find_classes(directory)

    def both(n: int) -> tuple[Any, Any]:
        """Plain ImageFolder and the recipe's over epoch-n/train (the first lookup of epoch-n cuts it)."""
        folder = epoch_dir(mnt, n) / "train"
        return (torchvision.datasets.ImageFolder(folder),
                StableImageFolder(folder, allow_empty=True,
                                  transform=v2.Compose([v2.PILToTensor(), v2.Resize((8, 8))])))

    with mounted(cache, mnt):
        plain0, stable0 = both(0)  # trained on before epoch 1 exists
        admit(store, images(["bee"], 2, start=5))  # as the sampler goes on fetching
        plain1, stable1 = both(1)
        assert plain0.class_to_idx == {"ant": 0, "cat": 1}
        assert plain1.class_to_idx == {"ant": 0, "bee": 1, "cat": 2}  # the problem: cat moved
        assert stable0.class_to_idx == {"ant": 0, "cat": 1}
        assert stable1.class_to_idx == {"ant": 0, "cat": 1, "bee": 2}  # appended, nothing moved
        # Epoch 0 read again, now that bee is known: bee has its index and no folder there.
        again0 = StableImageFolder(epoch_dir(mnt, 0) / "train", allow_empty=True)
        assert again0.class_to_idx == stable1.class_to_idx and again0.samples == stable0.samples
        assert len(stable0) == 4 and len(stable1) == 6
        for ds in (stable0, stable1, again0):
            for path, label in ds.samples:
                assert label == stable1.class_to_idx[Path(path).parent.name], path
        # Items through the mount: torchvision's PIL loader, then its v2 transforms on the tensor.
        for i, (path, label) in enumerate(stable1.samples):
            image, target = stable1[i]
            assert target == label and image.shape == (3, 8, 8) and image.dtype == torch.uint8, path
    store.close()


def test_classes_json_is_served_and_listed(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store: Store = open_store(cache)
    admit(store, {"arrays/0.npy": b"x", "train/a/0.png": b"y", "train/b/sub/1.png": b"z"})
    store.cut(0)
    with mounted(cache, mnt):
        assert "classes.json" in os.listdir(mnt / ".epochfs")
        doc = json.loads((mnt / ".epochfs" / "classes.json").read_text())
        assert doc == {"version": 1, "classes": {".": {"arrays": 0, "train": 1},
                                                 "train": {"a": 0, "b": 1}, "train/b": {"sub": 0}}}
        assert (mnt / ".epochfs" / "classes.json").stat().st_size == len(
            (mnt / ".epochfs" / "classes.json").read_bytes())
        with pytest.raises(OSError):
            os.open(mnt / ".epochfs" / "classes.json", os.O_WRONLY)
    store.close()
