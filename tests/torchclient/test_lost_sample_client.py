"""The torch client tells a sample the remote lost from a mount that is away (issue 20).

On a plain folder shaped like the folder view: an entry that is a symlink to a missing object file
and a ``status.json`` that counts lost samples. The client raises ``SampleLostError`` (errno EIO)
at once when every absent object is a lost one, after its retries when others wait for a repair
(those come back), and keeps its old behaviour (retry ENOENT, then "vanished") where nothing says
a sample was lost: no status, or no entry at all (a mount being replaced)."""

from __future__ import annotations

import errno
import json
import logging
import os
import pickle
import time
from pathlib import Path

import pytest

from epochfs.torchclient.decode import SampleDecodeError, decode_bytes, load_sample
from epochfs.torchclient.lost import SampleLostError, lost_error
from epochfs.torchclient.retry import transient


def folder(tmp_path: Path, status: dict[str, int] | None) -> Path:
    """``root/epoch-0/train/a.bin`` -> a missing object file; ``b.bin`` a whole one."""
    root = tmp_path / "view"
    (root / "epoch-0" / "train").mkdir(parents=True)
    (tmp_path / "objects").mkdir()
    (tmp_path / "objects" / "b").write_bytes(b"bytes of b")
    os.symlink(tmp_path / "objects" / "a", root / "epoch-0" / "train" / "a.bin")
    os.symlink(tmp_path / "objects" / "b", root / "epoch-0" / "train" / "b.bin")
    if status is not None:
        (root / ".epochfs").mkdir()
        (root / ".epochfs" / "status.json").write_text(json.dumps(status))
    return root


def test_a_lost_sample_fails_at_once_with_eio_naming_the_file(tmp_path: Path) -> None:
    root = folder(tmp_path, {"lost": 1, "repairing": 1})
    path = str(root / "epoch-0" / "train" / "a.bin")
    started = time.monotonic()
    with pytest.raises(SampleLostError) as raised:
        load_sample(path, decode_bytes, retry_seconds=30)
    assert time.monotonic() - started < 2, "not retried"
    e = raised.value
    assert e.errno == errno.EIO and e.filename == path and "lost from the remote" in str(e)
    again = pickle.loads(pickle.dumps(e))  # as a worker process hands it back
    assert (type(again), again.errno, again.filename) == (SampleLostError, errno.EIO, path)
    assert SampleLostError("one message, as the DataLoader rebuilds it").errno == errno.EIO
    assert not transient(e), "an EIO raised from the ENOENT is not retried"
    whole = load_sample(str(root / "epoch-0" / "train" / "b.bin"), decode_bytes)
    assert bytes(whole.numpy()) == b"bytes of b"


def test_while_other_samples_wait_for_a_repair_it_is_retried_then_reported_lost(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = folder(tmp_path, {"lost": 1, "repairing": 3})
    path = str(root / "epoch-0" / "train" / "a.bin")
    caplog.set_level(logging.WARNING, logger="epochfs.torchclient")
    started = time.monotonic()
    with pytest.raises(SampleLostError):
        load_sample(path, decode_bytes, retry_seconds=0.5)
    assert time.monotonic() - started >= 0.5, "retried first: it may be a repair in progress"
    assert any("giving up" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("status", [None, {"lost": 0, "repairing": 1}])
def test_nothing_said_lost_keeps_the_retry_and_the_vanished_error(tmp_path: Path,
                                                                  status: dict[str, int] | None) -> None:
    root = folder(tmp_path, status)
    path = str(root / "epoch-0" / "train" / "a.bin")
    with pytest.raises(SampleDecodeError, match="vanished"):
        load_sample(path, decode_bytes, retry_seconds=0.2)


def test_an_entry_that_is_not_there_is_no_lost_sample(tmp_path: Path) -> None:
    """A mount being replaced shows no entry at all: that is retried, never called lost."""
    root = folder(tmp_path, {"lost": 1, "repairing": 1})
    missing = str(root / "epoch-0" / "train" / "c.bin")
    gone = FileNotFoundError(errno.ENOENT, "No such file or directory", missing)
    assert lost_error(missing, gone, final=True) is None
    outside = tmp_path / "objects" / "b"
    assert lost_error(str(outside), FileNotFoundError(errno.ENOENT, "x", str(outside)), final=True) is None
