"""Checkpointing a plain folder whose file names are not UTF-8 (a Samba or old NFS share).

The walk lists such a name as Python's ``surrogateescape`` text and both loaders read the file;
``state_dict()`` hashed the epoch's file list with a strict UTF-8 encode and so raised
``UnicodeEncodeError`` at the first checkpoint. Real files with a latin-1 name in a real folder
(no manifest: the walk), both loaders, a JSON round trip of the state and a resume; and the digest
of UTF-8 names is the one it always was, so checkpoints saved before still resume.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from epochfs.torchclient import ArrayLoader, EpochLoader
from epochfs.torchclient.resume import epoch_digest

NAMES = [b"a.npy", b"caf\xe9.npy", b"m.npy", b"z.npy"]  # caf\xe9: latin-1, not UTF-8


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "share"
    epoch = root / "epoch-0"
    epoch.mkdir(parents=True)
    for i, name in enumerate(NAMES):
        with open(os.fsencode(epoch) + b"/" + name, "wb") as f:
            np.save(f, np.full(4, i, np.float32))
    return root


def _loader(kind: str, root: Path) -> ArrayLoader | EpochLoader:
    options: dict[str, Any] = dict(batch_size=1, shuffle=False, report=False, progress=None, wait=False)
    if kind == "array":
        return ArrayLoader(root, num_threads=2, **options)
    return EpochLoader(root, num_workers=0, decode="npy", **options)


def _ids(batch: torch.Tensor) -> list[int]:
    return [int(v) for v in batch[:, 0]]


@pytest.mark.parametrize("kind", ["array", "epoch"])
def test_a_non_utf8_file_name_checkpoints_and_resumes(tmp_path: Path, kind: str) -> None:
    root = _folder(tmp_path)
    states, seen = [], []
    with _loader(kind, root) as loader:
        for batch in loader.epoch(0):
            seen.append(_ids(batch))
            states.append(json.dumps(loader.state_dict()))  # a checkpoint after every step
    assert sorted(i for ids in seen for i in ids) == [0, 1, 2, 3]
    with _loader(kind, root) as resumed:
        resumed.load_state_dict(json.loads(states[1]))  # two batches consumed
        rest = [_ids(batch) for batch in resumed.epoch(0)]
    assert rest == seen[2:]


def test_the_digest_of_utf8_names_is_unchanged() -> None:
    files, sizes = ["train/a.npy", "train/é.npy"], [144, 144]
    strict = hashlib.sha256("train/a.npy\t144\ntrain/é.npy\t144".encode()).hexdigest()
    assert epoch_digest(files, sizes) == "sha256:" + strict
    escaped = os.fsdecode(b"train/caf\xe9.npy")
    assert epoch_digest([escaped], [1]) == epoch_digest([escaped], [1])
    assert epoch_digest([escaped], [1]) != epoch_digest(["train/cafe.npy"], [1])
