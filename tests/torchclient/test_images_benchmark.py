"""The images benchmark (benchmarks/images.py) runs end to end at a tiny size and produces a ratio:
on a plain folder with the mount's layout, and through a real sidecar's mount (root and FUSE)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from epochfs.benchmarks import images as bench


def check(out: Path, count: int, repeat: int) -> None:
    result = json.loads(out.read_text())
    assert sorted((r["round"], r["side"]) for r in result["reads"]) == sorted(
        (i, side) for i in range(repeat) for side in ("mount", "local"))
    assert {r["images"] for r in result["reads"]} == {count}  # every image decoded on both sides
    assert len(result["ratios"]) == repeat and all(r > 0 for r in result["ratios"])
    assert result["ratio"] > 0 and result["ratio"] == sorted(result["ratios"])[repeat // 2]


def test_the_images_benchmark_on_a_plain_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "result.json"
    assert bench.main(["--plain", "--images", "12", "--side", "16", "--batch-size", "4", "--workers", "1",
                       "--repeat", "1", "--json", str(out)]) == 0
    check(out, 12, 1)
    assert "plain folder" in capsys.readouterr().out


@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE")
def test_the_images_benchmark_through_a_sidecar_mount(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "result.json"
    assert bench.main(["--images", "20", "--side", "16", "--batch-size", "4", "--workers", "1",
                       "--repeat", "3", "--json", str(out)]) == 0
    check(out, 20, 3)
    printed = capsys.readouterr().out
    assert "sidecar: 20 images fetched" in printed and "mount/local" in printed
