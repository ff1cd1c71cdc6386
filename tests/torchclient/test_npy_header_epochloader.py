"""EpochLoader/EpochDataset parse ``.npy`` headers strictly, as ArrayLoader does: one NpyHeaderError.

The docs promise it for both loaders ("Bad headers and size limits"): a header that is not a dict
of exactly ``descr`` (a dtype numpy knows), ``fortran_order`` (True/False) and ``shape`` (integer
literals >= 0), or that declares more bytes than the file holds, raises :class:`NpyHeaderError`
(a SampleDecodeError) naming the file, the field and the value. ``decode_npy`` was plain
``np.load``, whose ValueErrors came out as a generic SampleDecodeError without ``.field``. Good files
must decode exactly as ``np.load`` reads them, still as a copy-on-write mapping of the file.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from epochfs.torchclient import EpochDataset, EpochLoader, SampleDecodeError
from epochfs.torchclient.decode import decode_auto, decode_npy
from epochfs.torchclient.npyheader import NpyHeaderError
from epochfs.torchclient.plainfolder import publish_epoch


def npy_bytes(header: str, data: bytes = b"\0" * 16) -> bytes:
    """A version 1.0 .npy file: magic, version, length, ``header`` padded as np.save pads it, ``data``."""
    text = header.encode("latin1")
    text += b" " * (-(10 + len(text) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data


def header(shape: str = "(4,)", descr: str = "'<f4'", fortran: str = "False", extra: str = "") -> str:
    return f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, {extra}}}"


BAD: dict[str, tuple[str, str, Any]] = {  # header text, field, value
    "float shape": (header(shape="(4.7,)"), "shape", (4.7,)),
    "negative shape": (header(shape="(-4,)"), "shape", (-4,)),
    "fortran_order 'no'": (header(fortran="'no'"), "fortran_order", "no"),
    "descr '<f9'": (header(descr="'<f9'"), "descr", "<f9"),
    "2**40 elements on a 16-byte file": (header(shape="(1099511627776,)"), "shape", (1099511627776,)),
    "an extra key": (header(extra="'x': 1, "), "header",
                     {"descr": "<f4", "fortran_order": False, "shape": (4,), "x": 1}),
}


def publish(tmp_path: Path, files: dict[str, bytes]) -> Path:
    objects = tmp_path / "objects"
    objects.mkdir(exist_ok=True)
    for name, data in files.items():
        (objects / name).write_bytes(data)
    root = tmp_path / "root"
    publish_epoch(root, 0, {name: objects / name for name in files})
    return root


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("decode", ["npy", "auto"])
def test_epoch_dataset_raises_npy_header_error_naming_the_field(tmp_path: Path, case: str,
                                                                decode: str) -> None:
    text, field, value = BAD[case]
    root = publish(tmp_path, {"a.npy": npy_bytes(text)})
    ds = EpochDataset(root, 0, decode=decode, progress=None, wait=False)
    with pytest.raises(NpyHeaderError) as caught:
        ds[0]
    path = str(root / "epoch-0" / "a.npy")
    assert isinstance(caught.value, SampleDecodeError)
    assert caught.value.field == field and caught.value.value == value and caught.value.path == path
    assert str(caught.value).startswith(f"sample {path}: bad .npy header: {field} is ")


@pytest.mark.parametrize("case", list(BAD))
def test_epoch_loader_raises_npy_header_error_naming_the_field(tmp_path: Path, case: str) -> None:
    text, field, _ = BAD[case]
    good = npy_bytes(header(), np.arange(4, dtype="<f4").tobytes())
    root = publish(tmp_path, {"a.npy": good, "b.npy": npy_bytes(text), "c.npy": good})
    loader = EpochLoader(root, batch_size=1, num_workers=0, decode="npy", shuffle=False, progress=None,
                         report=False)
    try:
        with pytest.raises(NpyHeaderError) as caught:
            list(loader.epoch(0))
    finally:
        loader.close()
    assert caught.value.field == field and "b.npy: bad .npy header" in str(caught.value)


def test_a_truncated_file_is_refused_by_its_declared_size(tmp_path: Path) -> None:
    path = tmp_path / "t.npy"
    path.write_bytes(npy_bytes(header(), b"\0" * 13))
    with pytest.raises(NpyHeaderError, match="declares 16 bytes of data, but the file holds 13") as caught:
        decode_npy(str(path))
    assert caught.value.field == "shape"


def test_objects_are_refused_without_unpickling(tmp_path: Path) -> None:
    path = tmp_path / "o.npy"
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(SampleDecodeError, match="holds objects"):
        decode_npy(str(path))


GOOD_ARRAYS = {
    "float32 2-D": np.arange(12, dtype=np.float32).reshape(3, 4),
    "fortran order": np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)),
    "big-endian": np.arange(5, dtype=">i4"),
    "0-d": np.array(7.5),
    "empty": np.zeros((0, 3), dtype=np.uint8),
    "bool 3-D": np.arange(24).reshape(2, 3, 4) % 3 == 0,
}


@pytest.mark.parametrize("name", list(GOOD_ARRAYS))
def test_good_files_decode_as_np_load_reads_them(tmp_path: Path, name: str) -> None:
    path = tmp_path / "g.npy"
    np.save(path, GOOD_ARRAYS[name])
    for decoder in (decode_npy, decode_auto):
        tensor = decoder(str(path))
        expected = np.load(path)
        assert tuple(tensor.shape) == expected.shape
        assert torch.equal(tensor, torch.from_numpy(expected.astype(expected.dtype.newbyteorder("="))))
        if expected.size:  # writable, in private pages
            first = (0,) * tensor.dim()
            tensor[first] = ~tensor[first] if tensor.dtype == torch.bool else tensor[first] + 1
    assert np.array_equal(np.load(path), GOOD_ARRAYS[name]), "copy-on-write: the file is unchanged"
