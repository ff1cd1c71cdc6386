"""``benchmarks/dashboard.py`` (issue 21, the dashboard's picture) at a toy size: a real sidecar, a
real Prometheus scraping it and a torch loop over the mount for a few seconds, then every panel of the
chart's dashboard queried with its own expressions and drawn into a PNG. The values mean nothing
here; that each panel is queried and reported, most with data, the PNG written, and nothing left
mounted or running, does. The template substitution runs without root."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from bench_helpers import ROOT, run_benchmark

from epochfs.benchmarks import _dashboard_queries as dashboard  # the rules split from dashboard.py
from epochfs.fuse.mounting import mount_table

DASHBOARD = ROOT / "helm" / "epochfs" / "dashboards" / "epochfs.json"

REAL_RUN = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/fuse").exists(),
                       reason="needs root and /dev/fuse"),
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="needs the prometheus binary (Debian package)"),
    pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                       reason="needs matplotlib (bench extra)"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
]
"""What the real run needs (the substitution tests need none of it)."""


def needs_a_real_run(test: Callable[..., None]) -> Callable[..., None]:
    for mark in REAL_RUN:
        test = mark(test)
    return test


def processes_naming(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (a scratch path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


def test_template_variables_and_legends_as_grafana_fills_them() -> None:
    variables = {"namespace": "bench", "pod": "(a|b\\\\.c)", "__rate_interval": "4s", "__range": "90s"}
    expr = ('sum by (pod) (rate(m_total{namespace=~"$namespace", pod=~"${pod}"}[$__rate_interval])) '
            '+ [[namespace]] $__range')
    assert dashboard.substitute(expr, variables) == (
        'sum by (pod) (rate(m_total{namespace=~"bench", pod=~"(a|b\\\\.c)"}[4s])) + bench 90s')
    assert dashboard.prom_regex_escape("pod.1") == "pod\\\\.1"
    assert dashboard.grafana_rate_interval(1.0, 1.0) == 4.0
    assert dashboard.grafana_rate_interval(1.0, 5.0) == 6.0
    assert dashboard.duration(4.0) == "4s" and dashboard.duration(0.5) == "500ms"
    assert dashboard.legend("{{pod}} MB/s ({{ op }})", {"pod": "p", "op": "read"}, "e") == "p MB/s (read)"
    assert dashboard.legend(None, {"__name__": "m", "pod": "p"}, "e") == 'm{pod="p"}'
    assert dashboard.legend("", {}, "the expr") == "the expr"


def test_every_panel_of_the_chart_dashboard_is_found_in_reading_order() -> None:
    doc = json.loads(DASHBOARD.read_text())
    found = dashboard.panels_of(doc)
    with_targets = [p for p in doc["panels"] if p.get("targets") and p.get("type") != "row"]
    assert sorted(p["title"] for p in found) == sorted(p["title"] for p in with_targets)
    places = [(p["gridPos"]["y"], p["gridPos"]["x"]) for p in found]
    assert places == sorted(places)


@pytest.mark.long
@needs_a_real_run
def test_dashboard_picture_from_a_real_prometheus_at_a_tiny_size(tmp_path: Path) -> None:
    png, summary, work = tmp_path / "dashboard.png", tmp_path / "dashboard.json", tmp_path / "work"
    # 3 s of training (about 15 epochs of 171 samples here) and 1 s of tail: 2-3 scrapes in each
    # panel's 2 s rate window from the first epoch on; 6 s and 2 s gave the same panels with data.
    # Steps of 20 ms and one loader worker: the panels need reads and reports, not the most of
    # them (2 ms steps and two workers read twice the epochs for the same panels, at a second
    # more of CPU).
    args = ["--samples", "600", "--capacity", "1Mi", "--max-rate", "1Mi", "--seconds", "3", "--tail", "1",
            "--scrape-interval", "0.5", "--step-ms", "20", "--workers", "1", "--width", "10", "--dpi", "50",
            "--dir", str(work), "--out", str(png), "--summary", str(summary)]
    done = run_benchmark([sys.executable, "-P", "-m", "epochfs.benchmarks.dashboard", *args], timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000  # panels drawn, not an empty canvas

    doc = json.loads(summary.read_text())
    titles = [p["title"] for p in dashboard.panels_of(json.loads(DASHBOARD.read_text()))]
    assert [p["title"] for p in doc["panels"]] == titles  # every panel, in the dashboard's order
    with_data = [p for p in doc["panels"] if p["has_data"]]
    assert len(with_data) >= 0.75 * len(titles), doc["panels_without_data"]
    assert doc["panels_without_data"] == [p["title"] for p in doc["panels"] if not p["has_data"]]
    for p in doc["panels"]:
        assert p["series"] == sum(len(t["series"]) for t in p["targets"])
        for t in p["targets"]:
            assert "$" not in t["query"], t  # every template variable substituted
            if not any(s["finite"] for s in t["series"]):
                assert t["why_empty"], t  # a target without data says why
    assert doc["variables"]["namespace"] == "bench" and doc["variables"]["pod"] == "trainer-0"
    assert doc["variables"]["__rate_interval"] == "2s"  # max(4 x 0.5 s, 0.5 s step + 0.5 s)
    assert doc["scrapes"] >= 5 and doc["workload"]["epochs"] >= 1
    by_title = {p["title"]: p for p in doc["panels"]}
    assert by_title["Cache occupancy"]["has_data"]  # a gauge the sidecar always exports
    assert "Served to trainers" in done.stdout and "panels without data:" in done.stdout

    assert not [m for m in mount_table() if m.mount_point.startswith(str(tmp_path))]
    assert not work.exists()  # the scratch folder (dataset, cache, tsdb) removed
    assert processes_naming(str(tmp_path)) == []  # the sidecar, its children and Prometheus gone
