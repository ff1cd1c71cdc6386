"""``--cut-interval`` cuts only where a sample arrived since the newest epoch, asked of the store:
the loop counts each batch the admitter took, downloads dropped at admission too (a key fetched
again while it was cached, one held back), and by that count a batch that added nothing cut a copy
of the newest epoch, which spends an epoch number and a ``--keep-epochs`` slot. A real store; the
admission as the sampler makes it (``store_helpers.put``: reservations, a fsynced temp file)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fuse_helpers import open_store
from store_helpers import put

from epochfs.sidecar.sampler.cutter import CutSchedule


def _direct(write: Callable[[], Any]) -> Any:
    return write()


def test_a_batch_dropped_at_admission_brings_no_timer_cut(tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    with open_store(tmp_path / "cache") as store:
        for i in range(4):
            put(store, f"train/{i}.bin", 100)
        assert store.cut() == 0
        cuts = CutSchedule(store, 1.0, _direct)
        with caplog.at_level(logging.INFO, logger="epochfs.store"):
            put(store, "train/1.bin", 100)  # downloaded again while cached: dropped
        assert "fetched again while cached" in caplog.text
        cuts.tick(cuts.last + 2.0, samples=1, backpressure=False)  # the loop counted that batch
        assert store.newest_epoch() == 0, "nothing new since epoch 0: no copy of it"
        put(store, "train/4.bin", 100)
        cuts.tick(cuts.last + 2.0, samples=2, backpressure=False)
        assert store.newest_epoch() == 1, "a sample arrived: the timer cuts"
        assert store.epochs()[-1].samples == 5
