"""``.npz`` samples with different member sets fail their batch, naming the files, whatever the order.

torch's ``default_collate`` takes the first sample's names: a batch whose first sample lacked
``extra`` dropped it from the others without a word, one whose first sample held ``y`` failed on a
later sample without it, so the outcome depended on the shuffle. The loaders' collate now refuses
any batch whose samples hold different names with a ``BatchMembersError`` naming a file of each
set and the fixes. Plain folders published like the mount (``publish_epoch``), no sidecar.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from epochfs.torchclient import BatchMembersError, EpochLoader, NpzMemberError
from epochfs.torchclient.collate import collate
from epochfs.torchclient.plainfolder import publish_epoch


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The review's bucket: ``t/i.npz`` with x and y; odd ones also ``extra``; ``t/5.npz`` without y."""
    files: dict[str, Path] = {}
    for i in range(6):
        members = {"x": np.full(4, i, np.float32), "y": np.array(i)}
        if i % 2:
            members["extra"] = np.ones(2)
        if i == 5:
            del members["y"]
        path = tmp_path / "objects" / f"t/{i}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, **members)  # type: ignore[arg-type]
        files[f"t/{i}.npz"] = path
    publish_epoch(tmp_path / "mnt", 0, files)
    return tmp_path / "mnt"


@pytest.mark.parametrize("workers", [0, 2])
def test_the_first_batch_names_both_files_and_the_member(root: Path, workers: int) -> None:
    with EpochLoader(root, batch_size=3, decode="npz", num_workers=workers, shuffle=False, report=False,
                     progress=None) as loader, pytest.raises(BatchMembersError) as caught:
        list(loader.epoch(0))
    text, first = str(caught.value), root / "epoch-0" / "t" / "0.npz"
    assert caught.value.path == str(root / "epoch-0" / "t" / "1.npz")  # carried from a worker too
    assert (f"sample {caught.value.path} holds ['extra'], which the batch's first sample lacks; sample "
            f"{first} holds ['x', 'y']: cannot batch") in text, text  # from a worker: after its traceback
    assert "(only one of them: ['extra'])" in text and "collate_fn=list" in text
    assert isinstance(caught.value, NpzMemberError) and isinstance(caught.value, KeyError)


def test_a_sample_lacking_a_member_says_so_as_before(root: Path) -> None:
    with EpochLoader(root, batch_size=2, decode="npz", num_workers=0, shuffle=False, report=False,
                     progress=None, exclude=["t/0.npz", "t/1.npz", "t/2.npz", "t/3.npz"]) as loader, \
            pytest.raises(BatchMembersError) as caught:
        list(loader.epoch(0))
    five = root / "epoch-0" / "t" / "5.npz"
    assert str(caught.value).startswith(f"sample {five} has no array 'y' (it holds ['extra', 'x']); "
                                        f"sample {root / 'epoch-0' / 't' / '4.npz'} holds ['x', 'y']")


@pytest.mark.parametrize("seed", range(4))
def test_every_shuffle_fails_the_same_way(root: Path, seed: int) -> None:
    with EpochLoader(root, batch_size=6, decode="npz", num_workers=0, seed=seed, report=False,
                     progress=None) as loader, pytest.raises(BatchMembersError, match="different arrays"):
        list(loader.epoch(0))


def test_same_names_collate_as_before_and_nested_dicts_are_checked() -> None:
    same = [{"x": torch.zeros(2), "y": torch.tensor(i)} for i in range(3)]
    assert collate(same)["y"].tolist() == [0, 1, 2]
    pairs = [({"x": torch.zeros(2)}, 0), ({"x": torch.zeros(2), "z": torch.ones(1)}, 1)]
    with pytest.raises(BatchMembersError, match=r"sample 1 of the batch holds \['z'\] at \[0\], which"):
        collate(pairs)
