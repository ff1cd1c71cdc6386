"""``benchmarks/scale.py`` at a toy size (seconds): the real sidecar against the synthetic S3
endpoint, every measurement taken, the output's shape, and nothing left behind. Its numbers mean
nothing here (docs/scale.md has the real ones); that each one is measured, does."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from epochfs.fuse.mounting import mount_table

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/fuse").exists(),
                       reason="needs root and /dev/fuse"),
]


def test_scale_measures_every_column_at_a_tiny_size(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    table = tmp_path / "scale.md"
    done = subprocess.run(
        [sys.executable, "-P", "-m", "epochfs.benchmarks.scale", "--sizes", "2500", "--samples", "200",
         "--classes", "10", "--dir", str(tmp_path / "work"), "--json", str(out), "--markdown", str(table)],
        capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [result] = json.loads(out.read_text())
    assert result["keys"] == 2500 and result["classes"] == 10 and result["samples"] == 200
    timings = ["first_sample_s", "epoch0_s", "cut_cli_s", "lookup_cut_s", "status_s", "scandir_s",
               "restart_sample_s", "restart_ready_s", "python_start_s"]
    assert all(math.isfinite(result[t]) and result[t] > 0 for t in timings), result
    assert result["first_sample_s"] <= result["epoch0_s"]
    assert result["scandir_files"] >= 200 and result["index_bytes"] > 0
    for process in ("supervisor", "sampler", "fuse"):
        assert result["rss_mb"][f"{process}@epoch0"] > 0 and result["rss_mb"][f"{process}@end"] > 0
    # Both starts listed (at least the 3 pages each; the listing's folder discovery adds requests);
    # every sample was one GET.
    assert result["server"]["list_pages"] >= 6 and result["server"]["errors"] == 0
    assert result["server"]["gets"] >= result["scandir_files"]
    lines = table.read_text().splitlines()
    assert lines[0].startswith("| keys | list floor (s) | first sample (s) | epoch 0 (s) |")
    assert lines[2].startswith("| 2500 | 0.06 |")
    assert "| 2500 |" in done.stdout
    assert not [m for m in mount_table() if m.mount_point.startswith(str(tmp_path))]
    assert list((tmp_path / "work").iterdir()) == []  # its scratch folder removed
