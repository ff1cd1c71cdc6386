"""A damaged high-water mark is reported once, not at every read.

Why: while a cache has no live epoch the status document names the number the first cut gets,
which reads ``epochs.hwm``; the FUSE server renders that document twice a second, so a damaged
file logged an error twice a second for as long as it lasted. It is reported once a process for
each damage (another damage, or another cache, is reported again), and read as none every time.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from epochfs.sidecar.store import hwm


def test_a_damaged_mark_is_reported_once_and_read_as_none(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="epochfs.store")
    (tmp_path / hwm.HWM_NAME).write_text("garbage")
    assert [hwm.read(tmp_path) for _ in range(5)] == [None] * 5
    assert sum("is damaged" in r.getMessage() for r in caplog.records) == 1
    (tmp_path / hwm.HWM_NAME).write_text(f"{hwm.MAX_EPOCH + 5} 0")
    assert [hwm.read(tmp_path) for _ in range(3)] == [None] * 3
    assert sum("above the largest epoch number" in r.getMessage() for r in caplog.records) == 1
    (tmp_path / hwm.HWM_NAME).write_text("4 5")
    assert hwm.read(tmp_path) == hwm.HighWater(4, 5)
