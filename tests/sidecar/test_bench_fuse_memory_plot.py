"""``epochfs bench fuse_memory --plot FILE.png`` (benchmarks/_fuse_memory_plot.py): the FUSE
server's bytes per file and its times as curves against the files of the epoch. The rows are shaped
as the benchmark writes them (one per size and API; ``api`` ``-`` for a size not mounted), and the
command itself runs at a toy size (the tree step only: no mount, no root)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from epochfs.benchmarks import _fuse_memory_plot, fuse_memory


def tree(files: int, kept: float, build: float) -> dict[str, Any]:
    return {"files": files, "tree_bytes_per_file": kept, "peak_bytes_per_file": 250.0,
            "rss_bytes_per_file": kept * 2, "build_s_traced": build * 3, "build_s": build, "store_s": 1.0}


def mounted(files: int, api: str, kept: float, build: float, rss: float, total: float | None,
            scandir: float) -> dict[str, Any]:
    row = {**tree(files, kept, build), "api": api, "scandir_s": scandir, "scandir_repeat_s": scandir / 4,
           "server_rss_bytes_per_file": rss, "server_tree_bytes_per_file": kept}
    if total is not None:  # only when the kernel's entries could be dropped (root)
        row["server_total_bytes_per_file"] = total
    return row


ROWS = [mounted(10_000, "lowlevel", 72, 0.1, 300, 500, 0.3),
        mounted(10_000, "highlevel", 72, 0.1, 450, 520, 0.25),
        mounted(100_000, "lowlevel", 70, 1.0, 182, 291, 2.36),
        mounted(100_000, "highlevel", 70, 1.0, 372, None, 2.19),
        {**tree(1_000_000, 70, 9.2), "api": "-"}]


def test_rows_become_the_tree_for_every_size_and_each_api_up_to_the_mount_max() -> None:
    series = _fuse_memory_plot.memory_series(list(reversed(ROWS)))  # drawn in order of size
    assert list(series) == ["bytes per file", "seconds"]
    assert list(series["bytes per file"]) == [
        "tree kept (tracemalloc)", "tree-only process RSS growth",
        "server RSS after the scan (highlevel)", "server total, manifest read (highlevel)",
        "server RSS after the scan (lowlevel)", "server total, manifest read (lowlevel)"]
    memory = series["bytes per file"]
    assert memory["tree kept (tracemalloc)"] == ([10_000, 100_000, 1_000_000], [72.0, 70.0, 70.0])
    assert memory["server RSS after the scan (lowlevel)"] == ([10_000, 100_000], [300.0, 182.0])
    assert memory["server total, manifest read (highlevel)"] == ([10_000], [520.0])  # 100k: not measured
    assert series["seconds"] == {"tree build": ([10_000, 100_000, 1_000_000], [0.1, 1.0, 9.2]),
                                 "scandir of the epoch (highlevel)": ([10_000, 100_000], [0.25, 2.19]),
                                 "scandir of the epoch (lowlevel)": ([10_000, 100_000], [0.3, 2.36])}


def test_the_figure_draws_them_with_the_aim(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    fig = _fuse_memory_plot.write(tmp_path / "m.png", ROWS)
    data = (tmp_path / "m.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < len(data) < 150_000, len(data)
    assert [ax.get_ylabel() for ax in fig.axes] == ["bytes per file", "seconds"]
    assert {ax.get_xlabel() for ax in fig.axes} == {"files in epoch 0"}
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["10k", "100k", "1M"]
    lines: dict[str, Any] = {str(line.get_label()): line for ax in fig.axes for line in ax.get_lines()}
    assert list(lines["server RSS after the scan (lowlevel)"].get_xdata()) == [10_000, 100_000]
    assert list(lines["server RSS after the scan (lowlevel)"].get_ydata()) == [300.0, 182.0]
    assert list(lines["tree build"].get_ydata()) == [0.1, 1.0, 9.2]
    aim = lines["the aim: 200 B"]
    assert list(aim.get_ydata()) == [200.0, 200.0] and aim.get_linestyle() == "--"
    assert fig.axes[0].get_ylim()[0] == 0
    assert "commit " in fig.get_suptitle()


def test_the_command_draws_what_it_writes(tmp_path: Path) -> None:
    """A toy run of the real benchmark (tree step only): the JSON rows and, from them, the plot."""
    pytest.importorskip("matplotlib")
    out, plot = tmp_path / "m.json", tmp_path / "m.png"
    assert fuse_memory.main(["--files", "2000", "--mount-max", "0", "--dir", str(tmp_path / "work"),
                             "--json", str(out), "--plot", str(plot)]) == 0
    rows = json.loads(out.read_text())
    assert [(r["files"], r["api"]) for r in rows] == [(2000, "-")]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "work").exists()


def test_the_benchmark_imports_no_matplotlib_unless_asked() -> None:
    code = ("import sys; from epochfs.benchmarks import fuse_memory; "
            "print(sorted(m for m in sys.modules if m.startswith('matplotlib')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_without_matplotlib_a_plot_is_refused_before_any_store_is_made(monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ModuleNotFoundError
    with pytest.raises(SystemExit) as stop:
        fuse_memory.main(["--files", "1500", "--mount-max", "0", "--dir", str(tmp_path / "work"),
                          "--plot", str(tmp_path / "m.png")])
    assert stop.value.code == 2
    out = capsys.readouterr()
    assert "needs matplotlib, not installed here" in out.err
    assert out.out == "" and not (tmp_path / "work").exists()  # no table: no store made
