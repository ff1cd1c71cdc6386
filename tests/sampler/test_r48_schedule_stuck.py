"""Schedule mode whose next window cannot fit beside the kept epochs says so.

The next cut waits for its whole window; the room its missing keys need frees only when an epoch
retires, and while no more epochs are live than --keep-epochs that happens only at the next cut.
Sampling stopped for good with nothing but "cache full" to show for it. Now an ERROR, once, names
the ways out, and the status's backpressure reason says which window is stuck.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from common import wait_until
from inprocess import objects_of, sampling, settings_for

from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.store import Store

KiB = 1024


def _cut_while_possible(store: Store, *, timeout: float = 30.0) -> int:
    """Cut each epoch as soon as its condition holds (what `epochfs cut` does); the newest cut once
    the backpressure says a window is stuck."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        store.cut()
        reason = store.stats().backpressure_reason or ""
        newest = store.newest_epoch()
        if "cannot fit beside the kept epochs" in reason and newest is not None:
            return newest
        time.sleep(0.05)  # a poll interval, not a synchronization: the loop is on the condition
    raise AssertionError(f"no stuck window reported; reason {store.stats().backpressure_reason!r}")


@pytest.mark.long
def test_a_window_that_cannot_fit_beside_the_kept_epochs_is_reported(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # 4 KiB keys, a 64 KiB cache (48 KiB an epoch: 12 keys), two kept epochs, windows of 8 keys
    # growing by 15% an epoch: epochs 4 and 5 pin keys 2-15 (56 KiB) and window 6 is keys 7-18
    # (docs/sampler.md, "Schedule mode").
    objects = objects_of(200, size=4 * KiB)
    settings = settings_for(tmp_path / "cache", "--capacity", "64Ki", "--keep-epochs", "2",
                            "--schedule", "initial=8,growth=1.15", "--cut-interval", "0",
                            "--scrub-rate", "0")
    caplog.set_level(logging.ERROR, logger="epochfs.sampler")
    with sampling(tmp_path / "cache", MemoryRemote(objects), settings) as (store, _sampler):
        newest = _cut_while_possible(store)
        stuck = newest + 1
        assert stuck == 6, "epochs 4 and 5 pin keys 2-15; window 6 is keys 7-18: 17 keys where 16 fit"
        reason = store.stats().backpressure_reason
        assert reason == f"cache full: epoch {stuck}'s window cannot fit beside the kept epochs " \
                         f"({newest - 1}-{newest})"
        assert store.cut() is None, "the window is not complete, and will not be"
        errors = [r.getMessage() for r in caplog.records if "schedule mode is stuck" in r.getMessage()]
        assert len(errors) == 1, errors
        assert f"epoch {stuck}'s window" in errors[0]
        for way_out in ("--capacity", "growth", "--keep-epochs", "epochfs cut --force"):
            assert way_out in errors[0]
        # The way out it names: a forced cut retires the oldest kept epoch; sampling goes on.
        assert store.cut(force=True) == stuck
        wait_until(lambda: f"epoch {stuck}'s" not in (store.stats().backpressure_reason or ""),
                   timeout=20, what="the stuck reason gone after the forced cut")
