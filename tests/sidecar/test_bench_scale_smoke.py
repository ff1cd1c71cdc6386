"""The scale benchmark's documented smoke run (``benchmarks/scale.py``'s docstring: ``--sizes 2000
--samples 200``) ends, with a restart that fetched. Its 2,000 keys of 16 KiB (31 MiB) fit the 64 MiB
cache the benchmark used to give every size, so the first start fetched the whole remote before the
restart, and the restart waited its whole ``--timeout`` (3,600 s by default) for a sample that
never came; the same at 10k keys, ``epochfs bench scale``'s first size. The capacity is now kept
below the remote's bytes, and the restart gets room for new samples."""

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
def test_the_documented_smoke_run_ends_with_a_restart_that_fetched(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    # The docstring's command as written (1 s fetch windows: each of the three starts runs as in the
    # default's 10 s ones, whose length only sets how long the rates are counted), with a --timeout
    # short enough that a wait for a sample that never comes fails the test in a minute, not an hour.
    done = run_benchmark(
        [sys.executable, "-P", "-m", "epochfs.benchmarks.scale", "--sizes", "2000", "--samples", "200",
         "--timeout", "60", "--fetch-window", "1", "--dir", str(tmp_path / "work"), "--json", str(out)],
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    [result] = json.loads(out.read_text())
    assert result["keys"] == 2000 and result["samples"] == 200
    assert math.isfinite(result["restart_sample_s"]) and result["restart_sample_s"] > 0, result
    assert result["after_listing"]["seconds"] >= 1, result  # the third start fetched, its window ran
    assert result["server"]["gets"] > 0 and result["server"]["errors"] == 0
    assert not [m for m in mount_table() if m.mount_point.startswith(str(tmp_path))]
