"""The disk-bounded budget: reservations never exceed what the volume holds, an object no empty
cache on the volume could hold is skipped instead of stopping sampling, and an admitter's disk-full
never touches a later download of the same key.

The volumes are real small tmpfs mounts (real ENOSPC, real statvfs); store, reservations and
sampler are the real ones.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest
from common import wait_until
from inprocess import sampling, settings_for, small_volume
from store_helpers import sampling_order

from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.sampler import Sampler, diskspace
from epochfs.sidecar.sampler.diskspace import DiskSpace
from epochfs.sidecar.store import Admission, Candidate, Policy, Store

MiB = 1 << 20
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")


@root_only
def test_reservations_never_exceed_what_the_disk_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each reservation re-measures the free space (as once a second does with slow downloads):
    bytes reserved but not written yet must not raise the room they are judged against."""
    monkeypatch.setattr(diskspace, "CHECK_EVERY", 0.0)
    with small_volume(tmp_path / "vol", "32m") as vol:
        store = Store(vol / "cache", create=True)
        try:
            store.configure(Policy(capacity=1 << 30, keep_epochs=2, headroom=0.25))
            disk = DiskSpace(vol / "cache", 1 << 30)
            res = Reservations(store)
            st = os.statvfs(vol)
            holds = st.f_bavail * st.f_frsize - disk.margin
            for _ in range(20):
                if not res.reserve(4 * MiB, capacity=disk.effective_capacity, evict=False):
                    break
            assert 0 < res.reserved <= holds, (res.reserved, holds)
            assert res.capacity is not None and res.capacity <= holds
        finally:
            store.close()


@root_only
def test_bytes_a_download_has_written_do_not_shrink_the_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A temp file's bytes are reserved and on the disk: a check while it is written sees less
    free space, but the room (and the capacity recorded from it) stays what it was."""
    monkeypatch.setattr(diskspace, "CHECK_EVERY", 0.0)
    with small_volume(tmp_path / "vol", "32m") as vol:
        store = Store(vol / "cache", create=True)
        try:
            store.configure(Policy(capacity=1 << 30, keep_epochs=2, headroom=0.25))
            disk = DiskSpace(vol / "cache", 1 << 30)
            res = Reservations(store)
            assert res.reserve(8 * MiB, capacity=disk.effective_capacity, evict=False)
            before = res.capacity
            store.temp_path().write_bytes(b"x" * (8 * MiB))
            assert res.reserve(1 * MiB, capacity=disk.effective_capacity, evict=False)
            assert res.capacity == before
        finally:
            store.close()


@root_only
def test_an_object_bigger_than_the_volume_can_hold_is_skipped(tmp_path: Path) -> None:
    """--capacity larger than the volume lets an object under the object limit through the listing
    that no empty cache on this volume could hold: skipped and counted, the rest still sampled."""
    with small_volume(tmp_path / "vol", "32m") as vol:
        cache = vol / "cache"
        settings = settings_for(cache, "--capacity", "1Gi")
        keys = sampling_order(settings.seed, [f"train/{i:04d}.bin" for i in range(20)])
        objects = {k: b"s" * (256 * 1024) for k in keys}
        objects[keys[2]] = b"B" * (26 * MiB)  # third in the order; the volume gives at most 24 MiB
        assert settings.object_limit > 26 * MiB
        with sampling(cache, MemoryRemote(objects), settings) as (store, _):
            wait_until(lambda: store.stats().samples == 19, timeout=8, what="the other 19 samples")
            assert store.stats().skipped_total == 1
            assert store.stats().backpressure_reason is None


def test_an_admitters_disk_full_leaves_a_new_download_of_the_key_alone(tmp_path: Path) -> None:
    """The admitter gave back the reservation of its failed batch; when the same key was started
    again before the loop read that failure, the new download stays in flight and reserved."""
    settings = settings_for(tmp_path / "cache", "--capacity", "1Mi")
    store = Store(tmp_path / "cache", create=True)
    try:
        store.configure(settings.policy())
        s = Sampler(store=store, remote=MemoryRemote({}), settings=settings, stop=threading.Event())
        failed = Admission("k", "sid-k", 1000, "md5:00", "v1", tmp_path / "gone.part")
        assert s._admit_failed([failed], OSError(errno.ENOSPC, "No space left on device"))
        again = Candidate("k", "sid-k", 1000, "v1")
        assert s.reservations.reserve(1000)
        s._inflight["k"] = again
        s._collect(1.0)
        assert s._inflight.get("k") is again
        assert s.reservations.reserved == 1000
        assert not s.breaker.is_kept("k"), "a running download of it: not fetched a second time"
    finally:
        store.close()
