"""The real sampler answers S3's ``503 SlowDown`` the way the fleet model (benchmarks/fleet.py)
assumes, so the model's request counts and waits are those of the code:

- a throttled object GET is tried ``RetryPolicy.attempts`` times in all, no more, no fewer;
- ``OUTAGE_AFTER`` objects given up in a row on SlowDown pause new downloads (the first pause
  ``OUTAGE_PAUSE[0]``), the keys kept;
- a SlowDown on a listing page ends the sampler (status 2, ``cannot list``), and the next start
  lists again (from the first page, the model says; see the last test).

Object GETs are throttled by tests/faultproxy.py in front of the synthetic S3 endpoint
(benchmarks/synthetic_s3.py); listing pages by the endpoint itself. If the sampler's behaviour
changes (a listing that retries or resumes), these tests fail and the model must change with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from faultproxy import FaultProxy
from sampler_helpers import index_rows, running_sampler, s3_env, start_sampler

from epochfs.benchmarks.fleet import Params
from epochfs.benchmarks.synthetic_s3 import Dataset, SyntheticS3

MODEL = Params()


@pytest.fixture
def s3() -> Iterator[SyntheticS3]:
    with SyntheticS3(Dataset(40, 2048, prefix="train/"), list_latency=0) as server:
        yield server


@pytest.fixture
def proxy(s3: SyntheticS3) -> Iterator[FaultProxy]:
    with FaultProxy(upstream=s3.endpoint) as p:
        yield p


def object_path(s3: SyntheticS3, i: int) -> str:
    return f"/{s3.data.bucket}/{s3.data.key(i)}"


def sample_keys(cache: Path) -> set[str]:
    return {str(r[0]) for r in index_rows(cache, "SELECT key FROM samples")}


def test_a_throttled_get_is_tried_as_often_as_the_model_says(
    s3: SyntheticS3, proxy: FaultProxy, tmp_path: Path
) -> None:
    attempts = MODEL.retry.attempts
    assert attempts == 5  # the sampler's default --retries, the model's default
    proxy.set_plan(object_path(s3, 0), ["503"] * (attempts - 1))  # the last attempt gets through
    proxy.set_plan(object_path(s3, 1), ["503"] * attempts)  # given up after the last
    cache = tmp_path / "cache"
    with running_sampler(cache, s3.url, "--endpoint-url", proxy.endpoint, "--capacity", "32Mi",
                         env=s3_env(proxy.endpoint)) as sp:
        wait_until(lambda: sp.stats()["samples"] == 39 and sp.stats()["skipped_total"] >= 1,
                   what="every object fetched but the one given up")
    assert proxy.gets[object_path(s3, 0)] == attempts
    assert proxy.gets[object_path(s3, 1)] == attempts  # not one more
    keys = sample_keys(cache)
    assert s3.data.key(0)[len("train/"):] in keys and s3.data.key(1)[len("train/"):] not in keys
    assert all(proxy.gets[object_path(s3, i)] == 1 for i in range(2, 40))


def test_objects_given_up_in_a_row_pause_downloads_as_the_model_says(
    s3: SyntheticS3, proxy: FaultProxy, tmp_path: Path
) -> None:
    proxy.down = "503"  # every object GET: SlowDown
    cache = tmp_path / "cache"
    with running_sampler(cache, s3.url, "--endpoint-url", proxy.endpoint, "--capacity", "32Mi",
                         "--concurrency", "1", env=s3_env(proxy.endpoint)) as sp:
        line = wait_until(lambda: re.search(r"remote unavailable \((\d+) objects in a row.*pausing (\d+)s",
                                            sp.log_text()), what="the breaker opening")
        with proxy.lock:
            seen = dict(proxy.gets)
        # One download at a time: OUTAGE_AFTER objects, each tried `attempts` times, then the pause
        # (seconds long: nothing else is asked for before this is read).
        assert int(line.group(1)) == MODEL.outage_after
        assert float(line.group(2)) == MODEL.outage_pause[0]
        assert sorted(seen.values()) == [MODEL.retry.attempts] * MODEL.outage_after
        proxy.down = None
        wait_until(lambda: sp.stats()["samples"] == 40 - (MODEL.outage_after - 1),
                   what="the rest after the outage, the last object given up kept")


def test_a_throttled_listing_page_ends_the_sampler_and_the_next_start_lists_again(
    tmp_path: Path,
) -> None:
    """Since 7c148ca (listing while sampling) each page commits its span's resume point, so the
    next start may resume rather than list from the first page as the model assumes: only the
    exit and the complete catalog after the restart are checked until the model follows."""
    data = Dataset(2500, 512)  # three pages
    with SyntheticS3(data, list_latency=0) as s3:
        s3.server.throttle_pages = {2}
        cache = tmp_path / "cache"
        sp = start_sampler(cache, s3.url, "--endpoint-url", s3.endpoint, "--capacity", "32Mi",
                           env=s3_env(s3.endpoint))
        assert sp.proc.wait(timeout=60) == 2, sp.log_text()[-3000:]
        assert "cannot list" in sp.log_text() and "SlowDown" in sp.log_text()
        assert s3.stats.snapshot()["list_pages"] == 2 and s3.stats.snapshot()["gets"] == 0
        with running_sampler(cache, s3.url, "--endpoint-url", s3.endpoint, "--capacity", "32Mi",
                             env=s3_env(s3.endpoint)) as again:
            wait_until(lambda: again.stats()["samples"] == 2500, what="every object after the restart")
        assert s3.stats.snapshot()["list_pages"] > 2
