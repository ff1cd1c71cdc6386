"""``epochfs bench scale_cached --plot FILE.png`` (benchmarks/_scale_cached_plot.py): each figure of a
restart as a curve against the samples cached. The rows are the benchmark's own ``Result`` as it
writes them to JSON; what the figure draws must be their values, in order of size."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from epochfs.benchmarks import _scale_cached_plot
from epochfs.benchmarks.scale_cached import Result


def result(cached: int, *, sample: float, scandir: float, per_file: float,
           fuse_mb: float | None = 40.0) -> dict[str, Any]:
    r = Result(cached=cached, keys=2 * cached, classes=100, size=256, restart_sample_s=sample,
               restart_epoch_s=0.5, restart_ready_s=0.6, python_start_s=0.04, status_s=0.3, cut_cli_s=0.2,
               lookup_cut_s=0.03, scandir_s=scandir, scandir_files=cached, fuse_bytes_per_file=per_file,
               index_bytes=cached * 900,
               rss_mb={"supervisor@end": 30.0, "sampler@end": 70.0,
                       **({"fuse@end": fuse_mb} if fuse_mb is not None else {})})
    return asdict(r)


def test_results_become_each_figure_against_the_samples_cached() -> None:
    rows = [result(100_000, sample=1.7, scandir=5.2, per_file=407, fuse_mb=None),
            result(10_000, sample=1.2, scandir=0.5, per_file=528)]
    series = _scale_cached_plot.cached_series(rows)
    assert list(series) == ["seconds", "MB", "bytes per file"]
    assert list(series["seconds"]) == ["restart: next sample", "restart: epoch-0 served", "restart: /readyz",
                                       "status (CLI)", "cut (CLI)", _scale_cached_plot.BASELINE,
                                       "lookup cut", "scandir of a fresh epoch"]
    assert series["seconds"]["restart: next sample"] == ([10_000, 100_000], [1.2, 1.7])
    assert series["seconds"]["scandir of a fresh epoch"] == ([10_000, 100_000], [0.5, 5.2])
    assert series["MB"]["index on disk"] == ([10_000, 100_000], [9.0, 90.0])
    fuse = series["MB"]["fuse RSS at the end"][1]
    assert fuse[0] == 40.0 and math.isnan(fuse[1])  # not read: no point
    assert series["bytes per file"] == {"FUSE server's RSS growth over the scandir": ([10_000, 100_000],
                                                                                      [528.0, 407.0])}


def test_the_figure_draws_them_with_the_baseline_dashed(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = [result(10_000, sample=1.2, scandir=0.5, per_file=528),
            result(100_000, sample=1.7, scandir=5.2, per_file=407)]
    fig = _scale_cached_plot.write(tmp_path / "c.png", rows)
    data = (tmp_path / "c.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < len(data) < 150_000, len(data)
    assert [ax.get_ylabel() for ax in fig.axes] == ["seconds", "MB", "bytes per file"]
    assert {ax.get_xlabel() for ax in fig.axes} == {"samples cached (a complete catalog)"}
    assert all(ax.get_xscale() == "log" for ax in fig.axes)
    assert [ax.get_yscale() for ax in fig.axes] == ["log", "linear", "linear"]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["10k", "100k"]
    lines: dict[str, Any] = {str(line.get_label()): line for ax in fig.axes for line in ax.get_lines()}
    assert list(lines["scandir of a fresh epoch"].get_ydata()) == [0.5, 5.2]
    assert list(lines["FUSE server's RSS growth over the scandir"].get_ydata()) == [528.0, 407.0]
    assert lines[_scale_cached_plot.BASELINE].get_linestyle() == "--"
    assert lines["restart: next sample"].get_linestyle() == "-"
    legend = fig.axes[0].get_legend()
    assert legend is not None
    handles: list[Any] = [h for h in legend.legend_handles if h is not None]
    dashed = [h.get_linestyle() for h in handles if h.get_label() == _scale_cached_plot.BASELINE]
    assert dashed == ["--"]  # the legend shows the line as drawn
    assert "commit " in fig.get_suptitle() and "2 keys per cached sample" in fig.get_suptitle()


def test_the_benchmark_imports_no_matplotlib_unless_asked() -> None:
    code = ("import sys; from epochfs.benchmarks import scale_cached; "
            "print(sorted(m for m in sys.modules if m.startswith('matplotlib')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_without_matplotlib_a_plot_is_refused_before_any_seeding(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    """--plot is checked first: no minutes of seeding and measuring that end without the picture."""
    from epochfs.benchmarks import scale_cached

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ModuleNotFoundError
    with pytest.raises(SystemExit) as stop:
        scale_cached.main(["--cached", "2000", "--dir", str(tmp_path / "work"),
                           "--plot", str(tmp_path / "c.png")])
    assert stop.value.code == 2
    out = capsys.readouterr()
    assert "needs matplotlib, not installed here" in out.err
    assert out.out == "" and not (tmp_path / "work").exists()  # no table: nothing seeded nor measured
