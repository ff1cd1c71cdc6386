"""On a volume too small for any sample, ``epochfs_cache_capacity_bytes`` (and status's
``capacity_bytes``) show the budget the disk allows, below ``--capacity``, for as long as the volume
is short, as docs/metrics.md and the EpochfsDiskFull runbook say; ``--capacity`` once it has grown.

Why: the dashboard's fill ratio and the runbook's first check read that gauge. A 3 MiB cache
volume under ``--capacity 20Mi`` paused as "disk full: the cache's filesystem can hold no sample"
while the gauge still said 20 MiB: 0% of a budget the volume can never hold, beside a full disk.

Real parts: a 3 MiB tmpfs as the cache volume (remounted at 64 MiB under the running sidecar), the
real ``epochfs sidecar`` on a ``file://`` remote, scraped on ``/metrics``, and ``epochfs status``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from common import wait_until
from inprocess import small_volume
from sidecar_helpers import EPOCHFS, Sidecar, running_sidecar

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="mounts a tmpfs and FUSE (root)"),
]

CAPACITY = 20 << 20
OBJECTS = 12


def _gauges(car: Sidecar) -> dict[str, float]:
    """The unlabelled samples of one scrape of ``/metrics`` (none while it does not answer yet:
    the sidecar is not ready before its first epoch, which this volume never gets)."""
    from prometheus_client.parser import text_string_to_metric_families

    code, body = car.get("/metrics")
    if code != 200:
        return {}
    return {s.name: float(s.value) for family in text_string_to_metric_families(body.decode())
            for s in family.samples if not s.labels}


def test_the_capacity_gauge_shows_what_a_volume_too_small_for_any_sample_allows(tmp_path: Path) -> None:
    remote = tmp_path / "data"
    remote.mkdir()
    for i in range(OBJECTS):
        (remote / f"{i:03d}.bin").write_bytes(bytes([i]) * (64 << 10))
    with small_volume(tmp_path / "cache", "3m") as cache, running_sidecar(
            tmp_path, remote=f"file://{remote}", endpoint="", expect_ready=False,
            extra=("--capacity", "20Mi")) as car:
        assert car.cache == cache
        wait_until(lambda: _gauges(car).get("epochfs_disk_full") == 1, timeout=60,
                   what="the pause for a volume that holds no sample")
        short = _gauges(car)
        assert short["epochfs_cache_capacity_bytes"] < CAPACITY, (
            f"epochfs_cache_capacity_bytes {short['epochfs_cache_capacity_bytes']:.0f} (--capacity) "
            "while the volume can hold no sample")
        assert short["epochfs_cache_capacity_bytes"] >= 1
        out = subprocess.run([*EPOCHFS, "status", "--cache", str(cache), "--json"],
                             capture_output=True, text=True, timeout=60, check=True)
        status = json.loads(out.stdout)
        assert status["capacity_bytes"] == short["epochfs_cache_capacity_bytes"], status
        assert "can hold no sample" in (status.get("backpressure_reason") or ""), status
        # The volume grows under the sidecar (an expanded volume): the budget is --capacity again.
        subprocess.run(["mount", "-o", "remount,size=64m", str(cache)], check=True)
        wait_until(lambda: _gauges(car).get("epochfs_cache_samples") == OBJECTS, timeout=60,
                   what="every object fetched once the volume grew")
        grown = _gauges(car)
        assert grown["epochfs_disk_full"] == 0
        assert grown["epochfs_cache_capacity_bytes"] == CAPACITY
