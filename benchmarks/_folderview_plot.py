"""The picture of ``epochfs bench folderview`` (``--plot FILE.png``), drawn from its ``--json``.

The benchmark's point is how the folder view's costs grow with the epoch: so the trainer's wait
(ask -> ``epoch-N/`` visible) and the whole publish and retire are curves against the entries
(log-log, whiskers: the range of the rounds where the JSON has one), the FUSE view's answer to the
same ask beside the wait, and the bare cost of the same links beside the publish (dashed: what any
tree of symlinks costs). The reads, where run, are ratios to direct reads in the same run (bars,
a line at 1.0x), as the mount benchmark's picture draws them.

    python -m epochfs.benchmarks._folderview_plot folderview.json --out docs/folderview.png

The rows-to-curves functions are plain Python (the tests read them against rows); matplotlib is
imported only to draw (:func:`._plots.pyplot`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochfs.benchmarks._plots import DPI, Bar, _count, heading, pyplot

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Row = Mapping[str, Any]
TITLE = "epochfs bench folderview: the folder view's costs against the epoch's entries"


@dataclass(frozen=True)
class Curve:
    """One figure against the entries: its medians, and each point's range (low = high: none)."""

    label: str
    entries: list[int]
    seconds: list[float]
    low: list[float]
    high: list[float]
    dashed: bool = False


def _curve(label: str, rows: Sequence[Row], key: str, span: str | None = None, *,
           dashed: bool = False) -> Curve | None:
    """``rows``' ``key`` against their entries (sorted), the range from ``span``: a key pair
    ``"min,max"`` or one key holding ``[min, max]``; None where no row has ``key``."""
    ordered = sorted((r for r in rows if r.get(key) is not None), key=lambda r: r["entries"])
    if not ordered:
        return None
    values = [float(r[key]) for r in ordered]
    if span is None:
        lows, highs = values, values
    elif "," in span:
        lo, hi = span.split(",")
        lows, highs = [float(r[lo]) for r in ordered], [float(r[hi]) for r in ordered]
    else:
        lows, highs = [float(r[span][0]) for r in ordered], [float(r[span][1]) for r in ordered]
    return Curve(label, [int(r["entries"]) for r in ordered], values,
                 [min(v, lo) for v, lo in zip(values, lows, strict=True)],
                 [max(v, hi) for v, hi in zip(values, highs, strict=True)], dashed)


def wait_curves(rows: Sequence[Row]) -> list[Curve]:
    """The ``wait`` rows: per mode (snapshot, schedule), the folder view's ask -> visible (range:
    the rounds), the store's cut inside it, and the FUSE view's lookup (range: the rounds) and its
    first look inside the new epoch."""
    curves = []
    for mode in dict.fromkeys(r.get("mode", "snapshot") for r in rows):
        mine = [r for r in rows if r.get("mode", "snapshot") == mode]
        tag = "" if mode == "snapshot" else f" ({mode} mode)"
        for curve in (_curve(f"folder view: ask -> epoch-N visible{tag}", mine, "wait_s",
                             "wait_min_s,wait_max_s"),
                      _curve(f"of which the store's cut{tag}", mine, "cut_s", dashed=True),
                      _curve(f"FUSE view: ask (lookup) -> epoch-N{tag}", mine, "fuse_wait_s",
                             "fuse_wait_spread_s"),
                      _curve(f"FUSE view: first look inside epoch-N{tag}", mine, "fuse_entry_s")):
            if curve is not None:
                curves.append(curve)
    return curves


def publish_curves(rows: Sequence[Row]) -> list[Curve]:
    """The ``publish`` rows: per link root, the publish of a whole epoch, the bare links (a plain
    mkdir and symlink loop, dashed) and the retire, medians of the rounds."""
    curves = []
    for root in dict.fromkeys(r["link_root"] for r in rows):
        mine = [r for r in rows if r["link_root"] == root]
        tag = f"{root} link root ({mine[0]['target_bytes']} B targets)"
        for curve in (_curve(f"publish whole, {tag}", mine, "publish_s"),
                      _curve(f"bare links, {tag}", mine, "bare_links_s", dashed=True),
                      _curve(f"retire, {tag}", mine, "retire_s")):
            if curve is not None:
                curves.append(curve)
    return curves


READ_RATIOS = (("first_cold", "first read, cold / direct cold"),
               ("first_warm", "first read, warm / direct warm"),
               ("repeat", "repeat / direct warm"))


def read_bars(rows: Sequence[Row], *, dropped: bool = True) -> list[Bar]:
    """The ``reads`` rows: per size, the folder view's then the FUSE view's three ratios to direct
    reads (medians of the interleaved runs: the JSON keeps no per-run range). Without ``dropped``
    (``--no-drop``) the "cold" phases are warm too, and the labels say so."""
    bars = []
    for r in rows:
        for view in ("folder", "fuse"):
            for key, text in READ_RATIOS:
                ratio = r.get(f"ratio_{view}_{key}")
                if ratio is not None:
                    cold = "" if dropped or "cold" not in key else " (not dropped)"
                    bars.append(Bar(f"{r['size']} x{r['files']}: {view} view, {text}{cold}",
                                    float(ratio), float(ratio), float(ratio)))
    return bars


# ---------------------------------------------------------------------------------- drawing
def _curves_panel(ax: Axes, curves: Sequence[Curve], what: str) -> None:
    """Each curve a line with markers and whiskers against the entries, log-log."""
    for c in curves:
        errors = [[v - lo for v, lo in zip(c.seconds, c.low, strict=True)],
                  [hi - v for v, hi in zip(c.seconds, c.high, strict=True)]]
        ax.errorbar(c.entries, c.seconds, yerr=errors, marker="o", markersize=3, capsize=3, label=c.label,
                    linestyle="--" if c.dashed else "-", linewidth=1.2, elinewidth=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    entries = sorted({e for c in curves for e in c.entries})
    ax.set_xticks(entries, [_count(e) for e in entries], fontsize=8)
    ax.minorticks_off()
    if len(entries) == 1:  # one size: a point, not a squeezed axis
        ax.set_xlim(entries[0] / 3, entries[0] * 3)
    ax.set_xlabel("entries in the epoch", fontsize=8)
    ax.set_ylabel("seconds (median; whiskers: range of the rounds)", fontsize=8)
    ax.set_title(what, fontsize=9)
    ax.grid(True, which="both", linewidth=0.4, alpha=0.6)
    ax.legend(fontsize=7)


def _bars_panel(ax: Axes, bars: Sequence[Bar]) -> None:
    """Horizontal bars of the read ratios (first on top), a dashed line at 1.0x."""
    ys = list(range(len(bars)))
    ax.barh(ys, [b.ratio for b in bars], height=0.6,
            color=["#2ca02c" if b.ratio >= 1.0 else "#1f77b4" for b in bars])
    ax.axvline(1.0, color="#d62728", linestyle="--", linewidth=1)
    for y, b in zip(ys, bars, strict=True):
        ax.text(b.ratio, y, f"  {b.ratio:.2f}x", va="center", fontsize=8)
    ax.set_yticks(ys, [b.label for b in bars], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max([1.0, *(b.ratio for b in bars)]) * 1.18)
    ax.set_xlabel("reads: MB/s / direct reads' in the same run (median of the runs; dashed: 1.0x)",
                  fontsize=8)
    ax.grid(True, axis="x", linewidth=0.4, alpha=0.6)


def figure(results: Row, *, title: str) -> Figure:
    """The panels the results have: the wait and the publish (curves, side by side), the reads
    (bars, below, across)."""
    panels: list[tuple[str, Any]] = []
    if results.get("wait"):
        panels.append(("wait", wait_curves(results["wait"])))
    if results.get("publish"):
        panels.append(("publish", publish_curves(results["publish"])))
    bars = read_bars(results.get("reads") or [], dropped=bool(results.get("dropped", True)))
    if not panels and not bars:
        raise ValueError("nothing to draw: the results have no wait, publish or reads rows")
    plt = pyplot()
    top = [name for name, _ in panels]
    layout = ([top] if top else []) + ([["reads"] * max(1, len(top))] if bars else [])
    heights = ([4.0] if top else []) + ([0.6 + 0.22 * len(bars)] if bars else [])
    fig, axes = plt.subplot_mosaic(layout, figsize=(5.5 * max(1, len(top)), sum(heights) + 0.8), dpi=DPI,
                                   layout="constrained", height_ratios=heights)
    names = {"wait": "the trainer's wait at an epoch boundary",
             "publish": "publishing a whole epoch, retiring one"}
    for name, curves in panels:
        _curves_panel(axes[name], curves, names[name])
    if bars:
        _bars_panel(axes["reads"], bars)
    fig.suptitle(title, fontsize=10)
    return fig


def save(fig: Figure, path: Path) -> None:
    """``fig`` as a PNG of at most 256 colours (Pillow, which matplotlib requires): a plot loses
    nothing to the palette, and this one, three panels, is half the size (tens of KB)."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=256, dither=Image.Dither.NONE).save(path, optimize=True)


def write(path: Path, results: Row) -> Figure:
    """Draw ``results`` (the benchmark's JSON) and save the PNG at ``path``; returns the figure."""
    fig = figure(results, title=heading(TITLE))
    save(fig, path)
    pyplot().close(fig)
    print(f"plot written to {path}", flush=True)
    return fig


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, help="a --json file of benchmarks/folderview.py")
    p.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = p.parse_args(argv)
    write(args.out, json.loads(args.results.read_text()))


if __name__ == "__main__":
    main()
