"""The images benchmark's picture (benchmarks/_images_plot.py): per run, the median of the rounds'
mount / local ratios (whiskers: the rounds), each round's ratio, and the workers' CPU per read,
local / mount; a line at 1.0x and the aim at 0.95x. Read back from the results-to-bars function and
from the figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from epochfs.benchmarks import _images_plot as plot

PNG = b"\x89PNG\r\n\x1a\n"


def _result(ratios: list[float], cpu: dict[str, list[float]], *, plain: bool = False) -> dict[str, Any]:
    reads = [{"side": side, "round": n, "worker_cpu": seconds}
             for side, values in cpu.items() for n, seconds in enumerate(values)]
    return {"reads": reads, "ratios": ratios, "ratio": sorted(ratios)[len(ratios) // 2], "images": 400,
            "side": 128, "workers": 1, "plain": plain}


RESULTS = [_result([0.9, 1.2, 0.8], {"mount": [1.0, 2.0, 1.6], "local": [1.1, 1.8, 1.6]}),
           _result([1.0], {"mount": [1.0], "local": [1.0]}, plain=True)]


def test_each_run_is_its_median_ratio_its_rounds_and_the_workers_cpu() -> None:
    bars = plot.bars(RESULTS)
    assert [b.label for b in bars] == [
        "run 1, mount, 400 images 128px, 1 worker(s): median of 3 rounds",
        "round 0 (mount read first)", "round 1 (local read first)", "round 2 (mount read first)",
        "run 1, mount: worker CPU s per read, local / mount",
        "run 2, plain folder (no FUSE), 400 images 128px, 1 worker(s): median of 1 rounds",
        "round 0 (mount read first)",
        "run 2, plain folder (no FUSE): worker CPU s per read, local / mount"]
    assert (bars[0].ratio, bars[0].low, bars[0].high) == (0.9, 0.8, 1.2)
    assert [b.ratio for b in bars[1:4]] == [0.9, 1.2, 0.8]
    cpu = bars[4]  # median local 1.6 / median mount 1.6; per round 1.1/1.0, 1.8/2.0, 1.6/1.6
    assert (cpu.ratio, cpu.low, cpu.high) == pytest.approx((1.0, 0.9, 1.1))


def test_the_drawing_shows_the_bars_the_line_at_one_and_the_aim(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.container import BarContainer

    fig: Any = plot.write(tmp_path / "i.png", RESULTS[:1])
    data = (tmp_path / "i.png").read_bytes()
    assert data[:8] == PNG and 5_000 < len(data) < 150_000, len(data)
    [ax] = fig.axes
    [bars] = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [p.get_width() for p in bars.patches] == pytest.approx([0.9, 0.9, 1.2, 0.8, 1.0])
    assert bars.errorbar is not None
    whiskers = bars.errorbar.lines[2][0].get_segments()
    spans = [(round(float(s[0][0]), 6), round(float(s[1][0]), 6)) for s in whiskers]
    assert spans[0] == (0.8, 1.2) and spans[4] == pytest.approx((0.9, 1.1))
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "mount, 400 images 128px, 1 worker(s): median of 3 rounds"
    xs = [list(line.get_xdata()) for line in ax.get_lines()]
    assert [1.0, 1.0] in xs and [0.95, 0.95] in xs  # the 1.0x line and the aim
    assert "commit " in fig.get_suptitle()


def test_the_benchmark_draws_its_own_run_with_plot(tmp_path: Path) -> None:
    """``--plot`` on the benchmark itself: a real tiny run on a plain folder, its JSON and its PNG."""
    pytest.importorskip("matplotlib")
    from epochfs.benchmarks import images

    out, png = tmp_path / "run.json", tmp_path / "run.png"
    assert images.main(["--plain", "--images", "8", "--side", "16", "--batch-size", "4", "--workers", "1",
                        "--repeat", "2", "--json", str(out), "--plot", str(png)]) == 0
    result = json.loads(out.read_text())
    assert result["plain"] is True
    assert [b.ratio for b in plot.bars([result])][1:3] == result["ratios"]
    assert png.read_bytes()[:8] == PNG
    plot.main([str(out), "--out", str(tmp_path / "again.png")])
    assert (tmp_path / "again.png").read_bytes()[:8] == PNG
