"""A read record the index cannot take now (its write lock held, a full volume) is warned about
once a minute, not once a call.

Why: the supervisor renews the reads of the epochs the torch client claims every second
(sidecar/served_pins.py); with the sampler holding the lock for long, or the volume full, each
renewal logged a WARNING: one line a second in the sidecar's log for as long as it lasted.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_helpers import put

from epochfs.sidecar.store import Policy, Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "cache", create=True)
    s.configure(Policy(capacity=1000, keep_epochs=1, headroom=0.3, in_use_seconds=0.0))
    put(s, "k0")
    assert s.cut(0) == 0
    yield s
    s.close()


def test_refused_read_records_warn_once(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    holder = sqlite3.connect(store.root / "index.sqlite", timeout=0, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the write lock held, as a long sampler write holds it
    try:
        with caplog.at_level(logging.DEBUG, logger="epochfs.store"):
            results = [store.record_reads([0]) for _ in range(4)]
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert results == [False] * 4
    said = [r for r in caplog.records if r.getMessage().startswith("cannot record a read of epoch 0")]
    levels = [r.levelno for r in said]
    # Four said, at most one loud (none where another test of this process warned this minute).
    assert len(levels) == 4 and levels.count(logging.WARNING) <= 1, levels
    assert store.record_reads([0]) is True  # taken again once the lock is free
