"""Epochs keep turning over: no sample left out for ever, no epoch a repeat of the one before.

The real sampler loop in-process over an in-memory remote, epochs cut one after another as a
trainer's lookups would cut them (``--in-use-seconds 0``: only ``--keep-epochs`` pins them), each
cut made once the sampler has settled (a loop pass begun after the cut found no room, nothing in
flight). The reviewer's runs against a real sidecar on moto showed both defects:

* a dataset that fits ``--capacity`` but not the epoch budget (160 KiB in 200 KiB, budget
  150 KiB): all 40 samples cached, every epoch the same newest 37, the 3 oldest never shown;
* a dataset larger than the cache, the defaults ``--keep-epochs 2 --headroom 0.25``: the sampler
  filled the whole headroom after a cut, the newest two epochs then pinned the whole cache, and
  every other epoch was an exact repeat of the one before (new 4, 0, 4, 0, ...).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from inprocess import objects_of, sampling, settings_for

from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.sampler import Sampler
from epochfs.sidecar.store import Store

SETTLE_LIMIT = 120.0
"""Seconds a settle may take before the test fails (well under 1 s measured)."""


def _observe_passes(sampler: Sampler) -> Callable[[], int]:
    """Count the loop's passes (each ends in ``_tick``, after it tried to start downloads)."""
    count = [0]
    lock = threading.Lock()
    tick = sampler._tick

    def counted(*args: object, **kwargs: object) -> None:
        tick(*args, **kwargs)  # type: ignore[arg-type]
        with lock:
            count[0] += 1

    sampler._tick = counted  # type: ignore[method-assign]

    def passes() -> int:
        with lock:
            return count[0]
    return passes


def _settle(store: Store, sampler: Sampler, passes: Callable[[], int], total: int) -> None:
    """Wait until a pass begun after this call found no room, or nothing left to fetch (all
    ``total`` objects cached), with nothing in flight: the cache holds what the sampler can fetch
    before the next cut. A retired epoch's samples are evicted only once its grace is over
    (``--retire-grace``): until then a pass finds no room that the grace will give, so the
    passes counted begin after it."""
    deadline = time.monotonic() + SETTLE_LIMIT
    start = passes()
    while passes() < start + 2 or _in_grace(store):  # the ticks retired what the cut made due
        assert time.monotonic() < deadline, "a retired epoch's grace did not end"
        time.sleep(0.05)  # a poll of the loop's passes and the wall clock the grace is measured on
    start = passes()
    while not (passes() >= start + 2 and not sampler._inflight and not sampler.admitter.busy()
               and (sampler.room.backpressure is not None or store.stats().samples == total)):
        assert time.monotonic() < deadline, "the sampler did not settle"
        time.sleep(0.01)  # a poll of the condition above, not a synchronization


def _in_grace(store: Store) -> bool:
    """Whether an epoch retired less than the policy's grace ago (its ``retired`` stamp)."""
    grace = store.policy().retire_grace
    with sqlite3.connect(f"file:{store.root / 'index.sqlite'}?mode=ro", uri=True) as db:
        row = db.execute("SELECT COUNT(*) FROM epochs WHERE retired > ?", (time.time() - grace,))
        return bool(row.fetchone()[0])


def _cut_loop(store: Store, sampler: Sampler, count: int, total: int) -> list[tuple[int, int, int]]:
    """Cut ``count`` epochs, each once the sampler settled: ``(n, samples, new)`` of each."""
    passes = _observe_passes(sampler)
    out = []
    for _ in range(count):
        _settle(store, sampler, passes, total)
        n = store.cut()
        assert n is not None
        info = {e.epoch: e for e in store.epochs()}[n]
        out.append((n, info.samples, info.new))
    return out


@pytest.mark.long
def test_a_dataset_that_fits_the_capacity_is_shown_whole(tmp_path: Path) -> None:
    objects = objects_of(40, 4096)  # 160 KiB: fits 200 KiB, not the epoch budget of 150 KiB
    settings = settings_for(tmp_path / "cache", "--capacity", "200Ki", "--in-use-seconds", "0")
    with sampling(tmp_path / "cache", MemoryRemote(objects), settings) as (store, sampler):
        cuts = _cut_loop(store, sampler, 4, len(objects))
        assert store.stats().samples == 40
        assert [samples for _, samples, _ in cuts] == [40, 40, 40, 40], cuts
        shown = {e.path for e in store.epoch_files(cuts[-1][0])}
        assert shown == set(objects)


@pytest.mark.long
def test_every_epoch_brings_new_samples_once_the_cache_turns_over(tmp_path: Path) -> None:
    objects = objects_of(200, 4096)  # 800 KiB through a 64 KiB cache: 16 samples, epochs of 12
    # Each turn waits for the retired epoch's grace: the shortest one allowed.
    settings = settings_for(tmp_path / "cache", "--capacity", "64Ki", "--in-use-seconds", "0",
                            "--retire-grace", "1")
    with sampling(tmp_path / "cache", MemoryRemote(objects), settings) as (store, sampler):
        assert store.policy().retire_grace == 1.0, "the sampler records its --retire-grace"
        cuts = _cut_loop(store, sampler, 9, len(objects))
        stats = store.stats()
        assert stats.cache_bytes <= 64 * 1024
    news = [new for _, _, new in cuts]
    assert all(samples == 12 for _, samples, _ in cuts), cuts
    # From epoch 1 on, every cut brings samples the one before did not hold.
    assert all(new > 0 for new in news[1:]), news
