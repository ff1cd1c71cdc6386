"""The dashboard's picture, drawn: the panels where the dashboard places them (``gridPos``), one line
per series in the panel's unit, stat and gauge panels as their value in big text, a panel without
data as the reason, into one PNG (matplotlib, Agg).

Apart from :mod:`.dashboard` (the run) because it is the one part that needs matplotlib, imported
when :func:`draw` runs.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from epochfs.benchmarks import harness
from epochfs.benchmarks._dashboard_panels import Panel, Series

STAT_TYPES = frozenset({"stat", "gauge", "bargauge"})
"""Panels drawn as their last value in big text."""

BINARY = ("B", "KiB", "MiB", "GiB", "TiB")


def unit_scale(unit: str, values: Sequence[float]) -> tuple[float, str]:
    """A factor for the values and the axis label of a Grafana unit."""
    top = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    if unit in ("bytes", "decbytes"):
        base = 1024.0 if unit == "bytes" else 1000.0
        names = BINARY if unit == "bytes" else ("B", "kB", "MB", "GB", "TB")
        power = 0
        while top >= base ** (power + 1) and power < len(names) - 1:
            power += 1
        return 1.0 / base**power, names[power]
    if unit == "percentunit":
        return 100.0, "%"
    if unit == "percent":
        return 1.0, "%"
    if unit == "s":
        return (1000.0, "ms") if 0 < top < 1 else (1.0, "s")
    if unit == "ms":
        return 1.0, "ms"
    if unit in ("MBs", "MBps"):
        return 1.0, "MB/s"
    if unit in ("Bps", "binBps"):
        return 1.0 / 2**20, "MiB/s"
    if unit in ("ops", "reqps"):
        return 1.0, "/s"
    return 1.0, ""


def value_text(value: float, unit: str) -> str:
    scale, label = unit_scale(unit, [value])
    if not math.isfinite(value):
        return "no data"
    shown = value * scale
    digits = 0 if abs(shown) >= 100 else 1 if abs(shown) >= 10 else 2
    return f"{shown:.{digits}f}" + (f" {label}" if label not in ("", "%") else label)


def plain(text: str) -> str:
    """Text matplotlib shows as it is (a ``$`` pair would start math)."""
    return text.replace("$", r"\$")


def _no_data(ax: Any, p: Panel) -> None:
    reasons = "\n".join(dict.fromkeys(t.why_empty for t in p.targets if t.why_empty))
    ax.text(0.5, 0.5, plain("No data\n" + reasons), ha="center", va="center", wrap=True, fontsize=8,
            color="#b00", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _stat(ax: Any, p: Panel, series: list[Series], height_pt: float) -> None:
    """Each series' value (the panel's reduction, the last by default) in big text, sized to the
    panel's height (``height_pt`` points); a gauge's bar."""
    ax.axis("off")
    shown = series[:4]
    for i, s in enumerate(shown):
        value = s.reduce(p.calc)
        yy = 0.6 if len(shown) == 1 else 0.85 - i * 0.7 / (len(shown) - 1)
        size = min(32.0, height_pt * (0.25 if len(shown) == 1 else 0.5 / (len(shown) + 1)))
        ax.text(0.5, yy, value_text(value, s.unit or p.unit), ha="center", va="center", fontsize=size,
                fontweight="bold", color="#2a7", transform=ax.transAxes)
        ax.text(0.5, yy - (0.28 if len(shown) == 1 else 0.1), plain(s.name), ha="center", va="center",
                fontsize=8, color="#444", transform=ax.transAxes)
    if p.type == "gauge" and len(shown) == 1 and math.isfinite(shown[0].reduce(p.calc)):
        value = shown[0].reduce(p.calc)
        low = float(p.min) if p.min is not None else 0.0
        high = float(p.max) if p.max is not None else (100.0 if p.unit == "percent" else max(1.0, value))
        filled = min(1.0, max(0.0, (value - low) / (high - low))) if high > low else 0.0
        ax.barh([0.12], [0.8], left=0.1, height=0.06, color="#ddd", transform=ax.transAxes)
        ax.barh([0.12], [0.8 * filled], left=0.1, height=0.06, color="#2a7", transform=ax.transAxes)
    if len(series) > len(shown):
        ax.text(0.98, 0.02, f"+{len(series) - len(shown)} more", ha="right", fontsize=7,
                transform=ax.transAxes)


def _lines(ax: Any, series: list[Series], unit: str, colours: Iterator[str],
           limits: tuple[float | None, float | None] = (None, None)) -> list[Any]:
    """``series`` on ``ax`` in ``unit``; the panel's min and max (raw values) as the axis's limits."""
    scale, label = unit_scale(unit, [v for s in series for v in s.v])
    handles = [ax.plot(s.t, [v * scale for v in s.v], linewidth=1.1, label=plain(s.name),
                       color=next(colours))[0] for s in series]
    low, high = limits
    if low is not None or high is not None:
        ax.set_ylim(bottom=None if low is None else float(low) * scale,
                    top=None if high is None else float(high) * scale)
    ax.tick_params(labelsize=8)
    if label:
        ax.set_ylabel(label, fontsize=8)
    return handles


def _timeseries(ax: Any, p: Panel, series: list[Series], span: float, colours: Iterator[str]) -> None:
    """One line per series; those an override puts on the right axis, or in another unit, on a
    second axis."""
    left = [s for s in series if not s.right and (s.unit or p.unit) == p.unit]
    right = [s for s in series if s not in left]
    handles = _lines(ax, left, p.unit, colours, (p.min, p.max)) if left else []
    if right:
        twin = ax.twinx()
        handles += _lines(twin, right, right[0].unit or p.unit, colours)
    ax.set_xlim(0, span)
    ax.grid(True, linewidth=0.4, alpha=0.6)
    ax.legend(handles=handles, fontsize=7, loc="upper left", ncol=2 if len(series) > 4 else 1,
              framealpha=0.7)


def draw(panels: list[Panel], out: Path, *, title: str, span: float, width: float, dpi: int) -> None:
    """The panels where the dashboard puts them (``gridPos``: 24 columns), into one PNG of at most 256
    colours (a plot loses nothing to the palette, the file two thirds of its size)."""
    try:
        import matplotlib
        from PIL import Image
    except ModuleNotFoundError as e:
        harness.missing_module(e)
    matplotlib.use("Agg")
    import io
    import itertools

    import matplotlib.pyplot as plt
    from matplotlib.gridspec import GridSpec

    height_units = max((p.grid.get("y", 0) + p.grid.get("h", 8) for p in panels), default=8)
    fig = plt.figure(figsize=(width, max(3.0, height_units * width / 24 * 0.45)), dpi=dpi,
                     layout="constrained")
    fig.suptitle(plain(textwrap.fill(title, int(width * 11))), fontsize=11)
    unit_pt = fig.get_figheight() / height_units * 72  # the height of one grid unit, in points
    grid = GridSpec(height_units, 24, figure=fig)
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for p in panels:
        x, y = p.grid.get("x", 0), p.grid.get("y", 0)
        w, h = p.grid.get("w", 12), p.grid.get("h", 8)
        ax = fig.add_subplot(grid[y:y + h, x:x + w])
        ax.set_title(plain(p.title), fontsize=10, loc="left")
        series = p.data_series
        if not series:
            _no_data(ax, p)
        elif p.type in STAT_TYPES:
            _stat(ax, p, series, h * unit_pt)
        else:
            _timeseries(ax, p, series, span, itertools.cycle(palette))
            if y + h >= height_units:
                ax.set_xlabel("seconds since the sidecar started", fontsize=8)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    buffer.seek(0)
    with Image.open(buffer) as image:
        no_dither = getattr(Image, "Dither", Image).NONE  # Image.NONE before Pillow 9.1
        image.convert("RGB").quantize(colors=256, dither=no_dither).save(out, optimize=True)
