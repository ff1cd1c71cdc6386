"""The real sampler answers S3's ``503 SlowDown`` the way the fleet model (benchmarks/fleet.py)
assumes, so the model's request counts and waits are those of the code:

- a throttled object GET is tried ``RetryPolicy.attempts`` times in all, no more, no fewer;
- ``OUTAGE_AFTER`` objects given up in a row on SlowDown pause new downloads (the first pause
  ``OUTAGE_PAUSE[0]``), the keys kept;
- a SlowDown while finding the spans (before the listing begins) ends the sampler (status 2,
  ``cannot list``), and the next start finds them again from the first page;
- a SlowDown on a page of the listing pauses the listing thread (``LIST_RETRY``), the sampler
  running on, and the listing resumes each span from its last committed page: no page before the
  throttled one is listed again (the LIST requests are the model's count plus the throttled one).

Object GETs are throttled by tests/faultproxy.py in front of the synthetic S3 endpoint
(benchmarks/synthetic_s3.py); listing pages by the endpoint itself. If the sampler's behaviour
changes (a listing that relists, retries in place, or exits), these tests fail and the model must
change with it.
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
from epochfs.benchmarks.synthetic_s3 import Dataset, SyntheticS3, resume_point

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


Request = tuple[str, str, str]
"""A listing request: (prefix, delimiter, resume point), the same however the page was asked."""


def split_at_throttle(s3: SyntheticS3) -> tuple[int, list[Request], Request, list[Request]]:
    """(the number of the throttled listing request, the requests answered before it, it, those
    asked after it)."""
    log = [((q.get("prefix", ""), q.get("delimiter", ""), resume_point(q)), t) for q, t in s3.server.list_log]
    at = next(n for n, (_, throttled) in enumerate(log) if throttled)
    return at + 1, [r for r, _ in log[:at]], log[at][0], [r for r, _ in log[at + 1:]]


def test_a_throttled_discovery_page_ends_the_sampler_and_the_next_start_discovers_again(
    tmp_path: Path,
) -> None:
    """Before the listing begins (the probe page, then the folders with the delimiter) a SlowDown
    is a remote that cannot be listed: status 2, and the next start (the supervisor's) finds the
    spans again from the first page, as the model's discovery does."""
    model = Params(keys=2500, folders=0)  # flat keys: one span, discovery lists them with the delimiter
    with SyntheticS3(Dataset(model.keys, 512), list_latency=0) as s3:
        s3.server.throttle_pages = {2}  # the first delimiter page
        cache = tmp_path / "cache"
        sp = start_sampler(cache, s3.url, "--endpoint-url", s3.endpoint, "--capacity", "32Mi",
                           env=s3_env(s3.endpoint))
        assert sp.proc.wait(timeout=60) == 2, sp.log_text()[-3000:]
        assert "cannot list" in sp.log_text() and "SlowDown" in sp.log_text()
        assert s3.stats.snapshot()["list_pages"] == 2 and s3.stats.snapshot()["gets"] == 0
        with running_sampler(cache, s3.url, "--endpoint-url", s3.endpoint, "--capacity", "32Mi",
                             env=s3_env(s3.endpoint)) as again:
            wait_until(lambda: again.stats()["samples"] == model.keys, what="every object after the restart")
        # The restart: the discovery from its first page, then the listing; nothing else.
        assert s3.stats.snapshot()["list_pages"] == 2 + model.discovery + model.pages
        _, _, _, after = split_at_throttle(s3)
        assert after[0] == ("", "", "")  # the probe page again: the discovery from its start


def test_a_throttled_listing_page_resumes_from_its_span_and_the_sampler_keeps_running(
    tmp_path: Path,
) -> None:
    """Once the listing has begun, a SlowDown fails the listing run, not the sampler: the listing
    thread pauses (the model's first listing pause) and resumes every span from the point its last
    page committed. No page before the throttled one is listed again: the LIST requests are the
    model's discovery and pages plus the throttled one asked again, and nothing after the throttle
    starts a span over."""
    model = Params(keys=2500, folders=2)  # two class folders: two spans of two pages
    data = Dataset(model.keys, 256, classes=model.folders)
    with SyntheticS3(data, list_latency=0) as s3:
        # Requests 1-2 find the spans, 3-4 are pages of the listing: 5 is a page after them.
        s3.server.throttle_pages = {model.discovery + model.spans + 1}
        cache = tmp_path / "cache"
        with running_sampler(cache, s3.url, "--endpoint-url", s3.endpoint, "--capacity", "32Mi",
                             env=s3_env(s3.endpoint)) as sp:
            wait_until(lambda: sp.stats()["samples"] == model.keys, timeout=120,
                       what="every object, one sampler run")
            assert sp.proc.poll() is None  # never exited
            pause = re.search(r"listing failed: .*SlowDown.*trying again in (\d+)s", sp.log_text())
            assert pause is not None, sp.log_text()[-3000:]
            assert float(pause.group(1)) == MODEL.list_retry[0]
        assert s3.stats.snapshot()["list_pages"] == model.discovery + model.pages + 1
        throttled_at, before, throttled, after = split_at_throttle(s3)
        assert throttled_at == model.discovery + model.spans + 1
        assert not set(before) & set(after), "a page listed before the SlowDown was listed again"
        assert after.count(throttled) == 1  # the throttled page, asked again from its resume point
        assert all(delimiter == "" for _, delimiter, _ in after)  # no discovery again
