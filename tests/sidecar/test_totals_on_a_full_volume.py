"""The supervisor's totals that cannot be saved on a full volume are said once, not every tick.

Before: "saving totals: database or disk is full" every two seconds (30 lines a minute) for as
long as the cache's volume stayed full. Now: when it starts, at most once a minute while it lasts,
and "saved again" when a save succeeds.

The supervisor's own code (:class:`Observability`, the mixin its ``__init__`` fills), a real store
on a real tmpfs filled to its last byte, its real metrics.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import pytest
from inprocess import fill, small_volume
from observability_helpers import StoreObservability

from epochfs.sidecar.store import Meta, Store

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")


def test_totals_that_cannot_be_saved_are_said_once_then_saved_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="epochfs.supervisor")
    with small_volume(tmp_path / "vol", "16m") as vol:
        store = Store(vol / "cache", create=True)
        try:
            ticks = StoreObservability(store)
            with sqlite3.connect(vol / "cache" / "index.sqlite") as db:  # a write must grow the log
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            filler = fill(vol, leave=0)
            for _ in range(30):  # a minute of ticks, each with new totals to save
                ticks._metrics.add_served(1, 100)
                ticks._periodic()
            lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("saving totals")]
            assert len(lines) == 1, lines
            assert "disk is full" in lines[0] and "at most once a minute" in lines[0], lines
            assert store.meta(Meta.SIDECAR_TOTALS) is None
            filler.unlink()
            ticks._metrics.add_served(1, 100)
            ticks._periodic()
            lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("saving totals")]
            assert lines[1:] == ["saving totals: saved again"], lines
            assert '"served_samples_total": 31.0' in (store.meta(Meta.SIDECAR_TOTALS) or "")
        finally:
            store.close()
