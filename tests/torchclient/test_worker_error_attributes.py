"""The attributes of the client's sample errors survive DataLoader worker processes.

torch hands a worker's exception to the training process as its type and traceback text and raises
``type(text)`` there, so ``NpyHeaderError.path/.field/.value``, ``SampleDecodeError.path`` and
``SampleLostError.filename`` (docs/torchclient.md, docs/folderview.md: "and its workers") were None
whenever EpochLoader decoded in workers, its default. Real DataLoader workers over real files.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from epochfs.torchclient import EpochDataset, EpochLoader
from epochfs.torchclient.decode import SampleDecodeError
from epochfs.torchclient.lost import SampleLostError, placeholder_target
from epochfs.torchclient.npyheader import NpyHeaderError
from epochfs.torchclient.plainfolder import publish_epoch

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="carried in an exception note (3.11+)")


def _epoch(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "epoch-0").mkdir(parents=True)
    return root


def _loader(root: Path, num_workers: int, **kw: Any) -> EpochLoader:
    return EpochLoader(root, batch_size=1, num_workers=num_workers, shuffle=False, progress=None,
                       report=False, retry_seconds=0, **kw)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_bad_header_names_path_field_and_value_from_workers_too(tmp_path: Path, num_workers: int) -> None:
    root = _epoch(tmp_path)
    path = root / "epoch-0" / "h.npy"
    np.save(path, np.zeros(4, np.float32))
    path.write_bytes(path.read_bytes().replace(b"'shape': (4,)", b"'shape': (9,)"))
    with _loader(root, num_workers, decode="npy") as loader, pytest.raises(NpyHeaderError) as raised:
        list(loader.epoch(0))
    e = raised.value
    assert (e.path, e.field, e.value) == (str(path), "shape", (9,))
    assert "bad .npy header: shape is (9,)" in str(e)
    if num_workers:
        assert "in DataLoader worker process" in str(e), "torch's re-raise, with the worker's traceback"


def test_a_decode_error_names_the_path_from_a_worker(tmp_path: Path) -> None:
    root = _epoch(tmp_path)
    path = root / "epoch-0" / "caf\udce9.pt"  # a non-UTF-8 name comes back as it went
    with open(os.fsencode(path), "wb") as f:
        f.write(b"not a torch.save file")
    with _loader(root, 1, decode="pt") as loader, pytest.raises(SampleDecodeError) as raised:
        list(loader.epoch(0))
    assert raised.value.path == str(path)
    assert type(raised.value) is SampleDecodeError


def _lost_folder(tmp_path: Path) -> tuple[Path, Path]:
    """Published as the folder view does (a manifest, links to object files): epoch-0/a.npy whole,
    epoch-0/b.npy replaced by the view's placeholder of a lost sample."""
    objects = tmp_path / "objects"
    objects.mkdir()
    for name in ("a", "b"):
        np.save(objects / f"{name}.npy", np.zeros(2, np.float32))
    root = tmp_path / "root"
    publish_epoch(root, 0, {f"{name}.npy": objects / f"{name}.npy" for name in ("a", "b")})
    lost = root / "epoch-0" / "b.npy"
    lost.unlink()
    os.symlink(placeholder_target(lost.name), lost)
    return root, lost


def test_a_lost_sample_names_its_file_from_epoch_loader_workers(tmp_path: Path) -> None:
    root, lost = _lost_folder(tmp_path)
    with _loader(root, 1, decode="npy") as loader, pytest.raises(SampleLostError) as raised:
        list(loader.epoch(0))
    e = raised.value
    assert e.errno == errno.EIO and e.filename == str(lost) and "lost from the remote" in str(e)


def test_a_lost_sample_names_its_file_from_a_dataloader_over_epoch_dataset(tmp_path: Path) -> None:
    root, lost = _lost_folder(tmp_path)
    dataset = EpochDataset(root, 0, decode="npy", progress=None, wait=False, retry_seconds=0)
    loader = torch.utils.data.DataLoader(dataset, batch_size=1, num_workers=1)
    with pytest.raises(SampleLostError) as raised:
        list(loader)
    assert raised.value.errno == errno.EIO and raised.value.filename == str(lost)


def test_built_from_one_message_without_the_note_the_attributes_are_none() -> None:
    header = NpyHeaderError("Caught NpyHeaderError in DataLoader worker process 0. (no note)")
    assert (header.path, header.field, header.value) == (None, None, None)
    assert SampleLostError("one message").filename is None and SampleLostError("x").errno == errno.EIO
    broken = SampleDecodeError("text\nepochfs-error-attributes: {'path': \n")
    assert broken.path is None, "a note that does not parse is ignored"
