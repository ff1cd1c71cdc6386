"""``epochfs bench folderview`` at toy sizes (seconds): its numbers mean nothing here, its output
format and clean-up do (nothing left mounted or on disk, the short link root's bind included)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from bench_helpers import bench, decoy

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="drops the page cache and mounts the FUSE view: needs root and /dev/fuse"),
]


def binds() -> set[str]:
    return {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith("/run/efb")}


def test_folderview_benchmark_runs_and_leaves_nothing(tmp_path: Path) -> None:
    before = binds()
    work = tmp_path / "work"
    out = tmp_path / "result.json"
    result = bench("folderview", "--args", "--dir", str(work), "--entries", "300", "--wait", "300",
                   "--big", "2", "--small", "8", "--repeat", "1", "--json", str(out),
                   cwd=decoy(tmp_path / "elsewhere"), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    text = result.stdout
    for label in ("short", "long"):
        assert re.search(rf"^publish +300 entries, link root {label} +\(\d+ B targets\): +\d+\.\d\d s "
                         r"\( *\d+ entries/s; CPU +\d+\.\d\d s\), bare links +\d+\.\d\d s \(\d+\.\d\dx\), "
                         r"retire +\d+\.\d\d s", text,
                         re.M), text
    assert re.search(r"^wait +300 entries: ask -> epoch-N visible \d+\.\d{3} s \(\d+\.\d{3}-\d+\.\d{3}\); "
                     r"publisher CPU per epoch \d+\.\d\d s \([\d.]+ us/entry\), peak memory \d+ MB; "
                     r"disk per epoch [\d.]+ MB, \d+ inodes$", text, re.M), text
    assert re.search(r"^wait +300 entries, FUSE view: ask \(lookup\) -> epoch-N \d+\.\d{3} s", text,
                     re.M), text
    for size, count in (("4MiB", 2), ("64KiB", 8)):
        for view in ("folder", "fuse"):
            assert re.search(rf"^ *{size} x{count} +procs=1 +{view} +first cold +\d+ \(\d+\.\d\dx\) +first "
                             rf"warm +\d+ \(\d+\.\d\dx\) +repeat +\d+ \(\d+\.\d\dx\) MB/s$", text, re.M), text
    doc = json.loads(out.read_text())
    assert [r["link_root"] for r in doc["publish"]] == ["short", "long"]
    assert doc["publish"][0]["target_bytes"] < 60 <= doc["publish"][1]["target_bytes"]
    assert [r["size"] for r in doc["reads"]] == ["4MiB", "64KiB"]
    assert [r["entries"] for r in doc["wait"]] == [300] and doc["wait"][0]["wait_s"] > 0
    assert doc["wait"][0]["publisher_peak_rss_mb"] > 0
    assert not work.exists()
    after = binds()
    assert str(work) not in Path("/proc/self/mountinfo").read_text()
    assert after <= before, after - before  # the short link root's bind is gone
