"""``epochfs bench fetch``'s ratio "after start-up" takes every tool's start-up off the same way:
from the tool's own first object GET (the server's request log) to its end. It divided s5cmd's
whole run (its start-up included) by the sampler's run after the sampler's start-up alone
(``steady_seconds``, from the catalog being written), which favoured the sampler: the docs' own
figures (160 x 4 MiB at ``a71e21c``) gave 0.96x one-sided and 0.85x symmetric."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from bench_helpers import run_benchmark

from epochfs.benchmarks._fetch_report import Run, after_start_up


def _run(tool: str, seconds: float, first_object: float, steady: float | None = None) -> Run:
    return Run(tool, "large", "crc64nvme", 160, 160 << 22, seconds, 0.5, steady_seconds=steady,
               first_object_seconds=first_object, from_first_object_seconds=seconds - first_object)


def test_each_side_loses_its_own_start_up() -> None:
    # The docs' a71e21c medians: epochfs 0.96 s (first object GET 0.187 s), s5cmd 0.74 s (0.084 s).
    mine = [_run("epochfs", 0.96, 0.187, steady=0.74 / 0.96)]
    theirs = [_run("s5cmd", 0.74, 0.084)]
    text = after_start_up(mine, theirs, "s5cmd")
    assert text.startswith("0.85x from each tool's first object GET to its end"), text
    assert "epochfs 0.77s, s5cmd 0.66s" in text


def test_no_request_log_no_ratio() -> None:
    bare = Run("s5cmd", "large", "crc64nvme", 1, 1, 1.0, 0.0)
    assert after_start_up([bare], [bare], "s5cmd").startswith("no ratio after start-up")


@pytest.mark.skipif(shutil.which("s5cmd", path=str(Path(sys.executable).parent)) is None
                    and shutil.which("s5cmd") is None, reason="needs s5cmd")
def test_a_real_run_records_and_prints_the_symmetric_ratio(tmp_path: Path) -> None:
    """A tiny real run (moto, ``epochfs sample``, s5cmd): every run, s5cmd's too, has its time from
    its first object GET in the JSON, and the printed ratio is theirs over the sampler's."""
    out = tmp_path / "f.json"
    done = run_benchmark(
        [sys.executable, "-P", "-m", "epochfs.benchmarks.fetch", "--large", "0", "--small", "30",
         "--small-size", "4096", "--checksums", "crc64nvme", "--repeat", "1", "--tools", "epochfs,s5cmd",
         "--dir", str(tmp_path), "--json", str(out)],
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    runs = json.loads(out.read_text())
    assert {r["tool"] for r in runs} == {"epochfs", "s5cmd"}
    for r in runs:
        assert r["from_first_object_seconds"] == pytest.approx(r["seconds"] - r["first_object_seconds"])
    by = {r["tool"]: r["from_first_object_seconds"] for r in runs}
    line = re.search(r"small \(objects/s\): epochfs / s5cmd = .*", done.stdout)
    assert line is not None, done.stdout
    assert f"{by['s5cmd'] / by['epochfs']:.2f}x from each tool's first object GET to its end" in line.group(0)
    assert "after the sampler's start-up" not in done.stdout
