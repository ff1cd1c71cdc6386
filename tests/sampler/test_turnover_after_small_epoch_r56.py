"""An epoch cut while the cache is still filling must not make a later cut repeat the epoch before
it (docs/sampler.md, "Capacity, headroom and eviction"). With ``--keep-epochs 2`` and a dataset
larger than the cache: a small epoch (4 samples of a 16-sample cache whose epoch budget is 12),
then the free room. Taken whole (12 samples), the next cut's epoch was those 12, the two epochs
pinned all 16, nothing could be fetched, and the cut after repeated it exactly. Free room is taken
without limit only up to the epoch budget; above it, the turn's share (``capacity x headroom /
K``) as for room a download evicts for.

The real sampler loop in-process over an in-memory remote whose downloads wait for the test's
leave (so the first epoch is cut at 4 samples whatever the machine's speed); each later cut made
once the sampler has admitted the turn's share above the newest epoch, as a trainer slower than the
fetch would cut it. Without the limit the wait for that share fails: the two epochs kept pin the
whole cache, and nothing is fetched until a cut retires the older.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from pathlib import Path

import pytest
from common import wait_until
from inprocess import objects_of, sampling, settings_for

from epochfs.sidecar.remote.testing import MemoryReader, MemoryRemote
from epochfs.sidecar.store import Store

SAMPLE = 4096
FIRST = 4
"""Samples in the cache when the first epoch is cut (the epoch budget is 12)."""
SHARE = 2
"""The turn's share: 16 samples x headroom 0.25 / 2 epochs kept."""


class LeaveRemote(MemoryRemote):
    """:class:`MemoryRemote` whose opens wait until the test lets that many through (:meth:`allow`)."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        super().__init__(objects)
        self._left = 0.0
        self._changed = threading.Condition()

    def allow(self, count: float) -> None:
        with self._changed:
            self._left += count
            self._changed.notify_all()

    def open(self, key: str, *, checksum: bool = False) -> MemoryReader:
        with self._changed:
            self._changed.wait_for(lambda: self._left >= 1)
            self._left -= 1
        return super().open(key, checksum=checksum)


def _cut(store: Store) -> tuple[int, frozenset[str]]:
    """Cut an epoch: its number and its files (read now: the oldest are retired later)."""
    n = store.cut()
    assert n is not None
    return n, frozenset(e.path for e in store.epoch_files(n))


def _share_fetched(store: Store, epoch: int) -> bool:
    """Whether :data:`SHARE` samples or more were admitted after ``epoch``'s last one."""
    extent = store.epoch_extent(epoch)
    assert extent is not None
    return len(store.samples_after(extent.last, limit=SHARE)) >= SHARE


@pytest.mark.long
def test_no_epoch_repeats_the_one_before_after_a_small_epoch(tmp_path: Path) -> None:
    objects = objects_of(200, SAMPLE)  # 800 KiB through a 64 KiB cache: 16 samples, budget 12
    remote = LeaveRemote(objects)
    settings = settings_for(tmp_path / "cache", "--capacity", "64Ki", "--in-use-seconds", "0",
                            "--keep-epochs", "2", "--retire-grace", "1")
    try:
        with sampling(tmp_path / "cache", remote, settings) as (store, _sampler):
            remote.allow(FIRST)
            wait_until(lambda: store.stats().samples == FIRST, what=f"{FIRST} samples cached")
            cuts = [_cut(store)]
            remote.allow(math.inf)
            for _ in range(6):
                newest = cuts[-1][0]
                wait_until(functools.partial(_share_fetched, store, newest),
                           what=f"{SHARE} samples above epoch {newest}")
                cuts.append(_cut(store))
            cached = store.stats().samples
    finally:
        remote.allow(math.inf)  # no download left waiting at the sampler's stop
    sizes = [len(files) for _, files in cuts]
    news = [len(b - a) for (_, a), (_, b) in itertools.pairwise(cuts)]
    said = f"epoch sizes {sizes}, new vs the epoch before {news}, {cached} cached of {len(objects)}"
    assert sizes[0] == FIRST, said
    # Keys are left to fetch at every cut (200 through 16): no epoch is the one before again, and
    # each cut brings the turn's share or more.
    assert all(new >= SHARE for new in news), said
