"""A cut request the full volume refuses says so, and the log says it at most once a minute.

On a volume filled to its last byte the next epoch's cut (and its queued request) cannot be
written: the trainer's wait was told "epoch 11 is queued: it is cut as soon as its condition holds"
although nothing was queued and the condition held, while every poll logged
``cannot cut epoch 11 now: [Errno 28]`` (62 lines in 18 s). A real store on a real tmpfs, filled by
another file as another tenant would, and the answer of ``POST /v1/cut`` as the supervisor gives it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import pytest
from fuse_helpers import open_store
from inprocess import fill, small_volume
from store_helpers import put

from epochfs.sidecar import cutrequest
from epochfs.sidecar.cutrequest import CutRequest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")


def test_a_request_the_full_volume_refuses_says_the_volume_is_full_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with small_volume(tmp_path / "vol", "16m") as vol, open_store(vol / "cache") as store:
        for i in range(8):
            put(store, f"train/{i}.bin", 4096)
        assert store.cut() == 0
        with sqlite3.connect(vol / "cache" / "index.sqlite") as db:  # the next write must grow the log
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        filler = fill(vol, leave=0)
        with caplog.at_level(logging.WARNING, logger="epochfs.store"):
            answers = [cutrequest.answer(store, CutRequest(1)) for _ in range(20)]
        for code, doc in answers:
            assert (code, doc["state"]) == (202, "waiting")
            assert doc["message"].startswith("epoch 1 is not cut yet: the cache's volume is full, so its "
                                             "request could not be recorded ("), doc["message"]
        said = [r.getMessage() for r in caplog.records if "cannot cut epoch" in r.getMessage()]
        assert len(said) == 1, said
        assert "the cache's volume is full" in said[0]
        assert store.pending_cuts() == []
        filler.unlink()
        code, doc = cutrequest.answer(store, CutRequest(1))
        assert (code, doc["state"]) == (200, "live"), doc
