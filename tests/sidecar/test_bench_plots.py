"""The benchmarks' pictures (``--plot FILE.png``, benchmarks/_plots.py): what is drawn must be what
the rows say, so each test feeds rows shaped like the benchmark's JSON and reads the bars, error bars
and lines back from the returned matplotlib figure (a PNG that merely exists could show anything)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from epochfs.benchmarks import _plots, harness

pytest.importorskip("matplotlib")

PNG = b"\x89PNG\r\n\x1a\n"


def _drawn(fig: Any) -> tuple[list[float], list[tuple[float, float]], list[str]]:
    """The bar widths, the error bars' (low, high) and the y labels of a ratio figure, top first."""
    from matplotlib.container import BarContainer

    [ax] = fig.axes
    [bars] = [c for c in ax.containers if isinstance(c, BarContainer)]
    widths = [patch.get_width() for patch in bars.patches]
    assert bars.errorbar is not None  # every bar has its range drawn
    whiskers = bars.errorbar.lines[2][0].get_segments()
    spans = [(round(float(seg[0][0]), 6), round(float(seg[1][0]), 6)) for seg in whiskers]
    return widths, spans, [t.get_text() for t in ax.get_yticklabels()]


def _png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG and 10_000 < len(data) < 150_000, len(data)


def _one_at(fig: Any, x: float) -> bool:
    """A vertical line at ``x``: the 1.0x reference."""
    return any(list(line.get_xdata()) == [x, x] for line in fig.axes[0].get_lines())


def test_mount_rows_become_bars_with_their_run_ranges(tmp_path: Path) -> None:
    rows = [
        {"size": "4MiB", "files": 8, "procs": 1, "repeat": 3, "ratio_first_cold": 0.9,
         "ratio_first_warm": 0.6, "ratio_repeat": 1.05, "ratio_first_cold_range": [0.8, 1.1],
         "ratio_first_warm_range": [0.5, 0.7], "ratio_repeat_range": [0.95, 1.2]},
        {"size": "4MiB", "pace_mbps": 600.0, "paced_direct": 600, "paced_mount_first": 540},
        {"size": "4MiB", "us_per_file_direct": 20.0, "us_per_file_mount": 25.0},
    ]
    fig = _plots.write("mount", rows, tmp_path / "mount.png")
    _png(tmp_path / "mount.png")
    widths, spans, labels = _drawn(fig)
    assert widths == pytest.approx([0.9, 0.6, 1.05, 0.9, 0.8])
    assert spans == [(0.8, 1.1), (0.5, 0.7), (0.95, 1.2), (0.9, 0.9), (0.8, 0.8)]
    assert labels[0] == "4MiB x8, 1 reader: first read, cold / direct cold"
    assert labels[3].startswith("4MiB: paced 600 MB/s") and _one_at(fig, 1.0)
    assert "commit " in fig.axes[0].get_title()


def _run(tool: str, seconds: float, dataset: str = "large") -> dict[str, Any]:
    return {"tool": tool, "dataset": dataset, "checksum": "crc64nvme", "seconds": seconds}


def test_fetch_runs_become_the_printed_ratio_and_its_pairs_range(tmp_path: Path) -> None:
    """Theirs / epochfs's median seconds, the range over the runs made back to back."""
    runs = [_run("epochfs", 1.0), _run("s5cmd", 2.0), _run("rclone", 3.0),
            _run("epochfs", 2.0), _run("s5cmd", 2.0), _run("rclone", 3.0),
            _run("epochfs", 4.0), _run("s5cmd", 2.0), _run("rclone", 3.0)]
    fig = _plots.write("fetch", runs, tmp_path / "fetch.png")
    _png(tmp_path / "fetch.png")
    widths, spans, labels = _drawn(fig)
    assert labels == ["large (crc64nvme): vs s5cmd", "large (crc64nvme): vs rclone"]
    assert widths == pytest.approx([1.0, 1.5])  # median 2 / median 2; 3 / 2
    assert spans == [(0.5, 2.0), (0.75, 3.0)]  # 2/4 .. 2/1; 3/4 .. 3/1


def test_loader_reads_become_one_bar_per_epoch(tmp_path: Path) -> None:
    reads = [{"side": side, "epoch": epoch, "round": n, "mb_per_s": rate}
             for epoch, pairs in ((0, [(90, 100), (80, 100), (100, 100)]), (1, [(110, 100), (100, 100)]))
             for n, (mount, direct) in enumerate(pairs)
             for side, rate in (("mount", mount), ("direct", direct))]
    widths, spans, labels = _drawn(_plots.write("loader", reads, tmp_path / "loader.png"))
    _png(tmp_path / "loader.png")
    assert widths == pytest.approx([0.9, 1.05]) and spans == [(0.8, 1.0), (1.0, 1.1)]
    assert labels == ["epoch 0: EpochLoader through the mount", "epoch 1: EpochLoader through the mount"]


def test_arrayloader_reads_are_ratios_to_the_plain_dataloader(tmp_path: Path) -> None:
    rates = {"array": [500, 700, 600], "epoch": [120, 100, 110], "plain": [100, 100, 100]}
    reads = [{"size": 65536, "place": "direct", "cache": "warm", "loader": name, "round": n, "mb_per_s": v}
             for name, values in rates.items() for n, v in enumerate(values)]
    reads.append({"size": 65536, "place": "direct", "cache": "cold", "loader": "plain", "round": 0,
                  "mb_per_s": 50})
    reads.append({"size": 65536, "place": "direct", "cache": "cold", "loader": "array", "round": 0,
                  "mb_per_s": 200})
    widths, spans, labels = _drawn(_plots.write("arrayloader", reads, tmp_path / "array.png"))
    _png(tmp_path / "array.png")
    assert labels == ["64 KiB direct warm: ArrayLoader", "64 KiB direct warm: EpochLoader",
                      "64 KiB direct cold: ArrayLoader"]
    assert widths == pytest.approx([6.0, 1.1, 4.0])
    assert spans == [(5.0, 7.0), (1.0, 1.2), (4.0, 4.0)]


def test_an_outlier_run_puts_the_ratios_on_a_log_axis(tmp_path: Path) -> None:
    """One stalled baseline read (a loaded machine) must not squash every other bar against 0."""
    reads = [{"side": side, "epoch": 0, "round": n, "mb_per_s": rate}
             for n, (mount, direct) in enumerate([(100, 100), (100, 2), (90, 100)])
             for side, rate in (("mount", mount), ("direct", direct))]
    fig = _plots.write("loader", reads, tmp_path / "loader.png")
    widths, spans, _ = _drawn(fig)
    assert widths == pytest.approx([1.0]) and spans == [(0.9, 50.0)]
    assert fig.axes[0].get_xscale() == "log"
    assert _plots.write("loader", reads[:2], tmp_path / "one.png").axes[0].get_xscale() == "linear"


def _scale_row(keys: int, epoch0: float) -> dict[str, Any]:
    return {"keys": keys, "list_floor_s": keys / 1000 * 0.02, "first_sample_s": 0.5, "epoch0_s": epoch0,
            "restart_sample_s": 1.0, "cut_cli_s": 0.3, "lookup_cut_s": 0.01, "status_s": 0.4,
            "scandir_s": 0.1, "index_bytes": keys * 100,
            "rss_mb": {"supervisor@end": 30.0, "sampler@end": 60.0, "fuse@end": 40.0},
            "while_listing": {"samples_per_s": 200.0}, "after_listing": {}}


def test_scale_results_become_curves_against_the_keys_on_a_log_axis(tmp_path: Path) -> None:
    rows = [_scale_row(100_000, 3.0), _scale_row(10_000, 2.0)]  # drawn in order of size
    fig = _plots.write("scale", rows, tmp_path / "scale.png")
    _png(tmp_path / "scale.png")
    assert [ax.get_ylabel() for ax in fig.axes] == ["seconds", "MB", "samples/s"]
    assert all(ax.get_xscale() == "log" for ax in fig.axes)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["10k", "100k"]
    lines: dict[str, Any] = {str(line.get_label()): line for ax in fig.axes for line in ax.get_lines()}
    assert list(lines["epoch 0"].get_xdata()) == [10_000, 100_000]
    assert list(lines["epoch 0"].get_ydata()) == [2.0, 3.0]
    assert list(lines["index on disk"].get_ydata()) == pytest.approx([1.0, 10.0])
    assert lines["list floor (pages x latency)"].get_linestyle() == "--"
    assert "commit " in fig.get_suptitle()


def test_without_matplotlib_the_benchmark_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str],
                                                                tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ModuleNotFoundError
    with pytest.raises(SystemExit) as stop:
        harness.write_plot(tmp_path / "x.png", "loader", [])
    assert stop.value.code == 2
    assert "needs matplotlib, not installed here: pip install 'epochfs[bench]'" in capsys.readouterr().err
    harness.write_plot(None, "loader", [])  # no --plot: nothing imported, nothing written
    assert not (tmp_path / "x.png").exists()


def test_the_benchmarks_import_no_matplotlib_unless_asked() -> None:
    code = ("import sys; from epochfs.benchmarks import mount, fetch, scale, harness, _plots; "
            "print(sorted(m for m in sys.modules if m.startswith('matplotlib')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_fairness_results_become_a_line_per_key_space_against_the_cut_time(tmp_path: Path) -> None:
    """bench fairness --plot F.png: each key space's TV ratio against its cut time (matplotlib), a
    second run dotted, the aim (2x) dashed, on a log axis."""
    from epochfs.benchmarks import _fairness_plot

    def row(shape: str, at: float, tv: float) -> dict[str, Any]:
        return {"shape": shape, "at_s": at, "tv_ratio": tv}

    after = [row("flat", 4.0, 1.5), row("flat", 2.0, 3.0), row("equal", 2.0, 1.0)]
    before = [row("flat", 2.0, 6.0)]
    _fairness_plot.write(tmp_path / "f.png", after, before, title="t")
    _png(tmp_path / "f.png")
    fig = _fairness_plot.figure(after, before, title="t")
    ax = fig.axes[0]
    lines: dict[str, Any] = {str(line.get_label()): line for line in ax.get_lines()}
    assert list(lines["flat (after)"].get_xdata()) == [2.0, 4.0]  # in cut order
    assert list(lines["flat (after)"].get_ydata()) == [3.0, 1.5]
    assert lines["flat (before)"].get_linestyle() == ":" and lines["flat (after)"].get_linestyle() == "-"
    assert list(lines["the aim: 2x"].get_ydata()) == [2.0, 2.0]
    assert ax.get_yscale() == "log"
    _fairness_plot.write(tmp_path / "f.svg", after, title="t")  # another suffix: the SVG
    assert (tmp_path / "f.svg").read_text().startswith("<svg")
