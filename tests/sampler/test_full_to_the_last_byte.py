"""A volume filled to its last byte by another tenant is seen and said, and not said 200 times a
minute.

Before: the sampler set its in-memory backpressure before the index write; on a volume with no
byte free that write failed (swallowed: a full disk pauses sampling), and later calls returned
early because the reason had not changed, so "disk full" never reached the index (status,
``epochfs_disk_full``), not even once a little room came back; the clamped budget likewise. And
each refused write and each second's measurement logged a line.

A real small tmpfs, the sampler's loop in-process over an in-memory remote whose GETs wait for a
gate (so the volume is filled while downloads are in flight, as another tenant's ``dd`` does).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from common import wait_until
from inprocess import fill, objects_of, sampling, settings_for, small_volume
from prometheus_client import REGISTRY

from epochfs.fuse.view import View
from epochfs.sidecar import samplerlock, status
from epochfs.sidecar.remote.testing import MemoryReader, MemoryRemote
from epochfs.sidecar.sampler import Sampler
from epochfs.sidecar.store import Store

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")

CAPACITY = 6 * 1024 * 1024
WORDS = ("disk full: under 1 MiB free on the cache's volume, too little for the index to record "
         "the pause")
"""What status and status.json say of a volume full to its last byte while a sampler runs."""
VOLUME_LINES = ("the cache's filesystem", "--capacity")
"""How the sampler's lines about its volume begin (full, short of room, clamped, room again)."""


class GatedRemote(MemoryRemote):
    """Opens after the first ``free`` wait for ``gate`` (then go on): some samples are cached,
    and downloads are in flight while the volume is filled."""

    def __init__(self, objects: dict[str, bytes], *, free: int) -> None:
        super().__init__(objects)
        self.gate = threading.Event()
        self.free = free
        self.opened = 0
        self._lock = threading.Lock()

    def open(self, key: str, *, checksum: bool = False) -> MemoryReader:
        with self._lock:
            self.opened += 1
            held = self.opened > self.free
        if held:
            assert self.gate.wait(30), "gate never opened"
        return super().open(key, checksum=checksum)


@contextmanager
def held_if(locked: bool, cache: Path) -> Iterator[None]:
    fd = samplerlock.hold(cache) if locked else None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


@contextmanager
def full_to_the_last_byte(tmp_path: Path, *extra: str, locked: bool = False
                          ) -> Iterator[tuple[Path, Path, Store, Sampler, Callable[[], int]]]:
    """A sampler paused as "disk full" on a volume with no byte free: (volume, filler, store,
    sampler, the count of writes the volume refused so far); ``extra``: more sampler flags;
    ``locked``: the sampler's lock held, as ``epochfs sample`` holds it (status then sees a
    sampler run)."""
    remote = GatedRemote(objects_of(40, 128 * 1024), free=8)
    with small_volume(tmp_path / "vol", "32m") as vol:
        cache = vol / "cache"
        settings = settings_for(cache, "--capacity", "6Mi", "--concurrency", "4", *extra)
        with sampling(cache, remote, settings) as (store, sampler), held_if(locked, cache):
            refused: list[BaseException] = []
            filled = sampler.disk.filled

            def counted(error: BaseException) -> None:  # the real call, counted
                refused.append(error)
                filled(error)

            sampler.disk.filled = counted
            wait_until(lambda: store.stats().samples == 8 and remote.opened >= 12,
                       what="eight samples cached, downloads in flight")
            with sqlite3.connect(cache / "index.sqlite") as db:  # an empty log: a write must grow it
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            filler = fill(vol, leave=0)
            remote.gate.set()
            wait_until(lambda: sampler.room.backpressure == "disk full", timeout=20,
                       what="the sampler paused as disk full")
            yield vol, filler, store, sampler, lambda: len(refused)
            filler.unlink()
            wait_until(lambda: store.stats().samples == 40, timeout=60, what="every object, room back")


def test_the_pause_shows_in_the_gauges_at_once_and_in_the_index_once_it_can_be_written(
        tmp_path: Path) -> None:
    with full_to_the_last_byte(tmp_path) as (_, filler, store, sampler, refused):
        # The sampler's own gauges need no disk (under the supervisor: its preallocated mmap file;
        # here, in-process, the default registry).
        assert REGISTRY.get_sample_value("epochfs_disk_full") == 1
        assert REGISTRY.get_sample_value("epochfs_backpressure") == 1
        wait_until(lambda: refused() >= 3, what="writes refused by the full volume")
        # Some room, not enough to end the pause (the margin kept free is 8 MiB): the index can be
        # written again, and says what the sampler has known all along.
        os.truncate(filler, filler.stat().st_size - 2 * 1024 * 1024)
        wait_until(lambda: store.stats().backpressure_reason == "disk full", timeout=20,
                   what="disk full in the index once it can be written")
        wait_until(lambda: store.stats().capacity_bytes < CAPACITY, timeout=20,
                   what="the clamped budget in the index")
        assert sampler.disk.limited and store.stats().backpressure
    assert REGISTRY.get_sample_value("epochfs_disk_full") == 0


def test_a_lasting_full_volume_is_said_once_not_per_write(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """The reviewer's run: a cut tried every second met the full volume each time, and each
    meeting logged two lines; here every 0.1 s, so that twenty come quickly."""
    caplog.set_level(logging.INFO, logger="epochfs.sampler")
    with full_to_the_last_byte(tmp_path, "--cut-interval", "0.1") as (_, _filler, _store, _sampler, refused):
        wait_until(lambda: refused() >= 20, timeout=60, what="twenty writes refused by the full volume")
        said = [r.getMessage() for r in caplog.records if r.getMessage().startswith(VOLUME_LINES)]
        assert 1 <= len(said) <= 2, said  # the start (and a flap's "still" at most), not one per write
        assert any("said again at most once a minute" in line for line in said), said
    ended = [r.getMessage() for r in caplog.records if "has room for --capacity" in r.getMessage()]
    assert len(ended) == 1, ended


@pytest.mark.long
def test_a_budget_that_turns_over_on_a_short_volume_says_its_pauses_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """--capacity 1Gi on a 32 MiB volume, an epoch cut every 0.3 s: the sampler fills what the
    volume allows, pauses as "disk full" until the next cut lets it evict, and so on (the
    reviewer's run with a few MiB free: "backpressure cleared" every second). The pauses are said
    at the start and then at most once a minute, not per cut."""
    caplog.set_level(logging.INFO, logger="epochfs.sampler")
    remote = MemoryRemote(objects_of(400, 256 * 1024))
    with small_volume(tmp_path / "vol", "32m") as vol:
        cache = vol / "cache"
        settings = settings_for(cache, "--capacity", "1Gi", "--keep-epochs", "1", "--cut-interval", "0.3",
                                "--retire-grace", "1")  # each turn waits for the grace: the shortest
        with sampling(cache, remote, settings) as (_, sampler):
            paused: list[str | None] = []
            set_backpressure = sampler.room.set_backpressure

            def seen(reason: str | None) -> None:  # the real call, its pauses counted
                if reason is not None and sampler.room.backpressure is None:
                    paused.append(reason)
                set_backpressure(reason)

            sampler.room.set_backpressure = seen
            wait_until(lambda: len(paused) >= 8, timeout=60, what="eight pauses as the budget turns over")
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("backpressure") and " sample(s) fetched" not in r.getMessage()]
    assert 1 <= len(lines) <= 3, lines


def test_status_and_status_json_say_disk_full_where_the_index_cannot(tmp_path: Path) -> None:
    """Review KK: with no byte free the sampler cannot write its pause into the index, which
    ``epochfs status --cache`` and the views' ``status.json`` read: they said what the index held
    before (here: no pause at all). They measure the volume now."""
    with full_to_the_last_byte(tmp_path, locked=True) as (vol, filler, store, _sampler, refused):
        wait_until(lambda: refused() >= 1, what="a write refused by the full volume")
        assert not (store.stats().backpressure_reason or "").startswith("disk full")  # the index's words
        cache = vol / "cache"
        doc = status.read_stats(cache=cache, mount=None)
        assert doc["backpressure"] is True
        assert doc["backpressure_reason"] == WORDS
        shown = json.loads(View(store=store, link_root=cache / "objects").render_status())
        assert shown["backpressure"] is True and shown["backpressure_reason"] == WORDS
        # Room back (more than the index needs): the index's own words again.
        os.truncate(filler, filler.stat().st_size - 4 * 1024 * 1024)
        wait_until(lambda: store.stats().backpressure_reason == "disk full", timeout=20,
                   what="disk full in the index once it can be written")
        assert status.read_stats(cache=cache, mount=None)["backpressure_reason"] == "disk full"


def test_no_sampler_no_pause_on_a_full_volume(tmp_path: Path) -> None:
    """The views say what ``status --cache`` says: with no sampler holding the cache's lock (a
    mount or publisher alone, a sampler down), a full volume pauses nothing (review FIN65)."""
    with full_to_the_last_byte(tmp_path) as (vol, _filler, store, _sampler, refused):
        wait_until(lambda: refused() >= 1, what="a write refused by the full volume")
        cache = vol / "cache"
        shown = json.loads(View(store=store, link_root=cache / "objects").render_status())
        assert not (shown["backpressure_reason"] or "").startswith("disk full")
        assert status.read_stats(cache=cache, mount=None)["backpressure"] is False
