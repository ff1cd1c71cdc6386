"""Sampling while listing (issue 14): the sampler fetches from the first listed pages, from every
class folder in proportion, in the same order as before once the listing is complete; a listing
survives restarts (no relist before fetching, an interrupted one resumes) and a relist merges
added and deleted keys. In-process over a paged in-memory remote: milliseconds per test."""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from common import wait_until
from inprocess import settings_for, start_recording

from epochfs.sidecar import keyorder
from epochfs.sidecar.catalog import build_catalog
from epochfs.sidecar.config import SamplerSettings
from epochfs.sidecar.listing import Lister, ListingThread, source_for
from epochfs.sidecar.remote.base import ListedPage
from epochfs.sidecar.remote.testing import PagedMemoryRemote
from epochfs.sidecar.sampler import Sampler
from epochfs.sidecar.sampler import order as order_module
from epochfs.sidecar.sampler.pace import skew_cap
from epochfs.sidecar.status import render
from epochfs.sidecar.store import Meta, Store
from epochfs.sidecar.store import catalog as catalog_module

FOLDERS = ("cat", "dog", "eel", "fox")


def class_objects(per: int = 60, size: int = 512) -> dict[str, bytes]:
    return {f"train/{c}/{i:04d}.bin": bytes([i % 251, j]) * (size // 2)
            for j, c in enumerate(FOLDERS) for i in range(per)}


def lister(store: Store, remote: PagedMemoryRemote, *, seed: int = 0, threads: int = 4,
           stop: threading.Event | None = None) -> Lister:
    return Lister(store, source_for(remote), seed=seed, threads=threads, stop=stop)


@contextmanager
def sampling_while_listing(cache: Path, remote: PagedMemoryRemote,
                           settings: SamplerSettings) -> Iterator[tuple[Store, ListingThread]]:
    """The sampler and the listing thread as ``epochfs sample`` wires them."""
    store = Store(cache, create=True)
    store.configure(settings.policy())
    stop = threading.Event()
    lst = Lister(store, source_for(remote), seed=settings.seed, threads=4, stop=stop)
    prepared = lst.prepare() if lst.needed() else None
    listing = ListingThread(lst, prepared=prepared)
    sampler = Sampler(store=store, remote=remote, settings=settings, stop=stop,
                      listing=listing.running.is_set)
    listing.start()
    thread, errors = start_recording(sampler.run)
    try:
        yield store, listing
    finally:
        stop.set()
        if remote.gate is not None:
            remote.gate.set()
        thread.join(timeout=30)
        listing.join(timeout=30)
        store.close()
    assert not errors, errors


def cached_keys(store: Store) -> list[str]:
    return [str(r[0]) for r in store._ix.query("SELECT key FROM samples ORDER BY id")]


def test_fetching_starts_before_the_listing_ends_and_draws_from_every_folder(tmp_path: Path) -> None:
    remote = PagedMemoryRemote(class_objects(), page=10)
    remote.gate = threading.Event()  # every page after a span's first waits: the listing never ends
    settings = settings_for(tmp_path / "c", "--capacity", "4Mi")
    with sampling_while_listing(tmp_path / "c", remote, settings) as (store, _):
        # Every span's end is unknown (the gallops wait at the gate): the listing's skew is 1, so
        # the walk takes what a fair sample of that skew allows (skew_cap), no more, and waits.
        cap = skew_cap(1.0)
        assert cap is not None
        wait_until(lambda: store.stats().samples >= cap, what="the first listed keys fetched")
        assert store.meta(Meta.LISTING_COMPLETE) is None  # still listing
        listed = {str(r[0]) for r in store._ix.query("SELECT key FROM catalog")}
        assert set(cached_keys(store)) <= listed and len(listed) == 10 * len(FOLDERS)
        remote.gate.set()
        wait_until(lambda: store.stats().samples == 240, what="the rest after the listing")
        assert store.meta(Meta.LISTING_COMPLETE) is not None


@pytest.mark.parametrize("threads", [1, 2])
def test_spans_advance_together_so_the_catalog_holds_every_folder_in_proportion(
        tmp_path: Path, threads: int) -> None:
    """Spans take turns a page at a time. With one lister the turns are a strict round: no folder
    is more than a page ahead of another. With two, a lister that stalls while it holds a span's
    turn (the GIL, a commit) lets the other go round the rest (seen once in 60 runs: 3 pages
    behind), so only "every folder listed" is certain there."""
    remote = PagedMemoryRemote(class_objects(per=200), page=10)
    store = Store(tmp_path / "c", create=True)
    stop = threading.Event()
    seen: list[Counter[str]] = []

    def on_page(report: object) -> None:
        rows = store._ix.query("SELECT key FROM catalog")
        if len(rows) >= 200 and not seen:
            seen.append(Counter(str(r[0]).split("/")[1] for r in rows))
            stop.set()

    lst = Lister(store, source_for(remote), seed=0, threads=threads, stop=stop, on_page=on_page)
    lst.run()
    counts = seen[0]
    assert set(counts) == set(FOLDERS)
    if threads == 1:
        assert max(counts.values()) - min(counts.values()) <= remote.page, counts
    store.close()


def test_a_complete_parallel_listing_gives_the_order_of_seed_and_keys(tmp_path: Path) -> None:
    objects = class_objects(per=30)
    expected = sorted(objects, key=lambda k: (keyorder.rank(7, k[len(""):]), k))
    for i, (threads, page) in enumerate(((1, 1000), (4, 7), (8, 3))):
        remote = PagedMemoryRemote(objects, page=page)
        store = Store(tmp_path / f"c{i}", create=True)
        report = lister(store, remote, seed=7, threads=threads).run()
        assert report.complete and report.total == len(objects)
        order = [c.key for _, c in store.candidates(after_rank=None, limit=10**6)]
        assert order == expected
        store.close()
    # The sampler fetches in that order (one download at a time).
    remote = PagedMemoryRemote(objects, page=7)
    settings = settings_for(tmp_path / "s", "--seed", "7", "--concurrency", "1", "--capacity", "4Mi")
    with sampling_while_listing(tmp_path / "s", remote, settings) as (store, _):
        wait_until(lambda: store.stats().samples == len(objects), what="everything fetched")
        # Fetched while listing: each key once; the order after the listing is the rank order.
        assert sorted(cached_keys(store)) == sorted(objects)


def test_a_restart_with_a_complete_catalog_fetches_without_listing(tmp_path: Path) -> None:
    remote = PagedMemoryRemote(class_objects(per=20), page=10)
    store = Store(tmp_path / "c", create=True)
    assert lister(store, remote).run().complete
    store.close()
    calls = remote.list_calls
    settings = settings_for(tmp_path / "c", "--capacity", "4Mi")
    with sampling_while_listing(tmp_path / "c", remote, settings) as (store, listing):
        wait_until(lambda: store.stats().samples == 80, what="every key fetched")
        assert not listing.running.is_set()
    assert remote.list_calls == calls  # not one LIST call after the restart


def test_an_interrupted_listing_resumes_without_listing_a_page_twice(tmp_path: Path) -> None:
    objects = class_objects(per=100)
    remote = PagedMemoryRemote(objects, page=10)
    store = Store(tmp_path / "c", create=True)
    stop = threading.Event()
    first = Lister(store, source_for(remote), seed=0, threads=2, stop=stop,
                   on_page=lambda r: stop.set() if r.pages >= 12 else None)
    report = first.run()
    assert not report.complete and store.meta(Meta.LISTING_COMPLETE) is None
    listed_before = len(store._ix.query("SELECT key FROM catalog"))
    asked_before = list(remote.pages_asked)
    store.close()

    store = Store(tmp_path / "c", create=True)  # the restart
    again = lister(store, remote, threads=2)
    assert again.needed()
    report = again.run()
    assert report.complete and report.total == len(objects)
    resumed = remote.pages_asked[len(asked_before):]
    # No discovery again, and no page asked twice beyond the ones in flight at the stop (2 threads).
    assert ("", "", None) not in resumed  # neither the probe nor the folder discovery again
    assert report.listed <= len(objects) - listed_before + 2 * remote.page
    store.close()


def test_a_relist_merges_added_and_deleted_keys(tmp_path: Path) -> None:
    objects = class_objects(per=20)
    remote = PagedMemoryRemote(objects, page=10)
    store = Store(tmp_path / "c", create=True)
    assert lister(store, remote).run().complete
    gone = sorted(objects)[:5]
    for key in gone:
        del remote.objects[key]
    remote.objects["train/gnu/0000.bin"] = b"new"
    report = build_catalog(store, remote, seed=0, shard_index=0, shard_count=1, object_limit=10**9)
    assert report.complete and report.dropped == 5 and report.new == 1
    keys = {str(r[0]) for r in store._ix.query("SELECT key FROM catalog")}
    assert keys == set(remote.objects)
    assert store.stats().catalog_objects == len(remote.objects)
    store.close()


def test_epochfs_relist_asks_the_running_listing_thread(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from epochfs.sidecar import samplerlock
    from epochfs.sidecar.cli import main

    remote = PagedMemoryRemote(class_objects(per=5), page=10)
    settings = settings_for(tmp_path / "c", "--capacity", "4Mi")
    with sampling_while_listing(tmp_path / "c", remote, settings) as (store, listing):
        wait_until(lambda: listing.completed == 1, what="the first listing")
        remote.objects["train/gnu/0000.bin"] = b"new"
        # Without the sampler's lock held, no sampler runs: nothing would serve the request.
        assert main(["relist", "--cache", str(tmp_path / "c")]) == 1
        assert "no sampler runs on" in capsys.readouterr().err
        lock = samplerlock.hold(tmp_path / "c")  # what the command's sampler holds while it runs
        try:
            assert main(["relist", "--cache", str(tmp_path / "c")]) == 0
        finally:
            os.close(lock)
        wait_until(lambda: listing.completed == 2, what="the relist asked for")
        wait_until(lambda: store.stats().samples == 21, what="the new key fetched")


def test_the_first_epoch_waits_for_a_page_of_every_folder_and_status_shows_the_listing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While one folder's first page has not come, the first cut waits (the fetched keys are from
    the other three folders); status shows the listing's coverage and the folders reached."""
    monkeypatch.setattr(catalog_module, "FIRST_ROUND_WAIT", 60.0)
    monkeypatch.setattr(order_module, "FIRST_ROUND_WAIT", 0.0)  # the fetches do not wait here
    remote = PagedMemoryRemote(class_objects(), page=10)
    held = remote.hold["train/fox/"] = threading.Event()
    settings = settings_for(tmp_path / "c", "--capacity", "4Mi")
    with sampling_while_listing(tmp_path / "c", remote, settings) as (store, _):
        wait_until(lambda: store.stats().samples >= 3, what="keys of the other folders fetched")
        assert {k.split("/")[1] for k in cached_keys(store)} <= set(FOLDERS) - {"fox"}
        listing = store.stats().listing
        assert listing["complete"] is False and listing["first_round"] is False
        assert (listing["spans"], listing["spans_reached"]) == (4, 3), listing
        assert 0 < listing["covered"] < 1 and listing["estimated"] > listing["listed"] > 0
        assert "3 of 4 folder(s) reached (the others counted at the reached ones' average size" in render(
            store.stats().to_json()), "the estimate says it guesses the folder not reached"
        assert store.cut() is None, "the first epoch was cut before every folder had a page listed"
        held.set()
        wait_until(lambda: store.cut() is not None, what="the first epoch once fox's first page is in")
        wait_until(lambda: store.stats().listing["complete"], what="the listing complete")
        assert store.stats().listing["covered"] == 1.0
        assert "listing: complete" in render(store.stats().to_json())


def test_the_first_epochs_wait_for_the_first_round_is_bounded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog_module, "FIRST_ROUND_WAIT", 0.5)
    monkeypatch.setattr(order_module, "FIRST_ROUND_WAIT", 0.5)
    remote = PagedMemoryRemote(class_objects(), page=10)
    held = remote.hold["train/fox/"] = threading.Event()
    settings = settings_for(tmp_path / "c", "--capacity", "4Mi")
    with sampling_while_listing(tmp_path / "c", remote, settings) as (store, _):
        try:
            wait_until(lambda: store.stats().samples >= 1, what="the first sample")
            wait_until(lambda: store.cut() is not None, what="the first epoch after the bound")
            assert store.stats().listing["first_round"] is False
        finally:
            held.set()  # the lister waiting on it ends with the listing


class _ReadersSeen(PagedMemoryRemote):
    """Pages that take a little while, as S3's do, each recording the thread that read it; of
    100 keys, so that the discovery's pages (eleven) do not list a bucket of a few thousand whole."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        super().__init__(objects, page=100)
        self.readers: set[str] = set()

    def list_page(self, prefix: str, *, start_after: str = "", token: str | None = None,
                  delimiter: bool = False, max_keys: int = 1000
                  ) -> ListedPage:
        if not delimiter:
            self.readers.add(threading.current_thread().name)
            threading.Event().wait(0.02)  # a page's round trip (S3: 20-100 ms)
        return super().list_page(prefix, start_after=start_after, token=token, delimiter=delimiter,
                                 max_keys=max_keys)


def test_a_flat_bucket_is_listed_by_every_lister_not_one(tmp_path: Path) -> None:
    """One span (no folders) is split by the planner as it learns the keys, so the listers share it:
    the listing started one thread a span, and a flat bucket listed on one whatever
    --list-threads said (the fairness benchmark's flat key space: 1,500 keys in 6 s)."""
    remote = _ReadersSeen({f"sample-{i:06d}.bin": b"x" for i in range(3000)})
    store = Store(tmp_path / "cache", create=True)
    report = lister(store, remote, threads=4).run()
    assert report.complete and report.total == 3000
    listers = {name for name in remote.readers if name.startswith("lister-")}
    assert len(listers) > 1, remote.readers
