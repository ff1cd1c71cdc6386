"""``epochfs_cache_capacity_bytes`` is the budget in force, and says so.

The sampler records the budget the disk allows when the cache's filesystem cannot hold
``--capacity`` (snapshot mode, docs/sampler.md "Disk space"): epochs are cut to it and status shows
it. The gauge reads the same store value, so on a volume short of room it is far below
``--capacity`` (a reviewer saw 1 B with ``--capacity 20Mi`` on a nearly full tmpfs), while its
help text and docs/metrics.md called it ``--capacity``, and the EpochfsDiskFull runbook compared
``df`` with it. The alerts and the dashboard want the budget in force (room left in the cache,
occupancy), so the gauge stays that and its help, its docs row and the runbook say what it is.

A real small tmpfs, the real sampler loop in-process, the real registry the sidecar serves.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from common import ROOT, wait_until
from inprocess import objects_of, sampling, settings_for, small_volume
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from epochfs.sidecar import metrics
from epochfs.sidecar.remote.testing import MemoryRemote

GAUGE = "epochfs_cache_capacity_bytes"
METRICS_DOC = ROOT / "docs" / "metrics.md"


def _gauge(store_stats: object) -> tuple[float, str]:
    """The gauge's value and HELP as the sidecar's /metrics serves them."""
    registry = metrics.sidecar_registry(stats=store_stats,  # type: ignore[arg-type]
                                        multiproc_dir=None,
                                        sidecar=metrics.SidecarMetrics(registry=CollectorRegistry()))
    [family] = [f for f in text_string_to_metric_families(generate_latest(registry).decode())
                if f.name == GAUGE]
    [sample] = family.samples
    return sample.value, family.documentation


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")
def test_the_capacity_gauge_is_the_budget_the_disk_allows_and_its_help_says_so(tmp_path: Path) -> None:
    remote = MemoryRemote(objects_of(160, 256 * 1024))
    with small_volume(tmp_path / "vol", "32m") as vol:
        cache = vol / "cache"
        settings = settings_for(cache, "--capacity", "1Gi", "--keep-epochs", "1")
        with sampling(cache, remote, settings) as (store, _):
            wait_until(lambda: store.stats().backpressure_reason == "disk full", timeout=30,
                       what="the budget clamped to the volume")
            value, help_text = _gauge(store.stats)
            in_force = store.stats().capacity_bytes
    assert value == in_force < 32 * 1024 * 1024 < settings.capacity
    assert "(--capacity)" not in help_text and "in force" in help_text, help_text
    assert "disk allows" in help_text, help_text


def test_the_docs_call_the_gauge_the_budget_in_force() -> None:
    text = METRICS_DOC.read_text()
    [row] = [line for line in text.splitlines() if line.startswith(f"| `{GAUGE}` |")]
    assert row.split("|")[4].strip() != "`--capacity`", row
    assert "in force" in row and "disk allows" in row, row
    runbook = text.split("### EpochfsDiskFull", 1)[1].split("\n### ", 1)[0]
    # df is compared with --capacity itself; the gauge is said to be what the disk allows then.
    assert re.search(r"df -h[^\n]*\n?[^\n]*against\s+`--capacity`", runbook), runbook
    assert "budget the disk allows" in runbook, runbook
