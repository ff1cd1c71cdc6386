"""A full node volume pauses sampling; it never crashes the sampler, loses keys or breaks readers.

The cache lives on a small tmpfs of its own (a real filesystem that answers ENOSPC), the remote is
in memory, and the sampler's loop runs in-process.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest
from common import wait_until
from inprocess import fill, objects_of, sampling, settings_for, small_volume
from store_helpers import sample_checksums

from epochfs.sidecar.remote.testing import MemoryReader, MemoryRemote
from epochfs.sidecar.store import Store

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")


class GatedRemote(MemoryRemote):
    """Opens wait for ``gate``: downloads can be held in flight while the disk is filled."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        super().__init__(objects)
        self.gate = threading.Event()
        self.waiting = 0

    def open(self, key: str, *, checksum: bool = False) -> MemoryReader:
        self.waiting += 1
        assert self.gate.wait(30), "gate never opened"
        return super().open(key, checksum=checksum)


def test_a_full_disk_pauses_sampling_keeps_every_key_and_resumes(tmp_path: Path) -> None:
    objects = objects_of(40, 128 * 1024)
    remote = GatedRemote(objects)
    with small_volume(tmp_path / "vol", "32m") as vol:
        cache = vol / "cache"
        settings = settings_for(cache, "--capacity", "6Mi", "--concurrency", "4")
        with sampling(cache, remote, settings) as (store, sampler):
            wait_until(lambda: remote.waiting >= 4, what="downloads in flight")
            filler = fill(vol, leave=16 * 1024)
            remote.gate.set()
            wait_until(lambda: store.stats().backpressure_reason == "disk full", timeout=20,
                       what="disk full in the status")
            assert store.stats().skipped_total == 0, "keys are kept, not skipped"
            assert sampler.disk.limited
            filler.unlink()
            wait_until(lambda: store.stats().samples == 40, timeout=30, what="every object, space back")
            assert store.stats().backpressure_reason is None
            got = {key: path.read_bytes() for key, _, path in sample_checksums(store)}
        assert got == objects
        assert not list((cache / "tmp").iterdir())


def test_a_budget_larger_than_the_filesystem_is_clamped_to_it(tmp_path: Path) -> None:
    """--capacity 1Gi on a 32 MiB volume: sampling stops at what the volume holds ("disk full": the
    disk, not the budget, bounds it), and a cut lets it turn over instead of crash-looping."""
    objects = objects_of(160, 256 * 1024)
    remote = MemoryRemote(objects)
    with small_volume(tmp_path / "vol", "32m") as vol:
        cache = vol / "cache"
        settings = settings_for(cache, "--capacity", "1Gi", "--keep-epochs", "1")
        with sampling(cache, remote, settings) as (store, _):
            wait_until(lambda: store.stats().backpressure_reason == "disk full", timeout=30,
                       what="the clamped budget reached")
            assert store.stats().cache_bytes < 32 * 1024 * 1024 and store.stats().skipped_total == 0
            assert store.stats().capacity_bytes < 32 * 1024 * 1024, "status shows the budget the disk allows"
            fetched = store.stats().fetched_total
            assert store.cut() is not None
            wait_until(lambda: store.stats().evicted_total > 0 and store.stats().fetched_total > fetched,
                       timeout=30, what="turnover after the cut")
            assert store.stats().skipped_total == 0


def test_readers_of_a_live_epoch_never_see_an_error_on_a_full_disk(tmp_path: Path) -> None:
    """Lookups of the next epoch and read records need index writes: on a full disk they answer
    "not yet" and stay silent; the files of the live epoch read as before."""
    objects = objects_of(6, 64 * 1024)
    with small_volume(tmp_path / "vol", "32m") as vol:
        cache = vol / "cache"
        with sampling(cache, MemoryRemote(objects), settings_for(cache)) as (store, _):
            wait_until(lambda: store.stats().samples == 6, what="samples")
        store = Store(cache)
        assert store.cut(0) == 0
        with sqlite3.connect(cache / "index.sqlite") as db:  # an empty log: the next write must grow it
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        fill(vol, leave=0)
        for _ in range(3):
            store.record_read(0)  # best effort: no error
            assert store.request_cut(1) is False, "not yet: asked again later"
        for entry in store.epoch_files(0):
            assert (store.objects_dir / entry.object_name).read_bytes() == objects[entry.path]
        store.close()


def test_a_full_disk_while_repairs_are_looked_for_pauses_instead_of_ending_the_sampler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Looking for repairs writes (samples that cannot be fetched again are marked lost): the 600 s
    soak met SQLITE_FULL there, just after an index rebuild on a full volume, and the sampler
    exited 1. The store is made to answer as SQLite does on a full disk for its first three looks."""
    looks: list[int] = []
    real = Store.repairs_due

    def full_at_first(self: Store, *, limit: int = 256) -> list:
        looks.append(1)
        if len(looks) <= 3:
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, limit=limit)

    monkeypatch.setattr(Store, "repairs_due", full_at_first)
    monkeypatch.setattr("epochfs.sidecar.sampler.loop.REPAIRS_EVERY", 0.05)
    objects = objects_of(20, 16 * 1024)
    cache = tmp_path / "cache"
    with sampling(cache, MemoryRemote(objects), settings_for(cache, "--capacity", "6Mi")) as (store, _):
        wait_until(lambda: len(looks) > 3 and store.stats().samples == 20, timeout=30,
                   what="the sampler fetching on after three full-disk answers")


@pytest.mark.long
def test_a_full_disk_while_evicting_for_room_pauses_instead_of_ending_the_sampler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Evicting for the next download is an index write: the 600 s soak met SQLITE_FULL there
    (a cut made samples evictable while the volume was full) and the sampler exited 1 with "the
    cache index failed". The store answers its first three evictions as SQLite does on a full
    disk; the sampler goes on and, once they succeed, keeps the cache within its budget."""
    evictions: list[int] = []
    real = Store.evict

    def full_at_first(self: Store, need: int) -> int:
        evictions.append(need)
        if len(evictions) <= 3:
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, need)

    monkeypatch.setattr(Store, "evict", full_at_first)
    objects = objects_of(40, 64 * 1024)  # 2.5 MiB through a 1 MiB budget: evictions needed
    cache = tmp_path / "cache"
    # Epochs cut and retired as it goes: what a retired epoch held may be evicted.
    settings = settings_for(cache, "--cut-interval", "0.2", "--keep-epochs", "1", "--retire-grace", "1")
    with sampling(cache, MemoryRemote(objects), settings) as (store, sampler):
        wait_until(lambda: len(evictions) > 3 and sampler.rates.samples >= 30, timeout=30,
                   what="the sampler fetching on after three full-disk answers to its evictions")
        assert store.stats().cache_bytes <= 1 << 20
