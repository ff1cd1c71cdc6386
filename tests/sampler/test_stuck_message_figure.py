"""The "schedule mode is stuck" ERROR says what its byte figure is.

It said the kept epochs "pin 64.0 KiB of --capacity 64.0 KiB" where they pinned 56 KiB: the figure
is the whole cache (``Reservations.cache_bytes``), which also holds the samples fetched for the
stuck window since the newest cut. A user raising --capacity by that figure's gap reasons from a
wrong number; the message now says the cache holds it, and of what.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from inprocess import objects_of, sampling, settings_for
from test_r48_schedule_stuck import _cut_while_possible

from epochfs.sidecar.config import format_size
from epochfs.sidecar.remote.testing import MemoryRemote

KiB = 1024


@pytest.mark.long
def test_the_stuck_error_names_the_cache_total_as_the_cache_not_as_what_the_epochs_pin(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The scenario of test_r48: 4 KiB keys, 64 KiB cache, epochs 4 and 5 kept, window 6 stuck.
    settings = settings_for(tmp_path / "cache", "--capacity", "64Ki", "--keep-epochs", "2",
                            "--schedule", "initial=8,growth=1.15", "--cut-interval", "0",
                            "--scrub-rate", "0")
    caplog.set_level(logging.ERROR, logger="epochfs.sampler")
    with sampling(tmp_path / "cache", MemoryRemote(objects_of(200, size=4 * KiB)), settings) as (store, _):
        newest = _cut_while_possible(store)
        kept = {f.object_name: f.size for e in store.epochs() for f in store.epoch_files(e.epoch)}
        pinned, cached = sum(kept.values()), store.stats().cache_bytes
        [error] = [r.getMessage() for r in caplog.records if "schedule mode is stuck" in r.getMessage()]
    assert pinned == 14 * 4 * KiB and cached > pinned, "the window's own samples are cached too"
    assert f"pin {format_size(cached)}" not in error, error
    assert (f"the cache holds {format_size(cached)} of --capacity {format_size(64 * KiB)}, the samples "
            f"they pin and those of epoch {newest + 1}'s window fetched so far") in error, error
    assert f"kept epoch(s) {newest - 1}-{newest} (--keep-epochs 2)" in error, error
