"""The keys that failed in the run-up to an outage (before the breaker had seen enough failures in
a row to call it one) are kept with the outage's, fetched once the remote is back, never skipped.

A reviewer answered every GET with 500 for 10 s: the 4 keys given up before the breaker opened
(``OUTAGE_AFTER`` = 5) were skipped for good, though DESIGN.md says keys are owed, never left. The
breaker now holds such keys until the streak tells an outage (kept) from bad objects (skipped).
Real parts: the sampler's loop, its breaker and the store; the remote is the in-memory one, down
while ``down`` is set.
"""

from __future__ import annotations

from pathlib import Path

from common import wait_until
from inprocess import objects_of, sampling, settings_for

from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.sampler.breaker import OutageBreaker


def test_the_keys_of_an_outages_run_up_are_fetched_when_the_remote_is_back(tmp_path: Path) -> None:
    objects = objects_of(20, 4096)
    remote = MemoryRemote(objects)
    remote.down.set()
    breaker = OutageBreaker(after=5, pause=(0.2, 0.5))
    cache = tmp_path / "cache"
    settings = settings_for(cache, "--capacity", "4Mi", "--retries", "2")
    with sampling(cache, remote, settings, breaker=breaker) as (store, _):
        wait_until(lambda: breaker.open, timeout=30, what="the outage recognised")
        assert store.stats().skipped_total == 0, "the run-up's keys are held, not skipped"
        remote.down.clear()
        wait_until(lambda: store.stats().samples == 20, timeout=30, what="every key once the remote is back")
        assert store.stats().skipped_total == 0
        assert store.stats().failed_total == 0


def test_a_failure_of_a_bad_object_is_still_skipped_once_the_remote_answers(tmp_path: Path) -> None:
    """One object answered 5xx while the others come through: no outage, so it is skipped (the
    held key is handed back by the next success)."""
    from epochfs.sidecar.remote.base import Unavailable

    objects = objects_of(10, 4096)
    remote = MemoryRemote(objects)
    bad = "train/0003.bin"
    remote.fail(bad, *[Unavailable(f"{bad}: HTTP 500") for _ in range(10)])
    cache = tmp_path / "cache"
    settings = settings_for(cache, "--capacity", "4Mi", "--retries", "2", "--concurrency", "1")
    with sampling(cache, remote, settings) as (store, _):
        wait_until(lambda: store.stats().samples == 9 and store.stats().skipped_total == 1,
                   timeout=30, what="the good objects fetched, the bad one skipped")
