"""The images benchmark (benchmarks/images.py) runs end to end at a tiny size and produces a ratio:
on a plain folder with the mount's layout, and through a real sidecar's mount (root and FUSE)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from epochfs.benchmarks import images as bench


def check(out: Path, count: int, repeat: int, *, sidecar: bool) -> None:
    result = json.loads(out.read_text())
    # Each read carries the CPU its workers and (through a mount) the sidecar's processes spent.
    # The sidecar's part is also given above its idle rate, measured before the rounds.
    for read in result["reads"]:
        assert read["worker_cpu"] >= 0
        if sidecar:
            assert read["sidecar_cpu"] >= 0 and isinstance(read["sidecar_extra"], float)
        else:
            assert read["sidecar_cpu"] is None and read["sidecar_extra"] is None
    assert set(result["median_cpu_seconds"]) == {"mount", "local"}
    assert (result["sidecar_idle_cpu_rate"] >= 0) if sidecar else result["sidecar_idle_cpu_rate"] is None
    assert sorted((r["round"], r["side"]) for r in result["reads"]) == sorted(
        (i, side) for i in range(repeat) for side in ("mount", "local"))
    assert {r["images"] for r in result["reads"]} == {count}  # every image decoded on both sides
    assert len(result["ratios"]) == repeat and all(r > 0 for r in result["ratios"])
    assert result["ratio"] > 0 and result["ratio"] == sorted(result["ratios"])[repeat // 2]


def test_the_images_benchmark_on_a_plain_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "result.json"
    assert bench.main(["--plain", "--images", "12", "--side", "16", "--batch-size", "4", "--workers", "1",
                       "--repeat", "1", "--json", str(out)]) == 0
    check(out, 12, 1, sidecar=False)
    assert "plain folder" in capsys.readouterr().out


@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE")
def test_the_images_benchmark_through_a_sidecar_mount(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "result.json"
    assert bench.main(["--images", "20", "--side", "16", "--batch-size", "4", "--workers", "1",
                       "--repeat", "3", "--idle", "0.5", "--json", str(out)]) == 0
    check(out, 20, 3, sidecar=True)
    printed = capsys.readouterr().out
    assert "sidecar: 20 images fetched" in printed and "mount/local" in printed
    assert "median CPU s per read: workers mount" in printed and "; sidecar mount" in printed
    assert "sidecar idle: " in printed and "; sidecar above idle: mount " in printed


@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE")
def test_the_benchmarks_sidecar_runs_in_a_session_of_its_own(tmp_path: Path) -> None:
    # As a pod's separate container: not in the autogroup of the benchmark's DataLoader workers.
    remote = tmp_path / "remote"
    files = bench.generate(remote, images=4, side=8)
    nbytes = sum(p.stat().st_size for p in files.values())
    (tmp_path / "work").mkdir()
    with bench.sidecar_mount(tmp_path / "work", remote, len(files), nbytes) as (mount, pid):
        assert (mount / "epoch-0").is_dir()
        assert os.getsid(pid) == pid != os.getsid(0)
