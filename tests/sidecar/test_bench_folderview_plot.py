"""The folder view benchmark's picture (benchmarks/_folderview_plot.py): the wait and the publish as
curves against the entries, the reads as ratio bars. What is drawn must be what the rows say, so the
tests read the curves and bars back, from the rows-to-curves functions and from the figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from epochfs.benchmarks import _folderview_plot as plot
from epochfs.benchmarks import folderview

PNG = b"\x89PNG\r\n\x1a\n"


def _wait(entries: int, wait: float, *, mode: str = "snapshot", fuse: bool = True) -> dict[str, Any]:
    row: dict[str, Any] = {"entries": entries, "mode": mode, "wait_s": wait, "wait_min_s": wait / 2,
                           "wait_max_s": wait * 2, "cut_s": wait / 10}
    if fuse:
        row |= {"fuse_wait_s": 0.01, "fuse_wait_spread_s": [0.005, 0.02], "fuse_entry_s": entries / 50_000}
    return row


def _publish(entries: int, root: str, seconds: float) -> dict[str, Any]:
    return {"entries": entries, "link_root": root, "target_bytes": 55 if root == "short" else 65,
            "publish_s": seconds, "bare_links_s": seconds / 2, "retire_s": seconds / 100}


READS = [{"size": "4MiB", "files": 16, "ratio_folder_first_cold": 0.9, "ratio_folder_first_warm": 0.95,
          "ratio_folder_repeat": 1.0, "ratio_fuse_first_cold": 0.7, "ratio_fuse_first_warm": 0.6,
          "ratio_fuse_repeat": 1.02}]


def test_wait_rows_become_curves_by_entries_with_the_rounds_range() -> None:
    rows = [_wait(100_000, 0.08), _wait(10_000, 0.02), _wait(10_000, 1.5, mode="schedule", fuse=False)]
    curves = {c.label: c for c in plot.wait_curves(rows)}
    assert list(curves) == ["folder view: ask -> epoch-N visible", "of which the store's cut",
                            "FUSE view: ask (lookup) -> epoch-N", "FUSE view: first look inside epoch-N",
                            "folder view: ask -> epoch-N visible (schedule mode)",
                            "of which the store's cut (schedule mode)"]
    wait = curves["folder view: ask -> epoch-N visible"]
    assert wait.entries == [10_000, 100_000]  # sorted by size, whatever the rows' order
    assert wait.seconds == [0.02, 0.08] and wait.low == [0.01, 0.04] and wait.high == [0.04, 0.16]
    assert curves["of which the store's cut"].dashed and not wait.dashed
    fuse = curves["FUSE view: ask (lookup) -> epoch-N"]
    assert fuse.seconds == [0.01, 0.01] and fuse.low == [0.005, 0.005] and fuse.high == [0.02, 0.02]
    assert curves["FUSE view: first look inside epoch-N"].seconds == [0.2, 2.0]
    assert curves["folder view: ask -> epoch-N visible (schedule mode)"].seconds == [1.5]


def test_publish_rows_become_curves_per_link_root_and_reads_become_ratio_bars() -> None:
    rows = [_publish(100_000, "short", 4.0), _publish(10_000, "short", 0.4), _publish(10_000, "long", 0.6)]
    curves = plot.publish_curves(rows)
    assert [c.label for c in curves] == [
        "publish whole, short link root (55 B targets)", "bare links, short link root (55 B targets)",
        "retire, short link root (55 B targets)", "publish whole, long link root (65 B targets)",
        "bare links, long link root (65 B targets)", "retire, long link root (65 B targets)"]
    assert curves[0].entries == [10_000, 100_000] and curves[0].seconds == [0.4, 4.0]
    assert curves[0].low == curves[0].seconds == curves[0].high  # medians only: no range kept
    assert curves[1].dashed and curves[1].seconds == [0.2, 2.0] and curves[5].seconds == [0.006]
    bars = plot.read_bars(READS)
    assert [(b.label, b.ratio) for b in bars] == [
        ("4MiB x16: folder view, first read, cold / direct cold", 0.9),
        ("4MiB x16: folder view, first read, warm / direct warm", 0.95),
        ("4MiB x16: folder view, repeat / direct warm", 1.0),
        ("4MiB x16: fuse view, first read, cold / direct cold", 0.7),
        ("4MiB x16: fuse view, first read, warm / direct warm", 0.6),
        ("4MiB x16: fuse view, repeat / direct warm", 1.02)]
    assert plot.read_bars(READS, dropped=False)[0].label.endswith("cold / direct cold (not dropped)")


def test_the_drawing_shows_the_curves_on_log_axes_and_the_read_ratios(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.container import BarContainer

    results = {"wait": [_wait(10_000, 0.02), _wait(100_000, 0.08)],
               "publish": [_publish(10_000, "short", 0.4), _publish(100_000, "short", 4.0)],
               "reads": READS, "dropped": True}
    fig: Any = plot.write(tmp_path / "fv.png", results)
    data = (tmp_path / "fv.png").read_bytes()
    assert data[:8] == PNG and 10_000 < len(data) < 200_000, len(data)
    wait, publish, reads = fig.axes
    for ax in (wait, publish):
        assert ax.get_xscale() == ax.get_yscale() == "log"
        assert ax.get_xlabel() == "entries in the epoch"
        assert [t.get_text() for t in ax.get_xticklabels()] == ["10k", "100k"]
    lines = {str(c.get_label()): c for c in wait.containers}  # errorbar containers, by label
    (line, _caps, (whiskers,)) = lines["folder view: ask -> epoch-N visible"].lines
    assert list(line.get_xdata()) == [10_000, 100_000] and list(line.get_ydata()) == [0.02, 0.08]
    assert [(round(s[0][1], 6), round(s[1][1], 6)) for s in whiskers.get_segments()] == [(0.01, 0.04),
                                                                                         (0.04, 0.16)]
    dashed = {str(c.get_label()): c.lines[0].get_linestyle() for c in publish.containers}
    assert dashed["bare links, short link root (55 B targets)"] == "--"
    assert dashed["publish whole, short link root (55 B targets)"] == "-"
    [bars] = [c for c in reads.containers if isinstance(c, BarContainer)]
    assert [p.get_width() for p in bars.patches] == [0.9, 0.95, 1.0, 0.7, 0.6, 1.02]
    labels = [t.get_text() for t in reads.get_yticklabels()]
    assert labels[3] == "4MiB x16: fuse view, first read, cold / direct cold"
    assert any(list(ln.get_xdata()) == [1.0, 1.0] for ln in reads.get_lines())  # the 1.0x line
    assert "commit " in fig.get_suptitle()
    # Only what the results have is drawn: a --wait-only run is one panel.
    assert len(plot.figure({"wait": results["wait"], "publish": [], "reads": []}, title="t").axes) == 1


def test_the_benchmark_draws_its_own_run_with_plot_and_the_module_redraws_its_json(tmp_path: Path) -> None:
    """``--plot`` on the benchmark itself: a real (tiny) publish run, drawn; then the plot module's
    command draws the same picture from the run's ``--json``."""
    pytest.importorskip("matplotlib")
    png, out = tmp_path / "run.png", tmp_path / "run.json"
    assert folderview.main(["--dir", str(tmp_path / "work"), "--entries", "300", "--wait", "0", "--big", "0",
                            "--small", "0", "--repeat", "1", "--no-drop", "--json", str(out),
                            "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == PNG
    results = json.loads(out.read_text())
    assert [c.entries for c in plot.publish_curves(results["publish"])] == [[300]] * 6
    plot.main([str(out), "--out", str(tmp_path / "again.png")])
    assert (tmp_path / "again.png").read_bytes()[:8] == PNG
