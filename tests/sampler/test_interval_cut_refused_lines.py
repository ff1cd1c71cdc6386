"""The interval's cuts a full volume refuses: each is told to the loop (which measures the volume
and pauses as "disk full"), the log says it once a minute at most, and says when cuts resume.

Every refused cut was dropped without a line. A real store on a real 16 MiB tmpfs filled by
another tenant's file; the schedule as the loop makes it, its interval's ticks given their times
(the log's minute is the real clock's: 20 refusals within it make one line).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fuse_helpers import open_store
from inprocess import fill, small_volume
from store_helpers import put

from epochfs.sidecar.sampler.cutter import CutSchedule
from epochfs.sidecar.sampler.diskspace import is_disk_full

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")


def _direct(write: Callable[[], Any]) -> Any:
    return write()


def test_refused_interval_cuts_are_told_and_said_once_a_minute(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    told: list[BaseException] = []
    with small_volume(tmp_path / "vol", "16m") as vol, open_store(vol / "cache") as store:
        for i in range(8):
            put(store, f"train/{i}.bin", 4096)
        assert store.cut() == 0
        cuts = CutSchedule(store, 5.0, _direct, on_full=told.append)
        filler = fill(vol, leave=0)  # another tenant: the volume full to its last byte
        now = cuts.last
        with caplog.at_level(logging.INFO, logger="epochfs.sampler"):
            for _ in range(20):
                now += 6.0
                cuts.tick(now, samples=8, backpressure=True)
            assert store.newest_epoch() == 0
            assert len(told) == 20 and all(is_disk_full(e) for e in told), told
            said = [r.getMessage() for r in caplog.records if "cannot cut epoch" in r.getMessage()]
            assert len(said) == 1, said
            assert said[0].startswith("cannot cut epoch 1 now: the cache's volume is full ("), said
            filler.unlink()
            now += 6.0
            cuts.tick(now, samples=8, backpressure=True)
        assert store.newest_epoch() == 1
        assert any(r.getMessage().startswith("cuts resume: epoch 1 cut") for r in caplog.records)
