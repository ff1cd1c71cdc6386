"""ArrayLoader(pin_memory=True) without CUDA is refused at construction, as device="cuda" is.

It used to be accepted, and the first epoch then failed with torch's RuntimeError from allocating
pinned buffers: after the epoch's lookup, far from the argument that caused it. The default
(``pin_memory=None``: pinned when CUDA is available) and ``False`` still read. Real files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from epochfs.torchclient import ArrayLoader

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")


def _folder(tmp_path: Path) -> Path:
    epoch = tmp_path / "root" / "epoch-0"
    epoch.mkdir(parents=True)
    for i in range(4):
        np.save(epoch / f"{i}.npy", np.full(3, i, np.float32))
    return tmp_path / "root"


def test_pin_memory_true_without_cuda_is_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"pin_memory=True but CUDA is not available.*pin_memory=None"):
        ArrayLoader(_folder(tmp_path), batch_size=2, pin_memory=True, progress=None, report=False)
    with pytest.raises(ValueError, match="CUDA is not available"):  # the same rule as the device's
        ArrayLoader(_folder(tmp_path / "b"), batch_size=2, device="cuda", progress=None, report=False)


@pytest.mark.parametrize("pin_memory", [None, False])
def test_the_default_and_false_read_unpinned(tmp_path: Path, pin_memory: bool | None) -> None:
    with ArrayLoader(_folder(tmp_path), batch_size=2, shuffle=False, pin_memory=pin_memory, progress=None,
                     report=False) as loader:
        assert loader.pin_memory is False
        assert [int(v) for batch in loader.epoch(0) for v in batch[:, 0]] == [0, 1, 2, 3]
        assert all(not t.is_pinned() for t in loader.ring)
