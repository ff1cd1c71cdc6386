"""Schedule mode: ``--cut-interval``'s timer cuts while the next window holds samples the newest
epoch does not, even when no sample arrived since the last cut.

Before: the timer cut only when the run's count of admitted samples had changed since its last cut
(snapshot mode's rule: its epoch is the newest samples). A schedule window grows over samples
fetched ahead of it, so once every sample had arrived the timer stopped (epochs 0-6 of 50 samples
under ``initial=4,growth=1.5``), while ``epochfs cut`` cut epoch 7 at once with 4 new samples. A
real store with a complete catalog; the timer as the sampler's loop makes it, ticked as its loop
does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from store_helpers import put, sampling_order

from epochfs.sidecar.catalog import build_catalog
from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.sampler.cutter import CutSchedule
from epochfs.sidecar.store import Policy, Schedule, Store

SIZE = 10
KEYS = [f"train/{i:02d}.bin" for i in range(50)]


def _direct(write: Callable[[], Any]) -> Any:
    return write()


def _store(tmp_path: Path, schedule: Schedule | None, capacity: int = 1 << 20,
           headroom: float = 0.25) -> Store:
    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=capacity, headroom=headroom, keep_epochs=20, min_samples=1,
                           schedule=schedule))
    build_catalog(store, MemoryRemote({k: b"x" * SIZE for k in KEYS}), seed=0, shard_index=0,
                  shard_count=1, object_limit=1 << 20)
    return store


def _ticks(cuts: CutSchedule, count: int, samples: int) -> None:
    for _ in range(count):
        cuts.tick(cuts.last + 2.0, samples=samples, backpressure=False)


def test_the_timer_cuts_each_growing_window_over_samples_already_fetched(tmp_path: Path) -> None:
    with _store(tmp_path, Schedule(initial=4, growth=1.5)) as store:
        for key in sampling_order(0, KEYS):  # everything fetched before the first tick
            put(store, key, SIZE)
        cuts = CutSchedule(store, 1.0, _direct)
        _ticks(cuts, 20, samples=len(KEYS))
        sizes = [e.samples for e in store.epochs()]
        assert sizes[-1] == len(KEYS), f"the timer stopped before the window held everything: {sizes}"
        assert sizes.count(len(KEYS)) == 1, f"a copy of the whole-catalog epoch was cut: {sizes}"
        assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes), sizes


def test_samples_outside_the_next_window_cut_no_copy(tmp_path: Path) -> None:
    """Samples fetched outside the next window make no copy of the newest epoch; one in it does."""
    order = sampling_order(0, KEYS)
    with _store(tmp_path, Schedule(initial=4, growth=1.0)) as store:  # every window: the first 4
        for key in [*order[:3], *order[10:20]]:
            put(store, key, SIZE)
        cuts = CutSchedule(store, 1.0, _direct)
        _ticks(cuts, 3, samples=13)
        assert store.newest_epoch() is None, "the first window still misses a key"
        put(store, order[3], SIZE)
        _ticks(cuts, 3, samples=14)
        assert [e.samples for e in store.epochs()] == [4], "epoch 0 once, then no copy of it"
        put(store, order[20], SIZE)  # fetched ahead, outside every window
        _ticks(cuts, 3, samples=15)
        assert [e.samples for e in store.epochs()] == [4], "a sample outside the window: no copy"


@pytest.mark.parametrize("oldest_first", [True, False])
def test_a_schedule_restarted_over_a_snapshot_epoch_cuts_only_a_window_it_adds_to(
        tmp_path: Path, oldest_first: bool) -> None:
    """The newest epoch a range of the admission order: the window is compared with it by id."""
    order = sampling_order(0, KEYS)
    fetched = order[:40] if oldest_first else order[39::-1]
    with _store(tmp_path, None, capacity=60 * SIZE, headroom=0.5) as store:  # budget: 30 samples
        for key in fetched:
            put(store, key, SIZE)
        assert store.cut() == 0  # the 30 admitted last: without window 0 only when fetched in order
        store.configure(replace(store.policy(), schedule=Schedule(initial=4, growth=1.0)))
        cuts = CutSchedule(store, 1.0, _direct)
        _ticks(cuts, 3, samples=0)
        assert [e.samples for e in store.epochs()] == ([30, 4] if oldest_first else [30]), \
            "a cut exactly when window 0 holds samples the snapshot epoch does not"


def test_snapshot_mode_keeps_its_rule(tmp_path: Path) -> None:
    with _store(tmp_path, None) as store:
        for key in KEYS[:10]:
            put(store, key, SIZE)
        cuts = CutSchedule(store, 1.0, _direct)
        _ticks(cuts, 3, samples=10)
        assert store.newest_epoch() == 0, "no sample arrived since epoch 0: no copy of it"
        put(store, KEYS[10], SIZE)
        _ticks(cuts, 1, samples=11)
        assert store.newest_epoch() == 1
