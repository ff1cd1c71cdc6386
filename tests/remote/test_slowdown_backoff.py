"""The real sampler answers S3's ``503 SlowDown`` the way the fleet model (benchmarks/fleet.py)
assumes, so the model's request counts and waits are those of the code:

- a throttled object GET is never given up and never retried in its download slot: the key waits
  a full-jitter delay and is fetched again, however many SlowDowns it gets (more than
  ``--retries``), and nothing is skipped;
- a store that throttles every GET for a while does not open the outage breaker: the fetch window
  shrinks to one download in flight (the model's ``FetchWindow``), grows back to
  ``--concurrency`` afterwards, and every key is fetched;
- a throttled ``--index`` header GET is read again (the model's ``header_retry``), not the end of
  the sampler;
- a SlowDown while finding the spans (before the listing begins) is read again in place after a
  full-jitter pause (the model's ``discovery_retry``), not the end of the sampler: only the
  throttled page is asked again;
- a SlowDown on a page of the listing pauses the listing thread (full jitter up to
  ``LIST_RETRY[0]`` the first time), the sampler running on, and the listing resumes each span
  from its last committed page: no page before the throttled one is listed again (the LIST
  requests are the model's count plus the throttled one).

Object GETs are throttled by tests/faultproxy.py in front of the synthetic S3 endpoint
(benchmarks/synthetic_s3.py) or moto; listing pages by the endpoint itself. If the sampler's
behaviour changes (a throttled key given up, retried in place, a listing that relists or exits),
these tests fail and the model must change with it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import S3Server, put_objects, wait_until
from faultproxy import FaultProxy
from sampler_helpers import index_rows, running_sampler, s3_env

from epochfs.benchmarks.fleet import Params
from epochfs.benchmarks.synthetic_s3 import Dataset, SyntheticS3, resume_point
from epochfs.sidecar.listing.indexfile import FORMAT_VERSION, object_record
from epochfs.sidecar.remote import RemoteObject

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


def test_a_throttled_get_is_never_given_up_nor_retried_in_its_slot(
    s3: SyntheticS3, proxy: FaultProxy, tmp_path: Path
) -> None:
    retries = MODEL.retry.attempts
    assert retries == 5  # the sampler's default --retries, the model's default
    proxy.set_plan(object_path(s3, 0), ["503"] * (retries + 1))  # more SlowDowns than --retries
    proxy.set_plan(object_path(s3, 1), ["503"])
    cache = tmp_path / "cache"
    with running_sampler(cache, s3.url, "--endpoint-url", proxy.endpoint, "--capacity", "32Mi",
                         env=s3_env(proxy.endpoint)) as sp:
        wait_until(lambda: sp.stats()["samples"] == 40, what="every object, the throttled ones too")
        assert sp.stats()["skipped_total"] == 0
        log = sp.log_text()
    assert proxy.gets[object_path(s3, 0)] == retries + 2  # each SlowDown, then the one that worked
    assert proxy.gets[object_path(s3, 1)] == 2
    assert all(proxy.gets[object_path(s3, i)] == 1 for i in range(2, 40))
    assert re.search(r"remote throttling \(.*HTTP 503 SlowDown\): fetch window \d+ of 32", log), log[-3000:]
    assert "gave up" not in log and "remote unavailable" not in log
    assert len(sample_keys(cache)) == 40


def test_a_store_that_throttles_every_get_shrinks_the_window_not_the_dataset(
    s3: SyntheticS3, proxy: FaultProxy, tmp_path: Path
) -> None:
    proxy.down = "503"  # every object GET: SlowDown
    cache = tmp_path / "cache"
    concurrency = 4
    with running_sampler(cache, s3.url, "--endpoint-url", proxy.endpoint, "--capacity", "32Mi",
                         "--concurrency", str(concurrency), env=s3_env(proxy.endpoint)) as sp:
        wait_until(lambda: re.search(rf"\(window 1/{concurrency}\), 0 skipped, 0 retried, [1-9]\d* throttled",
                                     sp.log_text()), what="the fetch window down to one, keys kept")
        # Keys asked again, more often than --retries, and only as many keys as the window holds
        # (a throttled key's wait keeps its place in the window).
        wait_until(lambda: max(proxy.gets.values()) > MODEL.retry.attempts, timeout=60,
                   what="a key throttled more often than --retries")
        assert len(proxy.gets) <= concurrency
        assert "remote unavailable" not in sp.log_text(), "throttling is not an outage"
        proxy.down = None
        wait_until(lambda: sp.stats()["samples"] == 40, timeout=60, what="every object after the throttling")
        wait_until(lambda: re.search(rf"\(window {concurrency}/{concurrency}\)", sp.log_text().split(
            "remote throttling")[-1]), what="the window back to --concurrency")
        assert sp.stats()["skipped_total"] == 0


def test_a_throttled_index_header_is_read_again_not_the_end_of_the_sampler(
    s3_server: S3Server, tmp_path: Path
) -> None:
    s3_server.reset()
    objects = {f"data/{i:03d}.bin": bytes([i]) * 1000 for i in range(20)}
    records = [RemoteObject(k[len("data/"):], len(b), hashlib.md5(b).hexdigest()) for k, b in objects.items()]
    index = (json.dumps({"epochfs_index": FORMAT_VERSION, "sorted": True}).encode() + b"\n"
             + b"".join(object_record(r) for r in records)
             + json.dumps({"end": True, "count": len(records)}).encode() + b"\n")
    put_objects(s3_server, "bkt", {**objects, "index.jsonl.gz": gzip.compress(index)})
    with FaultProxy(upstream=s3_server.endpoint) as proxy:
        proxy.set_plan("/bkt/index.jsonl.gz", ["503", "503"])  # the header's GET, twice
        cache = tmp_path / "cache"
        with running_sampler(cache, "s3://bkt/data", "--endpoint-url", proxy.endpoint,
                             "--index", "s3://bkt/index.jsonl.gz", env=s3_env(proxy.endpoint)) as sp:
            wait_until(lambda: sp.stats()["samples"] == len(objects), what="every key from the index")
            assert sp.proc.poll() is None  # never exited (it ended with status 2 before)
            log = sp.log_text()
    assert log.count("reading the index header of s3://bkt/index.jsonl.gz: throttled") == 2
    # Two throttled header GETs, the header read, then the stream.
    assert proxy.gets["/bkt/index.jsonl.gz"] == 4


Request = tuple[str, str, str]
"""A listing request: (prefix, delimiter, resume point), the same however the page was asked."""


def split_at_throttle(s3: SyntheticS3) -> tuple[int, list[Request], Request, list[Request]]:
    """(the number of the throttled listing request, the requests answered before it, it, those
    asked after it)."""
    log = [((q.get("prefix", ""), q.get("delimiter", ""), resume_point(q)), t) for q, t in s3.server.list_log]
    at = next(n for n, (_, throttled) in enumerate(log) if throttled)
    return at + 1, [r for r, _ in log[:at]], log[at][0], [r for r, _ in log[at + 1:]]


@pytest.mark.long
def test_a_throttled_discovery_page_is_read_again_in_place_not_the_end_of_the_sampler(
    tmp_path: Path,
) -> None:
    """Before the listing begins (the probe page, then the folders with the delimiter) a SlowDown
    is read again after a full-jitter pause (the model's ``discovery_retry``), the sampler running
    on: not status 2 and a restart that finds the spans again from the first page (which it was
    before). Only the throttled page is asked again: every other LIST request is asked once."""
    model = Params(keys=2500, folders=0)  # flat keys: one span, discovery lists them with the delimiter
    with SyntheticS3(Dataset(model.keys, 512), list_latency=0) as s3:
        s3.server.throttle_pages = {2, 3}  # the first delimiter page, and again when asked again
        cache = tmp_path / "cache"
        with running_sampler(cache, s3.url, "--endpoint-url", s3.endpoint, "--capacity", "32Mi",
                             env=s3_env(s3.endpoint)) as sp:
            wait_until(lambda: sp.stats()["samples"] == model.keys, what="every object, one sampler run")
            assert sp.proc.poll() is None  # never exited (status 2 before)
            log = sp.log_text()
        pauses = [(float(m.group(1)), float(m.group(2))) for m in re.finditer(
            r"finding the folders under 'the root': throttled \(.*SlowDown.*\); trying again in ([\d.]+)s "
            r"\(full jitter up to ([\d.]+)s\)", log)]
        first = MODEL.discovery_retry[0]
        assert [bound for _, bound in pauses] == [first, 2 * first], log[-3000:]
        assert all(0 <= pause <= bound for pause, bound in pauses)
        assert "epochfs sample: --remote" not in log  # the exit's line before
        throttled_at, before, throttled, after = split_at_throttle(s3)
        # Only the throttled page is asked again (the listing's own pages are the planner's: small
        # first pages, pages past the known end; each asked once).
        asked = Counter([*before, throttled, *after])
        assert asked.pop(throttled) == 3 and asked.pop(("", "", "")) == 1, asked  # the probe, see below
        assert set(asked.values()) == {1}, asked
        assert s3.stats.snapshot()["list_pages"] == len(before) + 1 + len(after)
        probe = ("", "", "")
        # A delimiter page, after the probe's files (a first page of files only is not looked at
        # for folders again).
        assert throttled_at == 2 and before == [probe] and throttled[:2] == ("", "/"), throttled
        assert throttled[2] > "", throttled
        assert after[:2] == [throttled, throttled]  # the same page asked again, twice
        # The probe page is never asked again: not by the discovery (it did not start over), nor by
        # the listing, whose first page it is (one span over a flat bucket).
        assert after.count(probe) == 0


def test_a_stop_while_a_throttled_discovery_page_waits_is_a_clean_exit(tmp_path: Path) -> None:
    """SIGTERM during the discovery's pause (a pod deleted while the store throttles every LIST)
    is a clean stop, exit 0: not a bad ``--remote`` (status 2), which the supervisor would report
    as a settings error."""
    with SyntheticS3(Dataset(2500, 512), list_latency=0) as s3:
        s3.server.throttle_pages = set(range(2, 10_000))  # every page after the probe
        with running_sampler(tmp_path / "cache", s3.url, "--endpoint-url", s3.endpoint, "--capacity",
                             "32Mi", env=s3_env(s3.endpoint)) as sp:  # asserts exit 0 after SIGTERM
            wait_until(lambda: "throttled" in sp.log_text(), what="a throttled discovery page")
        assert "epochfs sample: --remote" not in sp.log_text()


@pytest.mark.long
def test_a_throttled_listing_page_resumes_from_its_span_and_the_sampler_keeps_running(
    tmp_path: Path,
) -> None:
    """Once the listing has begun, a SlowDown fails the listing run, not the sampler: the listing
    thread pauses (full jitter up to the model's first listing pause) and resumes every span from
    the point its last page committed. No page before the throttled one is listed again: every
    LIST request is asked once but the throttled one, and nothing after the throttle starts a span
    over."""
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
            pause = re.search(r"listing failed: .*SlowDown.*trying again in ([\d.]+)s \(full jitter up to "
                              r"(\d+)s", sp.log_text())
            assert pause is not None, sp.log_text()[-3000:]
            assert float(pause.group(2)) == MODEL.list_retry[0]
            assert 0 <= float(pause.group(1)) <= MODEL.list_retry[0]
        throttled_at, before, throttled, after = split_at_throttle(s3)
        # Each page asked once; the throttled one perhaps again (a page past a segment's known end
        # that failed is planned anew, maybe elsewhere).
        asked = Counter([*before, throttled, *after])
        assert asked.pop(throttled) <= 2 and set(asked.values()) == {1}, asked
        assert throttled_at == model.discovery + model.spans + 1
        assert not set(before) & set(after), "a page listed before the SlowDown was listed again"
        assert after.count(throttled) <= 1  # the throttled page, asked again or planned anew
        assert all(delimiter == "" for _, delimiter, _ in after)  # no discovery again
