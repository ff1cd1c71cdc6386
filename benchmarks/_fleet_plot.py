"""The picture of ``epochfs bench fleet --plot FILE.png``: what a job start costs the store and
how long the nodes wait, against the fleet's size.

One run of :mod:`epochfs.benchmarks.fleet` takes a comma list in ``--nodes`` and ``--keys`` and
simulates every pair (in each ``--mode``), so the curve comes from one command and one JSON file,
all on the same parameters and seed. The x axis is whichever of nodes and keys took more values
(nodes on a tie); when the other took several too, each of its values is a line of its own. Two
panels, both log-log (the requests span orders of magnitude and the waits grow with the contention):

- **seconds**: each mode's epoch 0 median (solid) and worst node (dashed) and its listing's median;
  a worst of "not all" (a node without epoch 0 in the simulated time) is left out of the line;
- **requests**: each mode's LIST and GET requests and the SlowDowns among them (dotted).

matplotlib is imported only in :func:`figure` (:func:`._plots.pyplot`); :func:`fleet_series` is
plain Python, so the tests check what is drawn against the rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochfs.benchmarks._plots import DPI, heading, pyplot, save

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Row = Mapping[str, Any]
MODES = {"list": "lists", "index": "--index"}
"""The outcome's ``mode`` as the lines' labels name it (each node lists, or a shared index)."""
FIGURES: dict[str, dict[str, tuple[Callable[[Row], float], str]]] = {
    "seconds": {
        "epoch 0 median": (lambda r: r["epoch0_median_s"], "-"),
        "epoch 0 worst": (lambda r: r["epoch0_worst_s"], "--"),
        "listed median": (lambda r: r["listed_median_s"], ":"),
    },
    "requests": {
        "LIST": (lambda r: r["list_requests"], "-"),
        "GET": (lambda r: r["get_requests"], "--"),
        "SlowDown": (lambda r: r["list_slowdowns"] + r["get_slowdowns"], ":"),
    },
}
"""Per panel (its unit), each figure read from an outcome and its line style."""
AXES = {"nodes": "nodes starting at once", "keys": "keys in the bucket"}


@dataclass(frozen=True)
class Line:
    """One drawn line: its label, style and points (x ascending; NaN where there is no value)."""

    label: str
    style: str
    xs: list[int]
    ys: list[float]


def x_axis(rows: Sequence[Row]) -> str:
    """``nodes`` or ``keys``: the one the run took more values of (nodes on a tie)."""
    return max(("nodes", "keys"), key=lambda k: (len({r[k] for r in rows}), k == "nodes"))


def _finite(v: float) -> float:
    """A value to draw: inf (some node never got there) and NaN (none did) are not points."""
    return float(v) if math.isfinite(v) else math.nan


def fleet_series(rows: Sequence[Row]) -> tuple[str, dict[str, list[Line]]]:
    """The x axis (``nodes`` or ``keys``) and per panel the lines, in order: per mode (as run), per
    value of the other axis (ascending, named only when it took several), each figure."""
    x = x_axis(rows)
    other = "keys" if x == "nodes" else "nodes"
    others = sorted({r[other] for r in rows})
    panels: dict[str, list[Line]] = {unit: [] for unit in FIGURES}
    for mode in dict.fromkeys(r["mode"] for r in rows):
        for value in others:
            runs = sorted((r for r in rows if r["mode"] == mode and r[other] == value), key=lambda r: r[x])
            where = f", {value:,} {other}" if len(others) > 1 else ""
            for unit, figures in FIGURES.items():
                for name, (read, style) in figures.items():
                    panels[unit].append(Line(f"{name} ({MODES.get(mode, mode)}{where})", style,
                                             [int(r[x]) for r in runs], [_finite(read(r)) for r in runs]))
    return x, panels


def _count(n: int) -> str:
    """``100``, ``10k``, ``1M``: a size as the command line names it."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n:,}"


def _tick(v: float, _pos: int | None = None) -> str:
    """A log axis' number as plain text: ``20,000``, ``3``, ``0.5`` (not ``2x10^4``)."""
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def _span(ax: Any) -> float:
    """How many times the y axis' top is its bottom (minor ticks are labelled on a short span)."""
    low, high = ax.get_ylim()
    return float(high / low) if low > 0 else math.inf


def title(rows: Sequence[Row], x: str) -> str:
    """What the picture shows: the axis it runs along, and the other one when it took one value."""
    other = "keys" if x == "nodes" else "nodes"
    values = {r[other] for r in rows}
    fixed = f"{next(iter(values)):,} {other}, " if len(values) == 1 else ""
    size = "the fleet's size" if x == "nodes" else "the bucket's size"
    return (f"epochfs bench fleet (a simulation): a job start against {size} "
            f"({fixed}{rows[0]['folders']} folders; simulated seconds)")


def figure(rows: Sequence[Row]) -> Figure:
    """The two panels of :func:`fleet_series`, log-log, one colour per mode (and other value)."""
    plt = pyplot()
    x, panels = fleet_series(rows)
    fig, axes = plt.subplots(1, len(panels), figsize=(12, 5.4), dpi=DPI, layout="constrained")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (unit, lines) in zip(axes, panels.items(), strict=True):
        per_colour = len(FIGURES[unit])  # the figures of one mode share its colour
        for i, line in enumerate(lines):
            ax.plot(line.xs, line.ys, linestyle=line.style, marker="o", markersize=3, label=line.label,
                    color=colours[(i // per_colour) % len(colours)])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ticks = sorted({v for line in lines for v in line.xs})
        ax.set_xticks(ticks, [_count(v) for v in ticks], fontsize=8)
        ax.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)  # the sizes run only
        ax.yaxis.set_major_formatter(_tick)
        ax.yaxis.set_minor_formatter(lambda v, _pos, a=ax: _tick(v) if _span(a) < 20 else "")
        ax.set_xlabel(AXES[x], fontsize=8)
        ax.set_ylabel(unit, fontsize=8)
        ax.grid(True, linewidth=0.4, alpha=0.6)
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.12))  # below: hides none
    fig.suptitle(heading(title(rows, x)), fontsize=10)
    return fig


def write(path: Path, rows: Sequence[Row]) -> Figure:
    """Draw ``rows`` (the benchmark's JSON rows) and save the PNG at ``path``; returns the figure."""
    return save(figure(rows), path)
