"""``--cut-interval``'s first tick after a sampler restart cuts only where a sample arrived after
the newest epoch: the schedule counted arrivals from -1 in each new process, so every restart (a
crash loop's every crash) cut a copy of the newest epoch ("new": 0), spent an epoch number and
pushed an older unpinned epoch out. docs/sampler.md: a timer cut is skipped when no sample
arrived since the last one. A real store; the schedule as the loop makes it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fuse_helpers import open_store
from store_helpers import put

from epochfs.sidecar.sampler.cutter import CutSchedule


def _direct(write: Callable[[], Any]) -> Any:
    return write()


def test_a_restart_with_nothing_new_cuts_no_copy_of_the_newest_epoch(tmp_path: Path) -> None:
    with open_store(tmp_path / "cache") as store:
        for i in range(4):
            put(store, f"train/{i}.bin", 100)
        assert store.cut() == 0
        cuts = CutSchedule(store, 1.0, _direct)  # the restarted sampler's
        cuts.tick(cuts.last + 2.0, samples=0, backpressure=False)
        assert store.newest_epoch() == 0, "nothing arrived since epoch 0: no copy of it"
        put(store, "train/4.bin", 100)
        cuts.tick(cuts.last + 2.0, samples=1, backpressure=False)
        assert store.newest_epoch() == 1, "a sample arrived: the timer cuts"


def test_a_restart_after_samples_the_last_run_did_not_cut_cuts_them(tmp_path: Path) -> None:
    with open_store(tmp_path / "cache") as store:
        for i in range(4):
            put(store, f"train/{i}.bin", 100)
        assert store.cut() == 0
        put(store, "train/4.bin", 100)  # admitted by the run before the restart, after its last cut
        cuts = CutSchedule(store, 1.0, _direct)
        cuts.tick(cuts.last + 2.0, samples=0, backpressure=False)
        assert store.newest_epoch() == 1
        assert store.epochs()[-1].samples == 5


def test_no_epoch_yet_is_cut_at_the_first_tick(tmp_path: Path) -> None:
    with open_store(tmp_path / "cache") as store:
        put(store, "train/0.bin", 100)
        cuts = CutSchedule(store, 1.0, _direct)
        cuts.tick(cuts.last + 2.0, samples=0, backpressure=False)
        assert store.newest_epoch() == 0
