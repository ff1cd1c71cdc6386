"""``epochfs sample`` gives the listers a connection to the index (and a lock) of their own: while a
lister holds a page commit open, the sampler's reads of the index (the fetch order's candidates,
the stats) still answer, where with one connection and one lock per process they waited for the
whole commit, back to back for the whole listing (docs/listing.md, "The listing and the fetches on
one CPU"). The command runs in-process over a paged in-memory remote; one page commit is held open
by a gate, with the lister's own lock and SQLite's write lock taken as a commit takes them."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from common import wait_until
from inprocess import settings_for, start_recording

from epochfs.sidecar.listing import Lister
from epochfs.sidecar.remote.testing import PagedMemoryRemote
from epochfs.sidecar.sampler import command
from epochfs.sidecar.sampler.loop import Sampler
from epochfs.sidecar.store import Meta
from epochfs.sidecar.store.listings import Listings

FOLDERS = ("cat", "dog", "eel", "fox")
HELD_PAGE = 6
"""The page commit held open: a later one, so that the catalog already has keys to fetch."""


def class_objects(per: int = 60, size: int = 512) -> dict[str, bytes]:
    return {f"train/{c}/{i:04d}.bin": bytes([i % 251, j]) * (size // 2)
            for j, c in enumerate(FOLDERS) for i in range(per)}


def test_the_samplers_reads_answer_while_a_lister_holds_a_page_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remote = PagedMemoryRemote(class_objects(), page=10)
    made: dict[str, Any] = {}

    class RecordingSampler(Sampler):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            made["sampler"] = self

    class RecordingLister(Lister):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made["lister"] = self

    held, gate = threading.Event(), threading.Event()
    real = Listings.commit_pages
    commits = [0]

    def holding(self: Listings, *args: Any, **kwargs: Any) -> list[int]:
        commits[0] += 1  # one lister commits at a time (Lister._commit)
        if commits[0] == HELD_PAGE:
            with self.ix.write():  # what a commit holds: its connection's lock, SQLite's write lock
                held.set()
                gate.wait()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(command, "open_remote", lambda *a, **k: remote)
    monkeypatch.setattr(command, "Sampler", RecordingSampler)
    monkeypatch.setattr(command, "Lister", RecordingLister)
    monkeypatch.setattr(Listings, "commit_pages", holding)
    settings = settings_for(tmp_path / "c", "--capacity", "4Mi")
    thread, errors = start_recording(lambda: made.setdefault("rc", command.run_sample(settings)))
    try:
        wait_until(held.is_set, what="a lister inside a page commit")
        store = made["sampler"].store
        answers: list[tuple[int, int, int]] = []

        def read() -> None:
            candidates = store.candidates(after_rank=None, limit=1000)
            stats = store.stats()
            answers.append((len(candidates), stats.samples, stats.catalog_objects))

        threading.Thread(target=read, name="sampler-reads", daemon=True).start()
        wait_until(lambda: answers, timeout=10,
                   what="the sampler's reads of the index while a lister holds a page commit")
        candidates, samples, cataloged = answers[0]
        # The pages committed before, every key of them either cached or still to fetch (nothing
        # is admitted while the commit holds the write lock).
        assert cataloged == candidates + samples > 0
        gate.set()
        # Every key, committed through the listers' connection, is seen and fetched by the sampler.
        wait_until(lambda: store.stats().samples == 240, what="every key fetched")
        assert store.meta(Meta.LISTING_COMPLETE) is not None
    finally:
        gate.set()
        if "lister" in made:
            made["lister"].stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive() and not errors, errors
    assert made["rc"] == 0
