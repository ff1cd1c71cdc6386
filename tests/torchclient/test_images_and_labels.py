"""decode="image", the collate error for samples of different shapes, and labels by class folder on
plain folders shaped like the mount (tests/torchclient/test_class_labels_mount.py: the real mount)."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from epochfs.torchclient import (
    BatchShapeError,
    ClassMapError,
    EpochDataset,
    EpochImageFolder,
    EpochLoader,
    decode_image,
    find_classes,
)
from epochfs.torchclient.collate import collate
from epochfs.torchclient.layout import classes_path, epoch_dir, format_classes
from epochfs.torchclient.plainfolder import publish_epoch


def image_bytes(mode: str, size: tuple[int, int], fmt: str, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    channels = {"L": (), "RGB": (3,), "RGBA": (4,)}.get(mode, ())
    array = rng.integers(0, 256, (size[1], size[0], *channels), dtype=np.uint8)
    img = Image.fromarray(array, "L" if mode == "P" else mode)
    if mode == "P":
        img = img.convert("P")
    out = io.BytesIO()
    img.save(out, format=fmt)
    return out.getvalue()


@pytest.mark.parametrize(("mode", "fmt"), [("RGB", "PNG"), ("L", "PNG"), ("P", "PNG"), ("RGBA", "PNG"),
                                           ("RGB", "JPEG"), ("RGB", "BMP"), ("L", "TIFF")])
def test_decode_image_gives_three_channel_uint8_chw(tmp_path: Path, mode: str, fmt: str) -> None:
    body = image_bytes(mode, (13, 7), fmt)
    path = tmp_path / f"x.{fmt.lower()}"
    path.write_bytes(body)
    got = decode_image(str(path))
    with Image.open(io.BytesIO(body)) as img:
        want = torch.from_numpy(np.asarray(img.convert("RGB")).copy()).permute(2, 0, 1)
    assert got.dtype == torch.uint8 and got.shape == (3, 7, 13) and got.is_contiguous()
    if fmt != "JPEG":  # lossy: another decoder may round differently
        assert torch.equal(got, want)
    got[0, 0, 0] = 1  # writable, the file untouched
    assert path.read_bytes() == body


def test_a_file_that_is_no_image_names_the_file(tmp_path: Path) -> None:
    root = tmp_path / "mnt"
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "bad").write_bytes(b"not an image")
    publish_epoch(root, 0, {"train/a/bad.png": tmp_path / "o" / "bad"})
    ds = EpochDataset(root, 0, decode="image", progress=None)
    with pytest.raises(ValueError, match=r"cannot decode sample .*bad\.png with decode_image"):
        ds[0]


def test_collate_names_the_fix_for_samples_of_different_shapes() -> None:
    a, b = torch.zeros(3, 4, 4, dtype=torch.uint8), torch.ones(3, 4, 4, dtype=torch.uint8)
    same = collate([(a, 1), (b, 0)])
    assert same[0].shape == (2, 3, 4, 4) and same[1].tolist() == [1, 0]
    with pytest.raises(BatchShapeError) as info:
        collate([(torch.zeros(3, 4, 4), 1), (torch.zeros(3, 5, 4), 0)])
    message = str(info.value)
    assert "(3, 4, 4)" in message and "(3, 5, 4)" in message and "[0]" in message
    assert "transform=" in message and "Resize" in message and "collate_fn=list" in message
    with pytest.raises(BatchShapeError, match="2 different shapes"):
        collate([{"x": torch.zeros(2)}, {"x": torch.zeros(3)}])
    # Raw bytes of different lengths (decode="bytes" on images): the same clear error.
    with pytest.raises(BatchShapeError):
        collate([torch.zeros(10, dtype=torch.uint8), torch.zeros(11, dtype=torch.uint8)])


def make_epochs(tmp_path: Path, epochs: list[dict[str, bytes]]) -> Path:
    root, objects = tmp_path / "mnt", tmp_path / "objects"
    objects.mkdir()
    for n, files in enumerate(epochs):
        links = {}
        for rel, body in files.items():
            target = objects / rel.replace("/", "_")
            target.write_bytes(body)
            links[rel] = target
        publish_epoch(root, n, links)
    return root


def test_without_classes_json_the_epochs_folders_number_the_classes_with_a_warning(tmp_path: Path) -> None:
    png = image_bytes("RGB", (4, 4), "PNG")
    root = make_epochs(tmp_path, [{"train/b/0.png": png, "train/d/0.png": png},
                                  {"train/b/0.png": png, "train/d/0.png": png, "train/c/1.png": png,
                                   "train/top.png": png}])
    with pytest.warns(UserWarning, match="no .epochfs/classes.json"):
        e1 = EpochImageFolder(root, 1, progress=None)
    assert e1.class_to_idx == {"b": 0, "c": 1, "d": 2}  # the epochs up to 1
    assert e1.excluded == 1 and e1.targets == [0, 1, 2]  # train/top.png is in no class folder
    with pytest.warns(UserWarning):
        assert EpochImageFolder(root, 0, progress=None).class_to_idx == {"b": 0, "d": 1}
    # classes= fixes the map (a validation set takes its training set's map).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        given = EpochImageFolder(root, 1, classes=["d", "c", "b"], progress=None)
        assert given.class_to_idx == {"d": 0, "c": 1, "b": 2} and given.targets == [2, 1, 0]
        with pytest.raises(ClassMapError, match=r"class folder\(s\) c .* no index in the classes= given"):
            EpochImageFolder(root, 1, classes={"b": 0, "d": 1}, progress=None)
    with pytest.raises(ClassMapError, match=r"no \.epochfs/classes\.json"):
        find_classes(epoch_dir(root, 1) / "train")


def test_classes_json_numbers_the_classes_and_must_name_each_folder(tmp_path: Path) -> None:
    png = image_bytes("RGB", (4, 4), "PNG")
    root = make_epochs(tmp_path, [{"train/b/0.png": png, "train/a/0.png": png, "val/a/0.png": png}])
    classes_path(root).write_text(format_classes(["train", "train/b", "train/z", "train/a", "val", "val/a"]))
    ds = EpochDataset(root, 0, decode="image", label="folder", class_root="train/", progress=None)
    assert ds.class_to_idx == {"b": 0, "z": 1, "a": 2} and ds.classes == ["b", "z", "a"]
    assert [ds[i][1] for i in range(len(ds))] == [2, 0]  # train/a/0.png, train/b/0.png
    assert find_classes(epoch_dir(root, 0) / "train") == (["b", "z", "a"], {"b": 0, "z": 1, "a": 2})
    assert EpochDataset(root, 0, label="folder", progress=None).class_to_idx == {"train": 0, "val": 1}
    classes_path(root).write_text(format_classes(["train", "train/b"]))
    with pytest.raises(ClassMapError, match=r"\(s\) a of 'train' in epoch 0 have no index in .*classes"):
        EpochImageFolder(root, 0, progress=None)
    with pytest.raises(AttributeError, match="label='folder'"):
        _ = EpochDataset(root, 0, progress=None).classes


@pytest.mark.parametrize("kwargs", [{"label": "name"}, {"label": "folder", "class_root": "../x"},
                                    {"label": "folder", "classes": {"a": -1}},
                                    {"label": "folder", "classes": "ab"}])
def test_bad_label_options_are_refused_up_front(tmp_path: Path, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        EpochLoader(tmp_path, batch_size=2, num_workers=0, report=False, **kwargs)
    with pytest.raises(ValueError):
        EpochDataset(tmp_path / "absent", 0, wait=False, **kwargs)
