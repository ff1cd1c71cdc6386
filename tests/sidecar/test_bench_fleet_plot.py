"""``epochfs bench fleet --plot FILE.png`` (benchmarks/_fleet_plot.py): the simulated fleet's waits
and requests as curves against the fleet's (or the bucket's) size. The rows are the model's own
``Outcome`` as the benchmark writes them to JSON; the lines read back from the figure must be the
rows' values, in order of size, one colour per mode."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from epochfs.benchmarks import _fleet_plot, fleet
from epochfs.benchmarks._fleet_params import Outcome

PNG = b"\x89PNG\r\n\x1a\n"


def outcome(mode: str, nodes: int, keys: int = 1_000_000, *, epoch0: float = 1.0, worst: float = 2.0,
            listed: float = 10.0, lists: int = 1000, gets: int = 5000,
            slow: tuple[int, int] = (1, 2)) -> dict[str, Any]:
    """A row of the benchmark's JSON: the model's Outcome less its per-node list."""
    row = asdict(Outcome(mode=mode, nodes=nodes, keys=keys, folders=100, list_requests=lists,
                         get_requests=gets, list_slowdowns=slow[0], get_slowdowns=slow[1],
                         epoch0_median_s=epoch0, epoch0_worst_s=worst, listed_median_s=listed))
    del row["epoch0_s"]
    return row


def test_rows_become_one_line_per_mode_and_figure_in_order_of_nodes() -> None:
    rows = [outcome("list", 300, epoch0=7.8, worst=57.3, listed=199, lists=343_907, gets=1_132_589,
                    slow=(43_307, 132_689)),
            outcome("index", 300, epoch0=6.4, worst=math.inf, listed=3),
            outcome("list", 100, epoch0=2.4, worst=6.3, listed=168, lists=113_654, gets=1_078_821,
                    slow=(13_454, 78_821)),
            outcome("index", 100, epoch0=1.9, worst=5.3, listed=3)]
    x, panels = _fleet_plot.fleet_series(rows)
    assert x == "nodes" and list(panels) == ["seconds", "requests"]
    seconds = {line.label: line for line in panels["seconds"]}
    assert list(seconds) == ["epoch 0 median (lists)", "epoch 0 worst (lists)", "listed median (lists)",
                             "epoch 0 median (--index)", "epoch 0 worst (--index)", "listed median (--index)"]
    assert seconds["epoch 0 median (lists)"].xs == [100, 300]
    assert seconds["epoch 0 median (lists)"].ys == [2.4, 7.8]
    assert seconds["epoch 0 worst (lists)"].style == "--"
    worst = seconds["epoch 0 worst (--index)"].ys  # a node never got there: no point, not infinity
    assert worst[0] == 5.3 and math.isnan(worst[1])
    requests = {line.label: line.ys for line in panels["requests"]}
    assert requests["LIST (lists)"] == [113_654, 343_907]
    assert requests["GET (lists)"] == [1_078_821, 1_132_589]
    assert requests["SlowDown (lists)"] == [13_454 + 78_821, 43_307 + 132_689]


def test_the_axis_is_the_size_that_took_more_values_and_the_other_names_its_lines() -> None:
    rows = [outcome("list", n, k, epoch0=n / k) for n in (10, 20) for k in (1000, 2000, 4000)]
    x, panels = _fleet_plot.fleet_series(rows)
    assert x == "keys"
    median = [line for line in panels["seconds"] if line.label.startswith("epoch 0 median")]
    assert [line.label for line in median] == ["epoch 0 median (lists, 10 nodes)",
                                               "epoch 0 median (lists, 20 nodes)"]
    assert median[1].xs == [1000, 2000, 4000] and median[1].ys == [20 / 1000, 20 / 2000, 20 / 4000]
    one = [outcome("list", 10, k) for k in (1000, 2000)] + [outcome("list", 20, 1000)]
    assert _fleet_plot.x_axis(one) == "nodes"  # a tie: the fleet's size


def test_the_figure_draws_the_lines_on_log_axes_with_the_commit(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = [outcome("list", 1000, epoch0=39.7, worst=222.7), outcome("index", 1000, epoch0=20.8, worst=81.3),
            outcome("list", 100, epoch0=2.4, worst=6.3), outcome("index", 100, epoch0=1.9, worst=5.3)]
    fig = _fleet_plot.write(tmp_path / "fleet.png", rows)
    data = (tmp_path / "fleet.png").read_bytes()
    assert data[:8] == PNG and 10_000 < len(data) < 150_000, len(data)
    assert [ax.get_ylabel() for ax in fig.axes] == ["seconds", "requests"]
    assert all(ax.get_xscale() == "log" and ax.get_yscale() == "log" for ax in fig.axes)
    assert [ax.get_xlabel() for ax in fig.axes] == ["nodes starting at once"] * 2
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["100", "1k"]
    lines: dict[str, Any] = {str(line.get_label()): line for ax in fig.axes for line in ax.get_lines()}
    assert list(lines["epoch 0 median (lists)"].get_xdata()) == [100, 1000]
    assert list(lines["epoch 0 median (lists)"].get_ydata()) == [2.4, 39.7]
    assert list(lines["epoch 0 worst (--index)"].get_ydata()) == [5.3, 81.3]
    assert lines["epoch 0 worst (lists)"].get_linestyle() == "--"
    assert lines["epoch 0 median (lists)"].get_color() == lines["listed median (lists)"].get_color()
    assert lines["epoch 0 median (lists)"].get_color() != lines["epoch 0 median (--index)"].get_color()
    assert "commit " in fig.get_suptitle() and "1,000,000 keys" in fig.get_suptitle()


def test_the_command_simulates_every_size_in_a_comma_list(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """--nodes 4,8 --keys 2k: four simulations (two modes each), a table with the sizes, the JSON
    rows, and with matplotlib the picture drawn from them."""
    plot = tmp_path / "f.png" if _has_matplotlib() else None
    argv = ["--nodes", "4,8", "--keys", "2k", "--json", str(tmp_path / "f.json"),
            *(["--plot", str(plot)] if plot else [])]
    assert fleet.main(argv) == 0
    rows = json.loads((tmp_path / "f.json").read_text())
    assert [(r["nodes"], r["keys"], r["mode"]) for r in rows] == [
        (4, 2000, "list"), (4, 2000, "index"), (8, 2000, "list"), (8, 2000, "index")]
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| nodes | keys | mode |")
    assert table[2].startswith("| 4 | 2k | each node lists")
    if plot:
        assert plot.read_bytes()[:8] == PNG
    assert fleet.main(["--nodes", "4", "--keys", "2000", "--mode", "list"]) == 0  # one size: as before
    assert capsys.readouterr().out.startswith("| mode |")
    with pytest.raises(SystemExit):
        fleet.main(["--nodes", "4,x"])


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        return False
    return True


def test_the_fleet_command_imports_no_matplotlib_unless_asked() -> None:
    code = ("import sys; from epochfs.benchmarks import fleet; "
            "print(sorted(m for m in sys.modules if m.startswith('matplotlib')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_without_matplotlib_a_plot_is_refused_before_the_simulation(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ModuleNotFoundError
    with pytest.raises(SystemExit) as stop:
        fleet.main(["--nodes", "4", "--keys", "2000", "--plot", str(tmp_path / "f.png")])
    assert stop.value.code == 2
    out = capsys.readouterr()
    assert "needs matplotlib, not installed here" in out.err and out.out == ""  # no table: nothing simulated
