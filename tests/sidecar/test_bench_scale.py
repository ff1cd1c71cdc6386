"""``benchmarks/scale.py`` at a toy size (seconds): the real sidecar against the synthetic S3
endpoint, every measurement taken, the output's shape, and nothing left behind. Its numbers mean
nothing here (docs/scale.md has the real ones); that each one is measured, does."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest
from bench_helpers import run_benchmark

from epochfs.fuse.mounting import mount_table

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/fuse").exists(),
                       reason="needs root and /dev/fuse"),
]


@pytest.mark.long
def test_scale_measures_every_column_at_a_tiny_size(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    table = tmp_path / "scale.md"
    # 0.4 s a listing page over 25 class folders, four listers: the listing (about 100 pages with
    # the planner's small first pages and gallops) runs on for about 4 s after epoch 0, so epoch 0
    # comes while it still runs and the first window is measured (at 1 s a page the listing held
    # the whole run for 25 s); 5,000 keys (more than the 64 MiB cache holds) so that the restart
    # finds keys to fetch; 1 s fetch windows (each is two readings of the index and the CPU times).
    done = run_benchmark(
        [sys.executable, "-P", "-m", "epochfs.benchmarks.scale", "--sizes", "5000", "--samples", "200",
         "--classes", "25", "--list-latency", "0.4", "--fetch-window", "1", "--dir", str(tmp_path / "work"),
         "--json", str(out), "--markdown", str(table), "--plot", str(tmp_path / "scale.png")],
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [result] = json.loads(out.read_text())
    assert result["keys"] == 5000 and result["classes"] == 25 and result["samples"] == 200
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
    # The fetch windows: one while the listing ran (it ends early when the listing completes), one
    # of the full length after it; rates and CPU shares measured in both.
    during, after = result["while_listing"], result["after_listing"]
    assert during["seconds"] > 0 and after["seconds"] >= 1, (during, after)
    for window in (during, after):
        assert all(math.isfinite(window[k]) and window[k] >= 0 for k in
                   ("samples_per_s", "keys_per_s", "sampler_cpu", "endpoint_cpu")), window
    # After the listing the sampler fetches at full speed; while it runs the fetch order may wait
    # (the skew's cap holds the walk and the owed keys) and the window be short, so its CPU can
    # read 0 at the clock tick's resolution (seen once under load).
    assert after["sampler_cpu"] > 0
    assert after["keys_per_s"] == 0  # the catalog is complete
    assert (tmp_path / "scale.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # --plot: the curves drawn
    lines = table.read_text().splitlines()
    assert lines[0].startswith("| keys | list floor (s) | first sample (s) | epoch 0 (s) |")
    assert lines[0].endswith("| fetch while listing (/s) | fetch after listing (/s) | listing (keys/s) |")
    assert lines[2].startswith("| 5k | 2.00 |")  # the list floor: 5 pages of 0.4 s
    assert "sampler / endpoint CPU while listing (cores) | after |" in lines[4]
    assert "| 5k |" in done.stdout
    assert not [m for m in mount_table() if m.mount_point.startswith(str(tmp_path))]
    assert list((tmp_path / "work").iterdir()) == []  # its scratch folder removed
