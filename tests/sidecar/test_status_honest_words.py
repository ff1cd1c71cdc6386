"""``epochfs status`` and the sampler's progress line say what is known, no more (a review's
reproductions): the trainer's wait is a sum over the pod's ranks, which the view capped at 100%
as if one rank had reported it (8 ranks each waiting 20% read "100% of the time"); a listing
with no estimate yet read "0 of about 0 keys seen (0.0%)"; the progress line said "idle:" while
the remote was down and the sampler waited out the outage's pause (``epochfs_sampler_idle`` 0)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from common import wait_until
from inprocess import objects_of, sampling, settings_for

from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.sampler.breaker import OutageBreaker
from epochfs.sidecar.status import rates, read_stats, render
from epochfs.sidecar.store import Meta, Policy, Store


def _cache(tmp_path: Path, wait_seconds: float) -> Path:
    cache = tmp_path / "cache"
    with Store(cache, create=True) as store:
        store.configure(Policy(capacity=1 << 20))
        store.set_meta(Meta.SIDECAR_TOTALS, json.dumps({
            "served_samples_total": 80, "served_bytes_total": 1_600_000,
            "client_samples_total": 80, "client_wait_seconds_total": wait_seconds}))
    return cache


def test_the_trainer_wait_of_eight_ranks_is_not_capped_at_100_percent(tmp_path: Path) -> None:
    """Two readings a second apart over which 8 ranks each waited 0.2 s: 1.6 s waited per second,
    shown as the sum it is, with how to get one rank's share."""
    before = read_stats(cache=_cache(tmp_path / "a", 10.0), mount=None)
    after = read_stats(cache=_cache(tmp_path / "b", 11.6), mount=None)
    view = render(after, rates(before, after, 1.0))
    rate_line = next(line for line in view.splitlines() if line.startswith("rates: "))
    assert "100%" not in rate_line, rate_line
    assert "trainer wait 1.60 s per s summed over the pod's ranks" in rate_line, rate_line


def test_a_listing_without_an_estimate_says_no_page_was_listed(tmp_path: Path) -> None:
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=1 << 20))
        doc = store.stats().to_json()
    assert doc["listing"].get("estimated") is None  # the status.json of a listing not begun
    listing = [line for line in render(doc).splitlines() if line.startswith("listing: ")]
    assert listing == ["listing: no page listed yet"], listing


def test_the_progress_line_during_an_outage_says_it_waits_for_the_remote(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    remote = MemoryRemote(objects_of(10))
    remote.down.set()
    breaker = OutageBreaker(after=1, pause=(600.0, 600.0))  # paused for the whole test
    settings = settings_for(tmp_path / "cache", "--retries", "1", "--concurrency", "1")
    with caplog.at_level(logging.INFO, logger="epochfs.sampler"), \
            sampling(tmp_path / "cache", remote, settings, breaker=breaker) as (_, sampler):
        wait_until(lambda: breaker.paused(), timeout=20, what="the breaker to pause fetching")
        sampler.progress_every = 0.05
        seen = len(caplog.records)

        def progress_lines() -> list[str]:
            return [r.getMessage() for r in list(caplog.records)[seen:]
                    if "sample(s) fetched this run" in r.getMessage()]

        wait_until(lambda: len(progress_lines()) >= 2, timeout=20, what="progress lines while paused")
    lines = progress_lines()
    assert all(line.startswith("waiting for the remote: ") for line in lines), lines


def test_the_backpressure_panel_says_a_full_disk_sets_it_too() -> None:
    """The gauge is 1 on a full disk as well (``BACKPRESSURE_HELP``); the panel said only "the
    cache is full and nothing is evictable", which sends an SRE looking for pinned epochs."""
    dashboard = json.loads((Path(__file__).parents[2] / "helm/epochfs/dashboards/epochfs.json").read_text())
    panel = next(p for p in dashboard["panels"] if p.get("title") == "Backpressure")
    assert "disk" in panel["description"], panel["description"]
