"""The served-opens benchmark's picture (benchmarks/_served_opens_plot.py): one ratio bar per run,
watched / unwatched opens per second, whiskers from the passes' spread, the label saying whether
every open was counted; read back from the rows-to-bars function and from the figure."""

from __future__ import annotations

import json
import os
from pathlib import Path
from statistics import median
from typing import Any

import pytest

from epochfs.benchmarks import _served_opens_plot as plot
from epochfs.benchmarks import served_opens

PNG = b"\x89PNG\r\n\x1a\n"


def _row(files: int, size: int, unwatched: list[float], watched: list[float], counted: int) -> dict[str, Any]:
    return {"files": files, "size": size, "repeat": len(watched), "unwatched_s": unwatched,
            "watched_s": watched, "ratio": min(unwatched) / min(watched), "counted": counted,
            "opens": files * len(watched)}


ROWS = [_row(4000, 64 << 10, [0.06, 0.08, 0.07, 0.065], [0.075, 0.1], 8000),
        _row(300, 4 << 20, [0.14, 0.15], [0.15], 299)]


def test_each_run_is_a_bar_at_its_printed_ratio_with_the_passes_spread() -> None:
    bars = plot.bars(ROWS)
    assert [b.label for b in bars] == ["4000 x 64 KiB, best of 2: every open counted",
                                       "300 x 4 MiB, best of 1: 299 of 300 counted"]
    assert bars[0].ratio == pytest.approx(0.8)  # best unwatched 0.06 s / best watched 0.075 s
    assert (bars[0].low, bars[0].high) == pytest.approx((0.6, 0.08 / 0.075))  # 0.06/0.1 .. 0.08/0.075
    assert (bars[1].ratio, bars[1].low, bars[1].high) == pytest.approx((0.14 / 0.15, 0.14 / 0.15, 1.0))
    assert plot.size_text(100) == "100 B"


def test_the_drawing_shows_one_bar_per_run_and_the_line_at_one(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.container import BarContainer

    fig: Any = plot.write(tmp_path / "s.png", ROWS)
    data = (tmp_path / "s.png").read_bytes()
    assert data[:8] == PNG and 5_000 < len(data) < 150_000, len(data)
    [ax] = fig.axes
    [bars] = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [p.get_width() for p in bars.patches] == pytest.approx([0.8, 0.14 / 0.15])
    assert bars.errorbar is not None
    whiskers = bars.errorbar.lines[2][0].get_segments()
    spans = [(round(float(s[0][0]), 6), round(float(s[1][0]), 6)) for s in whiskers]
    assert spans == [(0.6, round(0.08 / 0.075, 6)), (round(0.14 / 0.15, 6), 1.0)]
    assert [t.get_text() for t in ax.get_yticklabels()][1] == "300 x 4 MiB, best of 1: 299 of 300 counted"
    assert any(list(line.get_xdata()) == [1.0, 1.0] for line in ax.get_lines())
    assert "commit " in ax.get_title() and ax.get_xlabel().startswith("watched / unwatched opens/s")


@pytest.mark.skipif(os.geteuid() != 0, reason="fanotify needs CAP_SYS_ADMIN")
def test_the_benchmark_writes_its_run_as_json_and_draws_it(tmp_path: Path) -> None:
    """A real (tiny) run: a real fanotify listener counts the opens; --json and --plot. One pass
    each: the kernel may merge a second open of a file by the same process, and the listener would
    then wait its 10 s for opens that never come."""
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "run.json", tmp_path / "run.png"
    assert served_opens.main(["--dir", str(tmp_path / "files"), "--files", "40", "--size", "4096",
                              "--repeat", "1", "--json", str(out), "--plot", str(png)]) == 0
    [row] = json.loads(out.read_text())
    assert (row["files"], row["size"], row["opens"]) == (40, 4096, 40)
    assert len(row["unwatched_s"]) == 1 and len(row["watched_s"]) == 1  # as many passes each side
    assert row["ratio_of_medians"] == pytest.approx(median(row["unwatched_s"]) / median(row["watched_s"]))
    assert png.read_bytes()[:8] == PNG
    plot.main([str(out), str(out), "--out", str(tmp_path / "two.png")])  # several runs, one picture
    assert (tmp_path / "two.png").read_bytes()[:8] == PNG
