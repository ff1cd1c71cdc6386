"""Pictures of benchmark results (``--plot FILE.png``), drawn from the rows the benchmark writes as JSON.

Two kinds, so that a reader sees the shape of a run without reading its table:

- **ratios** (``mount``, ``fetch``, ``loader``, ``arrayloader``): one horizontal bar per case, its
  median ratio to the baseline measured in the same run (direct reads, s5cmd/rclone, a plain
  DataLoader), the range of the per-run ratios as an error bar, and a line at 1.0x. A ratio is what
  a loaded, shared machine keeps steady; absolute MB/s it does not.
- **scale** (``scale``): each figure against the remote's size in keys (log x), one panel per unit.

Each title carries the commit and the date, so a committed PNG says what it shows. matplotlib is
imported only when a plot is asked for (headless ``Agg``); without it the benchmark stops with the
line that names what to install (:func:`harness.missing_module`). The row-to-bar functions are plain
Python, so the tests check what is drawn against the rows.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochfs.benchmarks import harness

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Row = Mapping[str, Any]
DPI = 100
LOG_SPAN = 16.0
"""Ratios from ``1 / LOG_SPAN`` to ``LOG_SPAN`` of each other and more are drawn on a log axis."""


@dataclass(frozen=True)
class Bar:
    """One case: its median ratio to the baseline and the range of the ratios of its runs."""

    label: str
    ratio: float
    low: float
    high: float


def _bar(label: str, ratios: Sequence[float], median: float | None = None) -> Bar:
    """``median`` (a ratio of medians, as the benchmark prints it) or the ratios' median, and their range."""
    mid = statistics.median(ratios) if median is None else median
    return Bar(label, mid, min([mid, *ratios]), max([mid, *ratios]))


# ---------------------------------------------------------------------------------- rows -> bars
MOUNT_RATIOS = (("first_cold", "first read, cold / direct cold"),
                ("first_warm", "first read, warm / direct warm"),
                ("repeat", "repeat / direct warm"))


def mount_bars(rows: Sequence[Row]) -> list[Bar]:
    """benchmarks/mount.py's rows: each size and reader count's three ratios (range: per
    interleaved run), then the per-open and paced ratios (one figure each: no range)."""
    bars = []
    for r in rows:
        if "ratio_repeat" in r:
            for key, text in MOUNT_RATIOS:
                low, high = r.get(f"ratio_{key}_range") or (r[f"ratio_{key}"],) * 2
                ratio = r[f"ratio_{key}"]
                readers = f"{r['procs']} reader{'s' * (r['procs'] != 1)}"
                bars.append(Bar(f"{r['size']} x{r['files']}, {readers}: {text}", ratio,
                                min(low, ratio), max(high, ratio)))
        elif "us_per_file_mount" in r:
            ratio = r["us_per_file_direct"] / r["us_per_file_mount"]
            bars.append(Bar(f"{r['size']}: per open, repeat (min of 7)", ratio, ratio, ratio))
        elif "paced_mount_first" in r:
            ratio = r["paced_mount_first"] / r["paced_direct"]
            text = f"{r['size']}: paced {r['pace_mbps']:.0f} MB/s, fresh epoch"
            bars.append(Bar(text, ratio, ratio, ratio))
    return bars


def fetch_bars(rows: Sequence[Row]) -> list[Bar]:
    """benchmarks/fetch.py's runs: per dataset and stored checksum, epochfs against each other
    tool, the ratio of median seconds (theirs / epochfs: above 1, epochfs is faster) and the range
    of the ratios of runs made back to back, as the benchmark prints them."""
    bars = []
    sets = list(dict.fromkeys((r["dataset"], r["checksum"]) for r in rows))
    tools = list(dict.fromkeys(r["tool"] for r in rows))
    for dataset, checksum in sets:
        def seconds(tool: str, d: str = dataset, c: str = checksum) -> list[float]:
            return [r["seconds"] for r in rows if (r["tool"], r["dataset"], r["checksum"]) == (tool, d, c)]

        mine = seconds("epochfs")
        if not mine:
            continue
        for tool in (t for t in tools if t != "epochfs"):
            theirs = seconds(tool)
            pairs = [b / m for m, b in zip(mine, theirs, strict=True)]
            bars.append(_bar(f"{dataset} ({checksum}): vs {tool}", pairs,
                             statistics.median(theirs) / statistics.median(mine)))
    return bars


def loader_bars(rows: Sequence[Row]) -> list[Bar]:
    """benchmarks/loader.py's reads: per epoch, median MB/s through the mount / direct, and the
    range of the ratios of each round's pair of reads."""
    bars = []
    for epoch in dict.fromkeys(r["epoch"] for r in rows):
        side = {s: {r["round"]: r["mb_per_s"] for r in rows if (r["epoch"], r["side"]) == (epoch, s)}
                for s in ("mount", "direct")}
        pairs = [side["mount"][n] / side["direct"][n] for n in side["mount"] if n in side["direct"]]
        median = statistics.median(side["mount"].values()) / statistics.median(side["direct"].values())
        bars.append(_bar(f"epoch {epoch}: EpochLoader through the mount", pairs, median))
    return bars


ARRAY_NAMES = {"array": "ArrayLoader", "epoch": "EpochLoader"}


def arrayloader_bars(rows: Sequence[Row]) -> list[Bar]:
    """benchmarks/arrayloader.py's reads: per size, place and page cache, ArrayLoader and
    EpochLoader against the plain DataLoader (median MB/s; range: per round)."""
    bars = []
    for size, place, cache in dict.fromkeys((r["size"], r["place"], r["cache"]) for r in rows):
        rate = {name: {r["round"]: r["mb_per_s"] for r in rows
                       if (r["size"], r["place"], r["cache"], r["loader"]) == (size, place, cache, name)}
                for name in ("plain", *ARRAY_NAMES)}
        if not rate["plain"]:
            continue
        plain = statistics.median(rate["plain"].values())
        for name, text in ARRAY_NAMES.items():
            if rate[name]:
                pairs = [v / rate["plain"][n] for n, v in rate[name].items() if n in rate["plain"]]
                unit = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
                bars.append(_bar(f"{unit} {place} {cache}: {text}", pairs,
                                 statistics.median(rate[name].values()) / plain))
    return bars


RATIO_KINDS: dict[str, tuple[Callable[[Sequence[Row]], list[Bar]], str]] = {
    "mount": (mount_bars, "epochfs mount: reads through the mount / direct reads of the same files"),
    "fetch": (fetch_bars, "epochfs sample: speed against s5cmd and rclone (their seconds / epochfs's)"),
    "loader": (loader_bars, "loader: EpochLoader through the mount / the same DataLoader on the files"),
    "arrayloader": (arrayloader_bars, "arrayloader: MB/s / a plain DataLoader's on the same files"),
}


# ---------------------------------------------------------------------------------- scale curves
def _rss(process: str) -> Callable[[Row], float]:
    """A process's RSS at the end of a scale run (MB), from its ``rss_mb`` map."""
    return lambda r: float(r["rss_mb"].get(f"{process}@end", float("nan")))


SCALE_PANELS: dict[str, dict[str, Callable[[Row], float]]] = {
    "seconds": {
        "list floor (pages x latency)": lambda r: r["list_floor_s"],
        "first sample": lambda r: r["first_sample_s"],
        "epoch 0": lambda r: r["epoch0_s"],
        "restart: next sample": lambda r: r["restart_sample_s"],
        "cut (CLI)": lambda r: r["cut_cli_s"],
        "lookup cut": lambda r: r["lookup_cut_s"],
        "status (CLI)": lambda r: r["status_s"],
        "scandir of a fresh epoch": lambda r: r["scandir_s"],
    },
    "MB": {
        "index on disk": lambda r: r["index_bytes"] / 1e6,
        **{f"{p} RSS at the end": _rss(p) for p in ("supervisor", "sampler", "fuse")},
    },
    "samples/s": {
        "fetch while listing": lambda r: r["while_listing"].get("samples_per_s", float("nan")),
        "fetch after listing": lambda r: r["after_listing"].get("samples_per_s", float("nan")),
    },
}


def scale_series(rows: Sequence[Row]) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """benchmarks/scale.py's results: per panel (unit), each figure's (keys, values), sorted by keys."""
    ordered = sorted(rows, key=lambda r: r["keys"])
    keys = [int(r["keys"]) for r in ordered]
    return {unit: {name: (keys, [float(value(r)) for r in ordered]) for name, value in figures.items()}
            for unit, figures in SCALE_PANELS.items()}


# ---------------------------------------------------------------------------------- drawing
def pyplot() -> Any:
    """matplotlib's pyplot on the headless Agg backend; without matplotlib, the benchmark stops
    with the line that says what to install (exit status 2)."""
    try:
        import matplotlib
    except ModuleNotFoundError as e:
        harness.missing_module(e)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def commit() -> str:
    """The short commit of the checkout this epochfs runs from, ``+ changes`` when the tracked
    files differ from it; ``unknown`` outside a checkout. Read only: no index refresh."""
    import epochfs

    top = Path(epochfs.__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(top), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()
        dirty = subprocess.run(["git", "--no-optional-locks", "-C", str(top), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True, timeout=30,
                               check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head} + changes" if dirty else head


def heading(what: str) -> str:
    """A plot's title: what it shows, the commit and the date (UTC)."""
    return f"{what}\ncommit {commit()}, {time.strftime('%Y-%m-%d', time.gmtime())}"


def ratio_figure(bars: Sequence[Bar], *, title: str) -> Figure:
    """Horizontal bars of ``bars``' ratios (first on top), their ranges as error bars, a line at 1.0x."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.32 * max(1, len(bars))), dpi=DPI, layout="constrained")
    ys = list(range(len(bars)))
    ratios = [b.ratio for b in bars]
    errors = [[b.ratio - b.low for b in bars], [b.high - b.ratio for b in bars]]
    colours = ["#2ca02c" if b.ratio >= 1.0 else "#1f77b4" for b in bars]
    ax.barh(ys, ratios, xerr=errors, color=colours, height=0.6, capsize=3,
            error_kw={"elinewidth": 1, "ecolor": "#333"})
    ax.axvline(1.0, color="#d62728", linestyle="--", linewidth=1)
    for y, b in zip(ys, bars, strict=True):
        ax.text(b.high, y, f"  {b.ratio:.2f}x", va="center", fontsize=8)
    ax.set_yticks(ys, [b.label for b in bars], fontsize=8)
    ax.invert_yaxis()
    high = max([1.0, *(b.high for b in bars)])
    low = min([1.0, *(b.low for b in bars if b.low > 0)])
    if high / low > LOG_SPAN:  # a loaded machine's outlier would squash every other bar near 0
        ax.set_xscale("log", base=4)  # ticks 4x apart: 1/16x, 1/4x, 1x, 4x, ...
        ax.set_xlim(low / 1.5, high * 2.5)
        ax.xaxis.set_major_formatter(lambda v, _pos: f"{v:.3g}x")
    else:
        ax.set_xlim(0, high * 1.18)
    ax.set_xlabel("ratio to the baseline of the same run (bar: median; whiskers: range of the runs; "
                  "dashed: 1.0x)", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="x", linewidth=0.4, alpha=0.6)
    return fig


def _count(n: int) -> str:
    """``10k``, ``1M``, ``2500``: a size as ``--sizes`` takes it."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def scale_figure(series: Mapping[str, Mapping[str, tuple[Sequence[int], Sequence[float]]]], *,
                 title: str) -> Figure:
    """One panel per unit, each figure a line against the keys (log x); the list floor dashed."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(series), figsize=(5 * len(series), 4.2), dpi=DPI, layout="constrained",
                             squeeze=False)
    for ax, (unit, figures) in zip(axes[0], series.items(), strict=True):
        for name, (keys, values) in figures.items():
            ax.plot(keys, values, marker="o", markersize=3, label=name,
                    linestyle="--" if name.startswith("list floor") else "-")
        ax.set_xscale("log")
        keys = sorted({k for xs, _ in figures.values() for k in xs})
        ax.set_xticks(keys, [_count(k) for k in keys], fontsize=8)  # the sizes run, as --sizes names them
        ax.minorticks_off()
        ax.set_xlabel("keys in the remote", fontsize=8)
        ax.set_ylabel(unit, fontsize=8)
        ax.grid(True, which="both", linewidth=0.4, alpha=0.6)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig


def draw(kind: str, rows: Sequence[Row]) -> Figure:
    """The figure of a benchmark's rows (``kind``: ``scale`` or one of :data:`RATIO_KINDS`)."""
    if kind == "scale":
        return scale_figure(scale_series(rows), title=heading("epochfs bench scale: each figure against "
                                                               "the remote's size"))
    bars, what = RATIO_KINDS[kind]
    return ratio_figure(bars(rows), title=heading(what))


def save(fig: Figure, path: Path) -> Figure:
    """Save ``fig`` as the PNG at ``path`` (dpi 100: tens of KB), free it, say where; returns it."""
    fig.savefig(path, dpi=DPI)
    pyplot().close(fig)
    print(f"plot written to {path}", flush=True)
    return fig


def write(kind: str, rows: Sequence[Row], path: Path) -> Figure:
    """Draw ``rows`` and save the PNG at ``path``; returns the figure."""
    return save(draw(kind, rows), path)
