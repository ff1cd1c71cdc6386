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
