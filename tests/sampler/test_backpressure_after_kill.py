"""A sampler killed (-9) while paused leaves its backpressure reason in the index; the next sampler
on the cache owns that flag from its start, so once it goes on (here: started with a --capacity
the whole dataset fits, the way an operator ends backpressure) ``epochfs status`` and the store's
``epochfs_backpressure`` / ``epochfs_disk_full`` gauges say 0, not the dead run's pause for ever.

Real parts: the ``epochfs sample`` and ``epochfs status`` commands and a file:// remote. The
"cache full" case is a real kill in backpressure; the "disk full" reasons are what a run killed
on a full volume leaves in the index (and "1", an older index's "cache full"), written there
before the start (filling a volume to its last byte needs a tmpfs of its own:
tests/sampler/test_full_volume_after_kill.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from common import wait_until
from sampler_helpers import EPOCHFS, SamplerProc, start_sampler

from epochfs.sidecar.metrics import StoreCollector
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.stats import CACHE_FULL, DISK_FULL

SIZE = 10_000
COUNT = 40


def _remote(tmp_path: Path) -> str:
    source = tmp_path / "src"
    source.mkdir()
    for i in range(COUNT):
        (source / f"{i:03d}.bin").write_bytes(bytes([i]) * SIZE)
    return f"file://{source}"


def _idle_with_everything(sp: SamplerProc, runs_before: int) -> bool:
    """The restarted sampler holds every sample and has said so in an ``idle:`` progress line."""
    if not sp.alive():
        raise AssertionError(f"sampler exited {sp.proc.returncode}:\n{sp.log_text()[-3000:]}")
    return sp.stats()["samples"] == COUNT and sp.log_text().count(" idle: ") > runs_before


def _status_json(cache: Path) -> dict[str, object]:
    done = subprocess.run([EPOCHFS, "status", "--cache", str(cache), "--json"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    doc: dict[str, object] = json.loads(done.stdout)
    return doc


def _store_gauges(cache: Path) -> dict[str, float]:
    """The store's gauges as ``/metrics`` exports them (the collector reads the index at scrape)."""
    with Store(cache) as store:
        return {s.name: s.value for family in StoreCollector(stats=store.stats).collect()
                for s in family.samples}


def _assert_not_paused(sp: SamplerProc, cache: Path) -> None:
    runs_before = sp.log_text().count(" idle: ")
    wait_until(lambda: _idle_with_everything(sp, runs_before), timeout=60,
               what="the restarted sampler idle with every sample cached")
    doc = _status_json(cache)
    assert doc["sampler_running"] is True
    assert doc["backpressure"] is False, doc
    assert doc["backpressure_reason"] is None, doc
    gauges = _store_gauges(cache)
    assert gauges["epochfs_backpressure"] == 0, gauges
    assert gauges["epochfs_disk_full"] == 0, gauges


def test_a_restart_after_kill_in_backpressure_clears_it(tmp_path: Path) -> None:
    remote = _remote(tmp_path)
    cache = tmp_path / "cache"
    # Ten samples fit and no epoch is cut: nothing may be evicted, so the sampler pauses.
    sp = start_sampler(cache, remote, "--capacity", str(10 * SIZE), "--headroom", "0.5",
                       "--concurrency", "4", "--list-process", "0")
    try:
        wait_until(lambda: sp.stats()["backpressure"] and sp.stats()["samples"] == 10,
                   timeout=60, what="the first sampler in backpressure")
    finally:
        assert sp.stop(signal.SIGKILL) == -signal.SIGKILL
    with Store(cache) as store:
        assert store.stats().backpressure_reason == CACHE_FULL, "the kill left the pause recorded"
    sp = start_sampler(cache, remote, "--capacity", "1Mi", "--list-process", "0")
    try:
        _assert_not_paused(sp, cache)
        # The line docs/metrics.md quotes for an operator who wonders where the pause went.
        assert f"clearing the backpressure the last run left in the index ({CACHE_FULL})" in sp.log_text()
    finally:
        assert sp.stop() == 0, sp.log_text()[-3000:]


@pytest.mark.parametrize("left", [
    DISK_FULL,
    f"{DISK_FULL}: the cache's filesystem can hold no sample (0 B of --capacity 1.0 MiB)",
    "1",  # an older index's word for "cache full"
])
def test_a_restart_clears_a_pause_a_killed_run_left(tmp_path: Path, left: str) -> None:
    remote = _remote(tmp_path)
    cache = tmp_path / "cache"
    with Store(cache, create=True) as store:
        store.set_backpressure(left)  # the index as a run killed while paused leaves it
        assert store.stats().backpressure
    sp = start_sampler(cache, remote, "--capacity", "1Mi", "--list-process", "0")
    try:
        _assert_not_paused(sp, cache)
    finally:
        assert sp.stop() == 0, sp.log_text()[-3000:]
