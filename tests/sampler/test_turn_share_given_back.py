"""A download that fails gives back its part of the turn's share (docs/sampler.md, "Capacity,
headroom and eviction"), so that failures are never counted as bytes fetched above the newest epoch.

In snapshot mode a cache at its budget evicts for at most ``capacity x headroom / K`` bytes above
the newest epoch before the next cut. The downloads that reserved that share and then failed (a
remote outage) brought nothing, yet their share stayed spent: the next try was refused, and with
nothing of its own in flight the loop reported "cache full ... and nothing evictable" with room
free (``epochfs_backpressure`` 1 through an outage, which silences EpochfsSamplerStalled).

Real parts: the store (index and object files on the test's disk), the reservations, the disk's
free space and the room, as the fetch loop drives them (reserve, then ``full`` when refused).
"""

from __future__ import annotations

import errno
import hashlib
import os
import threading
from pathlib import Path

from inprocess import settings_for
from store_helpers import put, sid_of

from epochfs.sidecar.listing import Lister, source_for
from epochfs.sidecar.remote.testing import MemoryRemote, PagedMemoryRemote
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.sampler import Sampler
from epochfs.sidecar.sampler.diskspace import DiskSpace
from epochfs.sidecar.sampler.room import Room
from epochfs.sidecar.store import Admission, Candidate, Store

SAMPLE = 4096
CACHED = 16
"""Samples in a 64 KiB cache: full. Its epoch budget is 12 samples, the turn's share 2."""


def _candidate(i: int) -> Candidate:
    return Candidate(f"new{i}", sid_of(f"new{i}"), SAMPLE, "v1")


def _full_cache_with_an_epoch(cache: Path) -> tuple[Store, Room]:
    """A 64 KiB cache (``--keep-epochs 2``, headroom 0.25) holding 16 samples, the newest 12 cut as
    an epoch, with keys left to fetch; and its room, as the loop makes it."""
    settings = settings_for(cache, "--capacity", "64Ki", "--keep-epochs", "2")
    store = Store(cache, create=True)
    store.configure(settings.policy())
    old = [f"old{i}" for i in range(CACHED)]
    listed = {key: b"x" * SAMPLE for key in [*old, *(_candidate(i).key for i in range(4))]}
    assert Lister(store, source_for(PagedMemoryRemote(listed, page=100)), seed=0).run().complete
    for key in old:
        put(store, key, SAMPLE)
    assert store.cut(force=True) is not None  # the newest 12 samples: 4 evictable
    room = Room(store=store, reservations=Reservations(store), settings=settings,
                disk=DiskSpace(cache, settings.capacity), write=lambda fn: fn())
    return store, room


def _admit(room: Room, cand: Candidate) -> None:
    """``cand``'s download lands and is admitted through the room's reservations (the admitter's
    way)."""
    assert not room.unreserved(cand)
    body = b"n" * cand.size
    temp = room.store.temp_path()
    with open(temp, "wb") as f:
        f.write(body)
        os.fsync(f.fileno())
    room.reservations.admit([Admission(cand.key, cand.sid, cand.size,
                                       "md5:" + hashlib.md5(body).hexdigest(), cand.version, temp)])


def _try(room: Room, cand: Candidate, *, own_in_flight: bool) -> bool:
    """One step of the fetch loop: reserve, or report why not (as ``_start_downloads`` does)."""
    if room.reserve(cand, lookahead=False):
        room.set_backpressure(None)
        return True
    room.full(waiting_on_own=own_in_flight)
    return False


def test_failed_downloads_give_back_the_turns_share(tmp_path: Path) -> None:
    store, room = _full_cache_with_an_epoch(tmp_path / "cache")
    with store:
        turn = [_candidate(i) for i in range(2)]
        assert all(_try(room, c, own_in_flight=True) for c in turn), "the turn's share: 2 samples"
        assert not _try(room, _candidate(2), own_in_flight=True), "past the share (fetched or in flight)"
        for cand in turn:  # both downloads failed: nothing admitted
            room.release(cand)
        assert _try(room, _candidate(2), own_in_flight=False), (
            f"refused after the turn's downloads failed: {room.backpressure}")
        assert room.backpressure is None
        assert store.stats().backpressure_reason is None


def test_an_admitted_download_keeps_its_share_spent(tmp_path: Path) -> None:
    """What was admitted above the newest epoch still counts: the share is given back only by a
    download that brought nothing."""
    store, room = _full_cache_with_an_epoch(tmp_path / "cache")
    with store:
        turn = [_candidate(i) for i in range(2)]
        assert all(_try(room, c, own_in_flight=True) for c in turn)
        room.release(turn[1])  # failed; turn[0] lands and is admitted
        _admit(room, turn[0])
        assert _try(room, _candidate(2), own_in_flight=True), "one of the two downloads failed"
        assert not _try(room, _candidate(3), own_in_flight=False), "the share is spent by what came"
        assert room.backpressure is not None



def test_a_batch_the_full_disk_refused_gives_back_its_share(tmp_path: Path) -> None:
    """The admitter could not commit a batch (the volume filled): the keys are kept for when
    there is room, and their part of the turn is free again, not spent until the next cut."""
    cache = tmp_path / "cache"
    store, _ = _full_cache_with_an_epoch(cache)
    settings = settings_for(cache, "--capacity", "64Ki", "--keep-epochs", "2")
    with store:
        s = Sampler(store=store, remote=MemoryRemote({}), settings=settings, stop=threading.Event())
        turn = [_candidate(i) for i in range(2)]
        assert all(s.room.reserve(c, lookahead=False) for c in turn), "the turn's share: 2 samples"
        assert not s.room.reserve(_candidate(2), lookahead=False)
        batch = [Admission(c.key, c.sid, c.size, "md5:00", c.version, tmp_path / f"{c.key}.part")
                 for c in turn]
        for a in batch:  # the admitter's way: temp files gone, reservations released
            s.reservations.release(a.size)
        assert s._admit_failed(batch, OSError(errno.ENOSPC, "No space left on device"))
        s._collect(1.0)
        assert all(s.breaker.is_kept(c.key) for c in turn), "fetched again once there is room"
        assert s.room.reserve(_candidate(2), lookahead=False), "the refused batch kept the turn spent"
