"""The real Prometheus server scraping a running sidecar that samples from moto's S3 server.

Prometheus (Debian package ``prometheus``) is started by the test on 127.0.0.1 with a 1 s scrape
interval and static labels ``namespace``/``pod`` as Kubernetes service discovery would add. After a
short run, every expression of every dashboard panel, sent to the HTTP query API, must return a
result, and the occupancy Prometheus shows must match ``epochfs status --json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from common import ROOT, S3Server, free_port, put_objects, random_objects, stop_process, wait_until
from sidecar_helpers import EPOCHFS, running_sidecar

PROMETHEUS = shutil.which("prometheus")
DASHBOARD = ROOT / "helm" / "epochfs" / "dashboards" / "epochfs.json"

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
    pytest.mark.skipif(PROMETHEUS is None, reason="needs the prometheus binary (Debian package)"),
]

NAMESPACE, POD = "training", "job-0-sidecar"


@contextlib.contextmanager
def prometheus(tmp_path: Path, target_port: int) -> Iterator[str]:
    """A Prometheus server scraping ``127.0.0.1:target_port`` twice a second; yields its base URL."""
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 500ms\n  evaluation_interval: 500ms\n"
        "scrape_configs:\n  - job_name: epochfs\n    scrape_timeout: 450ms\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{target_port}']\n"
        f"        labels: {{namespace: {NAMESPACE}, pod: {POD}}}\n"
    )
    log = tmp_path / "prometheus.log"
    assert PROMETHEUS is not None
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    failed = True
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {log.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                return bool(urllib.request.urlopen(base + "/-/ready", timeout=2).status == 200)
            return False
        wait_until(ready, timeout=60, what="prometheus ready")
        yield base
        failed = False
    finally:
        stop_process(proc, timeout=15)
        if failed:
            sys.stderr.write(f"--- prometheus log ---\n{log.read_text(errors='replace')[-5000:]}\n")


def query(base: str, expr: str) -> list[dict[str, Any]]:
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    doc = json.loads(urllib.request.urlopen(url, timeout=10).read())
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def grafana_to_promql(expr: str) -> str:
    """Substitute the dashboard's template variables as Grafana would for this pod."""
    return (expr.replace("$__rate_interval", "5s").replace("$namespace", NAMESPACE)
            .replace("$pod", POD))


@pytest.mark.long
def test_every_dashboard_expression_returns_a_result(s3: S3Server, tmp_path: Path) -> None:
    objects = random_objects(120, 32 * 1024)  # 3.75 MiB remote, 2 MiB cache: evictions
    put_objects(s3, "data", objects)
    # A cut every second (no reader pins those epochs, so older samples become evictable); epochs
    # hold at most 512 KiB so pinned ones never fill the cache.
    extra = ("--capacity", "2Mi", "--headroom", "0.75", "--min-samples", "5", "--concurrency", "4",
             "--max-rate", "2Mi", "--cut-interval", "1")
    with running_sidecar(tmp_path, remote="s3://data", endpoint=s3.endpoint, extra=extra) as car, \
            prometheus(tmp_path, car.port) as prom:
        # Traffic for every panel: opens of samples (served), a client report, cuts, evictions.
        epoch0 = car.mount / "epoch-0"
        wait_until(epoch0.is_dir, timeout=30, what="epoch-0")
        for p in sorted(epoch0.rglob("*.bin")):
            assert p.read_bytes() == objects[str(p.relative_to(epoch0))]
        req = urllib.request.Request(
            car.base + "/v1/client-report", method="POST",
            data=json.dumps({"samples": 10, "bytes": 327680, "wait_seconds": 0.5}).encode(),
        )
        assert urllib.request.urlopen(req, timeout=5).status == 204
        wait_until(lambda: query(prom, f'epochfs_evicted_samples_total{{pod="{POD}"}} > 0'),
                   timeout=60, what="evictions seen by prometheus")
        wait_until(lambda: query(prom, "count_over_time(epochfs_cache_bytes[1m]) >= 5"), timeout=30,
                   what="five scrapes")
        doc = json.loads(DASHBOARD.read_text())
        exprs = [(p["title"], t["expr"]) for p in doc["panels"] for t in p["targets"]]
        empty = [(title, expr) for title, expr in exprs if not query(prom, grafana_to_promql(expr))]
        assert not empty, f"expressions without a result: {empty}"
        for var in doc["templating"]["list"]:
            if var["type"] == "query":
                values = urllib.request.urlopen(
                    prom + "/api/v1/label/" + ("namespace" if var["name"] == "namespace" else "pod")
                    + "/values", timeout=10).read()
                assert (NAMESPACE if var["name"] == "namespace" else POD) in json.loads(values)["data"]

        # Occupancy in Prometheus equals `epochfs status --json` once sampling is idle (the cache
        # is full and pinned epochs hold the rest, or the catalog is exhausted).
        def status() -> dict[str, Any]:
            out = subprocess.run([*EPOCHFS, "status", "--cache", str(car.cache), "--json"],
                                 capture_output=True, text=True, check=True)
            return dict(json.loads(out.stdout))

        percent_expr = next(t["expr"] for p in doc["panels"] for t in p["targets"]
                            if p["title"] == "Cache occupancy (% of capacity)")

        def matches() -> bool:
            before = status()
            got = query(prom, f'epochfs_cache_bytes{{pod="{POD}"}}')
            pct = query(prom, grafana_to_promql(percent_expr))
            after = status()
            if before["cache_bytes"] != after["cache_bytes"] or not got or not pct:
                return False
            want_pct = 100 * after["cache_bytes"] / after["capacity_bytes"]
            return (float(got[0]["value"][1]) == after["cache_bytes"]
                    and abs(float(pct[0]["value"][1]) - want_pct) < 1e-6)

        wait_until(matches, timeout=30, interval=0.5, what="prometheus occupancy == epochfs status")
