"""The listers and the sampler share the index (one connection and lock per process): while the
sampler fetches, the listers leave it free between their page commits at least as long as a
commit held it (``INDEX_SHARE``), so the fetch loop and the admitter are not starved for the whole
listing (docs/listing.md, "The listing and the fetches on one CPU"). The commits are observed as
the real store makes them; no clock is asserted on, only their order in time."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from epochfs.sidecar.listing import Lister, source_for
from epochfs.sidecar.listing.lister import INDEX_SHARE
from epochfs.sidecar.remote.testing import PagedMemoryRemote
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.listings import Listings


def objects(folders: int = 4, per: int = 100) -> dict[str, bytes]:
    return {f"train/c{j}/{i:04d}.bin": bytes([i % 251, j]) * 8 for j in range(folders) for i in range(per)}


class _Waits(threading.Event):
    """The listers' stop event, recording every wait on it: the lister's only one is its pause
    for the sampler's turn at the index (an in-memory remote never throttles)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return super().wait(timeout)


def list_recording_commits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           fetching: threading.Event, stop: threading.Event | None = None
                           ) -> list[tuple[float, float]]:
    """List ``objects()`` with four listers while ``fetching`` says whether the sampler fetches;
    returns each commit's (start, end) in ``time.monotonic()``, in order (a commit takes in the
    pages read while the one before was made)."""
    spans: list[tuple[float, float]] = []
    real = Listings.commit_pages

    def observed(self: Listings, *args: object, **kwargs: object) -> list[int]:
        start = time.monotonic()
        try:
            return real(self, *args, **kwargs)  # type: ignore[arg-type]
        finally:
            spans.append((start, time.monotonic()))

    monkeypatch.setattr(Listings, "commit_pages", observed)
    store = Store(tmp_path / "c", create=True)
    try:
        lister = Lister(store, source_for(PagedMemoryRemote(objects(), page=10)), seed=0, threads=4,
                        yield_to=fetching.is_set, stop=stop)
        report = lister.run()
        assert report.complete and report.total == 400
    finally:
        store.close()
    return sorted(spans)


def test_while_the_sampler_fetches_the_index_is_free_between_commits_as_long_as_they_held_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fetching = threading.Event()
    fetching.set()
    spans = list_recording_commits(tmp_path, monkeypatch, fetching)
    assert len(spans) >= 10  # 40 pages and more, in commits of the pages waiting at once
    factor = 1 / INDEX_SHARE - 1
    short = [(i, spans[i], spans[i + 1]) for i in range(len(spans) - 1)
             if spans[i + 1][0] - spans[i][1] < (spans[i][1] - spans[i][0]) * factor]
    assert not short, f"{len(short)} of {len(spans) - 1} gaps shorter than the commit before: {short[:3]}"


def test_the_listers_commit_without_pausing_when_the_sampler_is_not_fetching(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sampler with nothing in flight (cache full, schedule mode waiting for the listing) costs
    the listing nothing: the listers never pause for it between their commits (seen on the stop
    event they wait on; a pause is a wait with a timeout). Beside a fetching sampler they do, the
    check's own check. Not asserted on the commits' times: under a loaded full run no two
    commits came closer together than a commit lasts, pause or not."""
    idle, busy = _Waits(), _Waits()
    spans = list_recording_commits(tmp_path / "idle", monkeypatch, threading.Event(), idle)
    assert len(spans) >= 10 and not [t for t in idle.waits if t is not None and t > 0], idle.waits
    fetching = threading.Event()
    fetching.set()
    list_recording_commits(tmp_path / "busy", monkeypatch, fetching, busy)
    assert [t for t in busy.waits if t is not None and t > 0]
