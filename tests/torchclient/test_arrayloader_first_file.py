"""ArrayLoader reads the first file of its first epoch as it reads every sample.

The first file is where the loader takes its template (dtype, shape, header) from, before any
buffer exists. That read used to be a bare ``os.open`` outside the reader threads' rule, so the
file briefly away (a FUSE server restart) failed the epoch at once with FileNotFoundError, and a
folder-view placeholder (a sample the remote lost) showed as a raw ELOOP instead of
``SampleLostError``. Real files in a plain folder laid out like the folder view; the object file
behind the first entry is really moved away and back.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from epochfs.torchclient import ArrayLoader, ArraySampleError
from epochfs.torchclient import retry as retry_module
from epochfs.torchclient.lost import SampleLostError, placeholder_target
from epochfs.torchclient.plainfolder import publish_epoch


class _OnOpen:
    """An audit hook (they cannot be removed, so one per process, idle between tests) that runs an
    action just before the ``at``-th ``open`` of one path: the loader's earlier tries of that path
    have then failed, and the action brings the file back before the next. No sleeps, no timing."""

    installed: _OnOpen | None = None

    def __init__(self) -> None:
        self.path: str | None = None
        self.opens = 0
        self.at = 0
        self.action: Any = None

    @classmethod
    def arm(cls, path: str, at: int, action: Any) -> _OnOpen:
        if cls.installed is None:
            cls.installed = cls()
            sys.addaudithook(cls.installed.hook)
        hook = cls.installed
        hook.path, hook.opens, hook.at, hook.action = path, 0, at, action
        return hook

    def disarm(self) -> None:
        self.path, self.action = None, None

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event != "open" or self.path is None or not args or args[0] != self.path:
            return
        self.opens += 1
        if self.opens == self.at and self.action is not None:
            action, self.action = self.action, None
            action()


def _folder(tmp_path: Path, n: int = 6) -> tuple[Path, Path]:
    """``mnt/epoch-0/train/sNN.npy`` -> ``objects/sNN.npy`` holding ``[i, i, i, i]`` (float32)."""
    objects, root = tmp_path / "objects", tmp_path / "mnt"
    objects.mkdir()
    files = {}
    for i in range(n):
        np.save(objects / f"s{i:02d}.npy", np.full(4, i, np.float32))
        files[f"train/s{i:02d}.npy"] = objects / f"s{i:02d}.npy"
    publish_epoch(root, 0, files)
    return root, objects


def _loader(root: Path, **kwargs: Any) -> ArrayLoader:
    return ArrayLoader(root, batch_size=2, shuffle=False, progress=None, report=False, **kwargs)


@pytest.fixture(autouse=True)
def _fresh_retry_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """A give-up by an earlier test in this process would make the retry fail at once."""
    monkeypatch.setattr(retry_module._State, "given_up_at", None)


def test_the_first_file_briefly_away_is_retried_like_any_sample(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root, objects = _folder(tmp_path)
    first = str(root / "epoch-0" / "train" / "s00.npy")
    obj = objects / "s00.npy"
    obj.rename(objects / "s00.away")  # the mount is away: the listed entry answers ENOENT
    # Back before the third open: the first try fails, then one retry (one WARNING line), then it reads.
    hook = _OnOpen.arm(first, 3, lambda: (objects / "s00.away").rename(obj))
    try:
        with caplog.at_level(logging.WARNING, logger="epochfs.torchclient"), _loader(root) as loader:
            values = sorted(int(v) for batch in loader.epoch(0) for v in batch[:, 0])
    finally:
        hook.disarm()
    assert values == [0, 1, 2, 3, 4, 5]
    assert hook.opens >= 3, "the first file was opened again after its first tries failed"
    lines = [r.getMessage() for r in caplog.records if r.name == "epochfs.torchclient"]
    assert len(lines) == 1 and "s00.npy" in lines[0] and "read after" in lines[0], lines
    assert "1 retries" in lines[0], lines


def test_the_first_file_missing_without_retries_is_an_array_sample_error_naming_it(tmp_path: Path) -> None:
    root, objects = _folder(tmp_path)
    (objects / "s00.npy").unlink()
    first = str(root / "epoch-0" / "train" / "s00.npy")
    with _loader(root, retry_seconds=0) as loader, pytest.raises(ArraySampleError) as raised:
        list(loader.epoch(0))
    assert raised.value.path == first and "No such file" in str(raised.value)


@pytest.mark.parametrize("format", ["npy", "npz", "auto"])
def test_a_lost_first_file_is_sample_lost_error_at_once(tmp_path: Path, format: str) -> None:
    root, _ = _folder(tmp_path)
    first = root / "epoch-0" / "train" / "s00.npy"
    first.unlink()  # the folder view's placeholder: a link to itself, every open answers ELOOP
    os.symlink(placeholder_target(first.name), first)
    with _loader(root, format=format) as loader, pytest.raises(SampleLostError) as raised:
        list(loader.epoch(0))
    e = raised.value
    assert e.errno == errno.EIO and e.filename == str(first) and "lost from the remote" in str(e)
    assert "placeholder" in str(e)


def test_a_lost_file_after_the_first_is_still_sample_lost_error(tmp_path: Path) -> None:
    root, _ = _folder(tmp_path)
    later = root / "epoch-0" / "train" / "s03.npy"
    later.unlink()
    os.symlink(placeholder_target(later.name), later)
    with _loader(root) as loader, pytest.raises(SampleLostError) as raised:
        list(loader.epoch(0))
    assert raised.value.errno == errno.EIO and raised.value.filename == str(later)
