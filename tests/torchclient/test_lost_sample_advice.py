"""``SampleLostError`` gives the remedy that works: leave the key out with ``exclude=``.

Its message used to end "skip it or use a newer epoch". Neither works: a loader cannot skip one
sample, and in snapshot mode the epochs cut after the loss list the sample too until the cache
turns over past it (docs/reliability.md, section 5, "A sample that cannot be repaired"). The
message now names the key in an ``exclude=`` example; these tests take that example from the
message, make the loader again with it, and read every other sample. Real files in a plain folder
laid out like the folder view; a lost sample is the view's placeholder (every open answers ELOOP)
or, as on a FUSE view before its record, a dangling entry while ``status.json`` counts it lost.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from epochfs.torchclient import ArrayLoader, EpochLoader
from epochfs.torchclient.decode import decode_bytes, load_sample
from epochfs.torchclient.lost import SampleLostError, placeholder_target
from epochfs.torchclient.plainfolder import publish_epoch

NAMES = ["s00.npy", "s01.npy", "s0*.npy", "s[1].npy", "s1.npy"]
"""File names under ``train/``, some holding glob characters: an exclude that named the lost one
as a glob (``s0*.npy``, ``s[1].npy``) would leave out its neighbours too."""


def _folder(tmp_path: Path) -> tuple[Path, Path]:
    """``mnt/epoch-0/train/<name>`` -> ``objects/<i>.npy`` holding ``[i, i, i, i]`` (float32), and
    ``mnt/epoch-0/other/train/<name>`` likewise (values 10+i): a key that is not anchored at the
    epoch's root would match those too."""
    objects, root = tmp_path / "objects", tmp_path / "mnt"
    objects.mkdir()
    files = {}
    for i, name in enumerate(NAMES):
        for prefix, value in (("train", i), ("other/train", 10 + i)):
            obj = objects / f"{value}.npy"
            np.save(obj, np.full(4, value, np.float32))
            files[f"{prefix}/{name}"] = obj
    publish_epoch(root, 0, files)
    return root, objects


def _advised_exclude(message: str) -> list[str]:
    """The ``exclude=[...]`` the message advises, as the user would copy it."""
    found = re.search(r"exclude=(\[.*?\]) \(added", message)
    assert found is not None, message
    value = ast.literal_eval(found.group(1))
    assert isinstance(value, list) and all(isinstance(p, str) for p in value), value
    return value


def _values(loader: Any) -> list[int]:
    return sorted(int(v) for batch in loader.epoch(0) for v in batch[:, 0])


def _check_advice(message: str, key: str) -> None:
    assert "use a newer epoch" not in message and "skip it" not in message, message
    assert f"(key {key})" in message, message
    assert "newer epochs may list it too until the cache turns over" in message, message
    assert "docs/reliability.md" in message and "A sample that cannot be repaired" in message, message


@pytest.mark.parametrize("lost", ["s0*.npy", "s[1].npy", "s01.npy"])
def test_the_advised_exclude_reads_every_other_sample(tmp_path: Path, lost: str) -> None:
    root, _ = _folder(tmp_path)
    entry = root / "epoch-0" / "train" / lost
    entry.unlink()  # the folder view's placeholder: a link to itself, every open answers ELOOP
    os.symlink(placeholder_target(entry.name), entry)
    kwargs: dict[str, Any] = dict(batch_size=1, shuffle=False, progress=None, report=False)
    with ArrayLoader(root, **kwargs) as loader, pytest.raises(SampleLostError) as raised:
        _values(loader)
    message = str(raised.value)
    _check_advice(message, f"train/{lost}")
    exclude = _advised_exclude(message)
    others = [10 + i for i in range(len(NAMES))]  # other/train/ keeps every name
    everything_else = [i for i, name in enumerate(NAMES) if name != lost] + others
    with ArrayLoader(root, exclude=exclude, **kwargs) as loader:
        assert _values(loader) == everything_else
    with EpochLoader(root, exclude=exclude, decode="npy", num_workers=0, **kwargs) as epochs:
        assert _values(epochs) == everything_else


def test_a_dangling_entry_counted_lost_gives_the_same_advice(tmp_path: Path) -> None:
    root, objects = _folder(tmp_path)
    os.unlink(objects / "1.npy")  # train/s01.npy's object file: gone, the entry dangles
    (root / ".epochfs" / "status.json").write_text(json.dumps({"lost": 1, "repairing": 1}))
    path = str(root / "epoch-0" / "train" / "s01.npy")
    with pytest.raises(SampleLostError) as raised:
        load_sample(path, decode_bytes, retry_seconds=30)
    _check_advice(str(raised.value), "train/s01.npy")
    assert _advised_exclude(str(raised.value)) == ["/train/s01.npy"]
