"""``epochfs_remote_objects_total{result="failed"}`` counts the keys the sampler gives up, not the
downloads that gave up on a key the loop then keeps.

docs/metrics.md: "objects given up after their last attempt (they are also counted as skipped)".
Before: the downloader counted a failure as soon as a download spent its attempts, and the loop then
kept many of those keys (an outage's, held by the breaker "remote unavailable ... keys kept"; one
waiting for a repair in place): during a reviewer's 60 s moto outage ``failed`` reached 24 while 4
keys were skipped and status.json's ``failed_total`` said 4. Now it is counted when the key is
skipped, as the store counts ``failed_total``.

The sampler's loop in-process over the in-memory remote (its ``down`` switch is an outage:
connection refused on every GET), the metric read from the process's registry as the supervisor's
merge reads the sampler's.
"""

from __future__ import annotations

from pathlib import Path

from common import wait_until
from inprocess import objects_of, sampling, settings_for
from prometheus_client import REGISTRY

from epochfs.sidecar.remote.errors import NotFound
from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.sampler.breaker import OutageBreaker


def _failed() -> float:
    return REGISTRY.get_sample_value("epochfs_remote_objects_total", {"result": "failed"}) or 0.0


def test_keys_kept_through_an_outage_are_not_counted_failed(tmp_path: Path) -> None:
    objects = objects_of(30)
    remote = MemoryRemote(objects)
    remote.down.set()
    breaker = OutageBreaker(after=3, pause=(0.05, 0.2))
    settings = settings_for(tmp_path / "cache", "--retries", "1", "--concurrency", "1")
    before = _failed()
    with sampling(tmp_path / "cache", remote, settings, breaker=breaker) as (store, _):
        wait_until(lambda: breaker.open, timeout=20, what="the breaker to open")
        # Kept keys tried again, and given up by their downloads again, while the remote is down.
        wait_until(lambda: sum(remote.opens.values()) >= breaker.after + 6, timeout=20,
                   what="kept keys tried again while down")
        stats = store.stats()
        assert stats.skipped_total == stats.failed_total == 0, \
            "the failures before the outage was seen are kept with it, not skipped"
        assert _failed() - before == stats.failed_total, "a key kept through the outage is no failure"
        remote.down.clear()
        wait_until(lambda: store.stats().samples == 30 - stats.skipped_total, timeout=20,
                   what="the rest fetched")
        assert _failed() - before == store.stats().failed_total == 0


def test_a_bad_object_skipped_is_counted_failed_once(tmp_path: Path) -> None:
    objects = objects_of(6)
    keys = sorted(objects)
    remote = MemoryRemote(objects)
    remote.fail(keys[0], NotFound(f"{keys[0]}: HTTP 404 NoSuchKey"))
    settings = settings_for(tmp_path / "cache", "--concurrency", "1")
    before = _failed()
    with sampling(tmp_path / "cache", remote, settings) as (store, _):
        wait_until(lambda: store.stats().samples == 5, timeout=20, what="the other five admitted")
        stats = store.stats()
        assert stats.skipped_total == stats.failed_total == 1
        assert _failed() - before == 1
