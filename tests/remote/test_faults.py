"""Faults from the remote (through tests/faultproxy.py): retried or skipped, never stored corrupt.

What each fault is typed as, backend by backend, is in tests/remote/test_remote_errors.py; here the whole
sampler shows the outcome: transient and unavailable failures retried, not found and denied ones
skipped at once, an outage paused through."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from faultproxy import FaultProxy
from sampler_helpers import index_rows, running_sampler, s3_env, start_sampler, verify_cache

from epochfs.sidecar.store import Store

# Short read timeout so that a stalled body is noticed in a second, not thirty.
FAST = {"EPOCHFS_READ_TIMEOUT": "1"}


@pytest.fixture
def proxy(s3: S3Server) -> Iterator[FaultProxy]:
    with FaultProxy(upstream=s3.endpoint) as p:
        yield p


def sample_keys(cache: Path) -> set[str]:
    return {str(r[0]) for r in index_rows(cache, "SELECT key FROM samples")}


def test_transient_faults_are_retried(s3: S3Server, proxy: FaultProxy, tmp_path: Path) -> None:
    objects = random_objects(24, 200_000)
    put_objects(s3, "bkt", objects)
    keys = sorted(objects)
    plans = {
        keys[0]: ["reset"],
        keys[1]: ["reset-body"],
        keys[2]: ["truncate"],
        keys[3]: ["stall"],
        keys[4]: ["503", "503"],
        keys[5]: ["500"],
        keys[6]: ["corrupt"],
        keys[7]: ["reset", "truncate", "503", "corrupt"],  # four failures, the fifth attempt works
        keys[8]: ["garbage"],  # not an HTTP response
        keys[9]: ["429", "429"],  # throttled
    }
    for key, faults in plans.items():
        proxy.set_plan(f"/bkt/{key}", faults)
    cache = tmp_path / "cache"
    with running_sampler(cache, "s3://bkt", "--endpoint-url", proxy.endpoint, "--retries", "5",
                         "--concurrency", "8", env=s3_env(s3.endpoint) | FAST) as sp:
        wait_until(lambda: sp.stats()["samples"] == len(objects), what="every object, despite faults")
        log = sp.log_text()
    assert verify_cache(cache, objects) == len(objects)
    for key, faults in plans.items():
        assert proxy.gets[f"/bkt/{key}"] == len(faults) + 1, key
    assert sum(proxy.injected.values()) == sum(len(f) for f in plans.values())
    assert Store(cache).stats().skipped_total == 0
    assert re.search(r"[1-9]\d* retried", log), "progress lines count retries"


def test_persistent_faults_are_skipped_after_bounded_attempts(
    s3: S3Server, proxy: FaultProxy, tmp_path: Path
) -> None:
    objects = random_objects(12, 50_000)
    put_objects(s3, "bkt", objects)
    keys = sorted(objects)
    proxy.set_plan(f"/bkt/{keys[0]}", ["500"] * 10)  # (a SlowDown is never skipped: test_throttle*)
    proxy.set_plan(f"/bkt/{keys[1]}", ["corrupt"] * 10)
    proxy.set_plan(f"/bkt/{keys[2]}", ["truncate"] * 10)
    proxy.set_plan(f"/bkt/{keys[3]}", ["404"])
    proxy.set_plan(f"/bkt/{keys[4]}", ["403"] * 10)
    cache = tmp_path / "cache"
    with running_sampler(cache, "s3://bkt", "--endpoint-url", proxy.endpoint, "--retries", "3",
                         env=s3_env(s3.endpoint) | FAST) as sp:
        wait_until(lambda: sp.stats()["samples"] == len(objects) - 5
                   and sp.stats()["skipped_total"] == 5, what="the rest fetched, five skipped")
        log = sp.log_text()
    assert sample_keys(cache) == set(keys[5:])
    # A 5xx points at the remote as a whole: with no later answer to tell it from an outage's, the
    # key is fetched once more (docs/sampler.md, "Downloads"), each fetch bounded by --retries.
    fetches = {keys[0]: 2, keys[1]: 1, keys[2]: 1}
    for key in keys[:3]:
        assert proxy.gets[f"/bkt/{key}"] == 3 * fetches[key], f"{key}: attempts are bounded by --retries"
        assert f"skipping '{key}': gave up after 3 attempts" in log
    assert proxy.gets[f"/bkt/{keys[3]}"] == 1, "a missing object is not retried"
    assert f"skipping '{keys[3]}': NotFound: {keys[3]}: HTTP 404 NoSuchKey" in log
    # Denied: the presigned GET's 403 goes to botocore (another signature might be accepted),
    # whose 403 is final: one attempt of two GETs, not retried.
    assert proxy.gets[f"/bkt/{keys[4]}"] == 2, "an object access is denied to is not retried"
    assert f"skipping '{keys[4]}': Denied: " in log and "AccessDenied" in log
    assert "presigned GETs refused" not in log, "botocore was refused too: the fast path stays"
    assert "X-Amz-Signature" not in log, "signed URLs are never logged"
    verify_cache(cache, objects)
    with Store(cache) as store:
        skipped = {c.key for _, c in store.candidates(after_rank=None, limit=100)}
        assert not skipped & set(keys[:5]), "skipped keys are not fetched again in this cache"


def test_refused_presigned_gets_fall_back_to_signed_requests(
    s3: S3Server, proxy: FaultProxy, tmp_path: Path
) -> None:
    objects = random_objects(20, 10_000)
    put_objects(s3, "bkt", objects)
    proxy.refuse_presigned = True
    proxy.set_plan(f"/bkt/{sorted(objects)[0]}", ["503"])  # faults still apply on the slow path
    cache = tmp_path / "cache"
    with running_sampler(cache, "s3://bkt", "--endpoint-url", proxy.endpoint,
                         env=s3_env(s3.endpoint) | FAST) as sp:
        wait_until(lambda: sp.stats()["samples"] == len(objects), what="every object")
        log = sp.log_text()
    assert "presigned GETs refused (HTTP 403 AccessDenied); using botocore for every GET" in log
    assert "X-Amz-Signature" not in log, "signed URLs are never logged"
    assert verify_cache(cache, objects) == len(objects)
    assert proxy.injected["503"] == 1


@pytest.mark.parametrize("fault", ["500", "reset"])  # a 503 SlowDown is throttling, not an outage
def test_an_outage_pauses_sampling_instead_of_skipping_everything(
    s3: S3Server, proxy: FaultProxy, tmp_path: Path, fault: str
) -> None:
    objects = random_objects(40, 5_000)
    put_objects(s3, "bkt", objects)
    proxy.down = fault
    cache = tmp_path / "cache"
    with running_sampler(cache, "s3://bkt", "--endpoint-url", proxy.endpoint, "--retries", "2",
                         "--concurrency", "4", env=s3_env(s3.endpoint) | FAST) as sp:
        wait_until(lambda: "remote unavailable" in sp.log_text(), what="the outage noticed")
        gets = sum(proxy.gets.values())
        wait_until(lambda: sum(proxy.gets.values()) > gets, what="probing after the pause")
        skipped = sp.stats()["skipped_total"]
        assert skipped == 0, "the keys that failed before the outage was recognised are held, not skipped"
        proxy.down = None
        wait_until(lambda: sp.stats()["samples"] == len(objects) - skipped, what="the rest after the outage")
        assert "remote reachable again" in sp.log_text()
        assert sp.stats()["skipped_total"] == skipped
    verify_cache(cache, objects)


def test_sigterm_with_stalled_downloads_is_clean_and_quick(
    s3: S3Server, proxy: FaultProxy, tmp_path: Path
) -> None:
    objects = random_objects(3, 4 << 20)
    put_objects(s3, "bkt", objects)
    for key in objects:
        proxy.set_plan(f"/bkt/{key}", ["stall"])  # half the body, then silence
    cache = tmp_path / "cache"
    sp = start_sampler(cache, "s3://bkt", "--endpoint-url", proxy.endpoint, env=s3_env(s3.endpoint))
    try:
        wait_until(lambda: len(list((cache / "tmp").iterdir())) == 3, what="three stalled downloads")
    finally:
        started = time.monotonic()
        rc = sp.stop(timeout=15)
    assert rc == 0, sp.log_text()[-2000:]
    assert time.monotonic() - started < 5, "the supervisor kills a sampler that takes over 5 s"
    assert list((cache / "tmp").iterdir()) == []
    assert "stopped cleanly" in sp.log_text()
    verify_cache(cache, objects)
