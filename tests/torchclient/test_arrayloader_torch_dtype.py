"""``ArrayLoader(dtype=...)`` takes torch dtypes as well as numpy's.

A torch loader yields torch tensors, so ``dtype=torch.float32`` is what its users pass; it failed
inside numpy (``TypeError: Cannot interpret 'torch.float32' as a data type``), and a raw file of
bfloat16 values could not be declared at all. A torch dtype is now the numpy dtype of the same
bytes, and one numpy lacks (``torch.bfloat16``) is read as its bits into bfloat16 batches. Plain
folders published like the mount (``publish_epoch``), no sidecar.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from epochfs.torchclient import ArrayLoader, ArraySampleError
from epochfs.torchclient.plainfolder import publish_epoch


def publish(tmp_path: Path, bodies: dict[str, bytes]) -> Path:
    files: dict[str, Path] = {}
    for rel, body in bodies.items():
        path = tmp_path / "objects" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        files[rel] = path
    publish_epoch(tmp_path / "mnt", 0, files)
    return tmp_path / "mnt"


def read_all(root: Path, **kwargs: object) -> torch.Tensor:
    with ArrayLoader(root, batch_size=3, shuffle=False, num_threads=2, report=False, progress=None,
                     copy=True, **kwargs) as loader:  # type: ignore[arg-type]
        return torch.cat(list(loader.epoch(0)))


VALUES = torch.arange(24, dtype=torch.float32).reshape(6, 4) / 7


@pytest.mark.parametrize("dtype", [torch.float32, np.float32, "float32"])
def test_raw_float32_by_any_name(tmp_path: Path, dtype: object) -> None:
    root = publish(tmp_path, {f"{i}.bin": VALUES[i].numpy().tobytes() for i in range(6)})
    got = read_all(root, format="raw", dtype=dtype, shape=(4,))
    assert got.dtype == torch.float32 and torch.equal(got, VALUES)


def test_raw_bfloat16_files_come_out_as_bfloat16(tmp_path: Path) -> None:
    values = VALUES.to(torch.bfloat16)
    root = publish(tmp_path, {f"{i}.bin": values[i].view(torch.int16).numpy().tobytes() for i in range(6)})
    got = read_all(root, format="raw", dtype=torch.bfloat16, shape=(4,))
    assert got.dtype == torch.bfloat16 and torch.equal(got, values)


def test_npy_of_bfloat16_bits_and_a_checked_mismatch(tmp_path: Path) -> None:
    values = VALUES.to(torch.bfloat16)
    bodies = {}
    for i in range(6):
        path = tmp_path / f"{i}.npy"
        np.save(path, values[i].view(torch.int16).numpy().view(np.uint16))
        bodies[f"{i}.npy"] = path.read_bytes()
    root = publish(tmp_path, bodies)
    got = read_all(root, dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16 and torch.equal(got, values)
    with pytest.raises(ArraySampleError, match="float32"):  # the file's own dtype, checked as numpy's
        read_all(root, dtype=torch.float32)


def test_a_torch_dtype_with_no_bytes_to_read_is_refused_naming_the_alternative() -> None:
    with pytest.raises(ValueError, match=r"dtype=torch.qint8 .*pass a numpy dtype such as 'float32'"):
        ArrayLoader("/nonexistent", batch_size=2, format="raw", dtype=torch.qint8, shape=(4,))
