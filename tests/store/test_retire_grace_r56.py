"""A retired epoch's samples outlive its retirement by the store's grace, not a moment longer.

The FUSE view lists, looks up and opens epochs from a snapshot it refreshes every half second, so
for that long after a retirement it still shows the epoch; the sampler retires and evicts in one
step. Eviction right after a retirement must leave the retired epoch's object files in place, and
take them once :data:`RETIRE_GRACE` has passed. Every clock here is passed as ``now``.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from pathlib import Path

from fuse_helpers import admit, make_objects, open_store

from epochfs.fuse.operations import EpochOperations
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.epochpins import RETIRE_GRACE

BATCH, SIZE = 20, 4096
"""Each epoch's own samples: the epoch budget (a quarter of the capacity) holds one batch."""


def _two_epochs(cache: Path) -> tuple[Store, dict[str, Path]]:
    """Epochs 0 and 1 over batches of their own (keep 1: epoch 0, never read, may retire), and
    the object files of epoch 0's samples."""
    store = open_store(cache, capacity=4 * BATCH * SIZE, keep_epochs=1, headroom=0.75)
    admit(store, make_objects(BATCH, SIZE, seed=1))
    assert store.cut(0) == 0
    admit(store, make_objects(BATCH, SIZE, seed=2, start=BATCH))
    assert store.cut(1) == 1
    files = {f.path: store.files.objects_dir / f.object_name for f in store.epoch_files(0)}
    assert len(files) == BATCH and all(p.exists() for p in files.values())
    return store, files


def test_grace_is_well_above_the_fuse_views_refresh_interval() -> None:
    """The grace covers the FUSE view's snapshot lag with room for a late refresh."""
    refresh = inspect.signature(EpochOperations.__init__).parameters["refresh_interval"].default
    assert 4 * refresh <= RETIRE_GRACE


def test_eviction_right_after_a_retirement_keeps_its_files_until_the_grace_is_over(tmp_path: Path) -> None:
    store, files = _two_epochs(tmp_path / "cache")
    try:
        now = time.time()
        assert store.retire(now=now) == [0]
        assert [e.epoch for e in store.epochs()] == [1]  # retired for every purpose but eviction
        assert store.evict(4 * BATCH * SIZE, now=now) == 0  # the sampler's same step
        assert store.evict(4 * BATCH * SIZE, now=now + RETIRE_GRACE - 0.5) == 0
        assert [p for p in files.values() if not p.exists()] == []
        assert store.stats().cache_bytes == 2 * BATCH * SIZE
        assert store.evict(4 * BATCH * SIZE, now=now + RETIRE_GRACE + 1) == BATCH * SIZE
        assert [p for p in files.values() if p.exists()] == []
        assert [e.epoch for e in store.epochs()] == [1]
    finally:
        store.close()


def test_evict_retires_and_waits_out_the_grace_as_the_sampler_does(tmp_path: Path) -> None:
    """The sampler's own step: evict retires first (no separate retire call), then evicts."""
    store, files = _two_epochs(tmp_path / "cache")
    try:
        now = time.time()
        assert store.evict(4 * BATCH * SIZE, now=now) == 0
        assert [e.epoch for e in store.epochs()] == [1]
        assert all(p.exists() for p in files.values())
        assert store.evict(4 * BATCH * SIZE, now=now + RETIRE_GRACE + 1) == BATCH * SIZE
        assert not any(p.exists() for p in files.values())
    finally:
        store.close()


def test_a_retirement_stamped_far_ahead_of_the_clock_holds_nothing(tmp_path: Path) -> None:
    """A clock stepped back after a retirement: its stamp lies beyond the grace from now, and the
    samples may go at once rather than stay pinned for as long as the clock is behind."""
    store, files = _two_epochs(tmp_path / "cache")
    try:
        now = time.time()
        assert store.retire(now=now + 3600) == [0]
        assert store.evict(4 * BATCH * SIZE, now=now) == BATCH * SIZE
        assert not any(p.exists() for p in files.values())
    finally:
        store.close()


def test_the_policys_grace_is_the_one_eviction_waits_out(tmp_path: Path) -> None:
    """``--retire-grace`` (the policy's ``retire_grace``, recorded in the index): a grace of 2 s
    frees the retired epoch's files 3 s after, where the default's still keeps them."""
    store, files = _two_epochs(tmp_path / "cache")
    try:
        store.configure(dataclasses.replace(store.policy(), retire_grace=2.0))
        with Store(tmp_path / "cache") as reader:  # another process's view of the recorded policy
            assert reader.policy().retire_grace == 2.0
        now = time.time()
        assert store.retire(now=now) == [0]
        assert store.evict(4 * BATCH * SIZE, now=now + 1) == 0
        assert all(p.exists() for p in files.values())
        assert store.evict(4 * BATCH * SIZE, now=now + 3) == BATCH * SIZE
        assert not any(p.exists() for p in files.values())
    finally:
        store.close()


def test_the_default_grace_keeps_them_at_the_same_moment(tmp_path: Path) -> None:
    store, files = _two_epochs(tmp_path / "cache")
    try:
        assert store.policy().retire_grace == RETIRE_GRACE
        now = time.time()
        assert store.retire(now=now) == [0]
        assert store.evict(4 * BATCH * SIZE, now=now + 3) == 0
        assert all(p.exists() for p in files.values())
    finally:
        store.close()
