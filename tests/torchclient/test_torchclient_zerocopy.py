"""A .npy sample's tensor is the mapped file itself: no copy in the reading process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from epochfs.torchclient import EpochDataset
from epochfs.torchclient.plainfolder import publish_epoch


def _mapping_of(address: int) -> tuple[int, int, str]:
    """The /proc/self/maps line holding ``address``: (start, end, path of the mapped file or '')."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if start <= address < end:
            return start, end, fields[5] if len(fields) == 6 else ""
    raise AssertionError(f"address {address:#x} is in no mapping of this process")


def test_npy_tensor_is_backed_by_the_mapped_object_file(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    objects.mkdir()
    array = np.random.default_rng(1).standard_normal((256, 1024)).astype(np.float32)  # 1 MiB
    np.save(objects / "ab12", array)
    publish_epoch(tmp_path / "mnt", 0, {"sample.npy": objects / "ab12.npy"})

    tensor = EpochDataset(tmp_path / "mnt", 0, decode="npy")[0]

    _start, end, mapped = _mapping_of(tensor.data_ptr())
    assert mapped == str((objects / "ab12.npy").resolve())
    assert tensor.data_ptr() + tensor.numel() * tensor.element_size() <= end
    assert torch.equal(tensor, torch.from_numpy(array))
    # Copy-on-write: the tensor is writable, and writing never reaches the (read-only) file.
    tensor[0, 0] = 12345.0
    assert np.load(objects / "ab12.npy")[0, 0] == array[0, 0]


def test_bytes_and_npz_are_plain_memory(tmp_path: Path) -> None:
    """The contrast: decoders that read into memory give tensors in anonymous memory."""
    objects = tmp_path / "objects"
    objects.mkdir()
    np.savez(objects / "s.npz", x=np.zeros(1 << 18, np.float32))
    publish_epoch(tmp_path / "mnt", 0, {"s.npz": objects / "s.npz"})
    tensor = EpochDataset(tmp_path / "mnt", 0)[0]["x"]
    assert "s.npz" not in _mapping_of(tensor.data_ptr())[2]


def test_loader_batches_reach_the_training_process_in_shared_memory(tmp_path: Path) -> None:
    """Workers map the files and collate into shared memory; the training process receives it as is."""
    from epochfs.torchclient import EpochLoader

    objects = tmp_path / "objects"
    objects.mkdir()
    for i in range(4):
        np.save(objects / f"{i}.npy", np.full((64, 64), i, np.float32))
    publish_epoch(tmp_path / "mnt", 0, {f"{i}.npy": objects / f"{i}.npy" for i in range(4)})
    with EpochLoader(tmp_path / "mnt", batch_size=2, num_workers=1, decode="npy", shuffle=False,
                     progress=None) as loader:
        batches = list(loader.epoch(0))
    assert all(batch.is_shared() for batch in batches)
    assert [batch[:, 0, 0].tolist() for batch in batches] == [[0.0, 1.0], [2.0, 3.0]]
