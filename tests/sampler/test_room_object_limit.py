"""A candidate over the object limit is skipped (counted, logged) by the room, not waited for.

A lower ``--capacity`` lists nothing afresh (the catalog a higher limit listed covers it), so the
catalog keeps objects over the new limit. Before: the room skipped only what the volume could never
hold; an object over the limit that fit the volume but never fit beside the live epochs was tried
first for ever, and no key after it was fetched (a reviewer's run: "0 sample(s) fetched this run")."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from inprocess import settings_for

from epochfs.sidecar.listing import Lister, source_for
from epochfs.sidecar.remote.testing import PagedMemoryRemote
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.sampler.diskspace import DiskSpace
from epochfs.sidecar.sampler.room import Room
from epochfs.sidecar.store import Candidate, Store


def test_a_candidate_over_the_object_limit_is_skipped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = settings_for(tmp_path / "c", "--capacity", "800Ki")
    with Store(settings.cache, create=True) as store:
        room = Room(store=store, reservations=Reservations(store), settings=settings,
                    disk=DiskSpace(settings.cache, settings.capacity), write=lambda fn: fn())
        with caplog.at_level(logging.WARNING, logger="epochfs.sampler"):
            assert room.skip_unfittable(Candidate("big.bin", "0" * 32, settings.object_limit + 1, "v"))
            assert not room.skip_unfittable(Candidate("fits.bin", "1" * 32, settings.object_limit, "v"))
        assert store.stats().skipped_total == 1
        assert "over the object limit" in caplog.text


def test_repairs_in_place_count_against_the_free_space_together(tmp_path: Path) -> None:
    """Each repair in place reserves no room but takes its temp file's room on the volume: checked
    one at a time against the free space measured once a second, 32 of 14 MB all started on 18 MiB
    free (the reviewer's look). Now the repairs in flight count against it."""
    from store_helpers import put

    settings = settings_for(tmp_path / "c", "--capacity", "800Ki")
    with Store(settings.cache, create=True) as store:
        store.configure(settings.policy())
        keys = {f"k{i}": b"x" * 100 for i in range(3)}
        assert Lister(store, source_for(PagedMemoryRemote(keys, page=10)), seed=0).run().complete
        for i in range(3):
            put(store, f"k{i}", 100)
        damaged = store.stored_objects(after_id=0, limit=10)
        store.take_out([(obj, "test") for obj in damaged], quarantine=False)
        disk = DiskSpace(settings.cache, settings.capacity)
        room = Room(store=store, reservations=Reservations(store), settings=settings, disk=disk,
                    write=lambda fn: fn())
        size = (disk.free() - disk.margin // 2) // 2  # room for two such temps beside the margin
        started = [room.reserve_repair(Candidate(f"k{i}", "0" * 32, size, "v")) for i in range(3)]
        assert started == [True, True, False]
        room.release(Candidate("k0", "0" * 32, size, "v"))  # one landed or failed: its room is back
        assert room.reserve_repair(Candidate("k2", "0" * 32, size, "v"))
