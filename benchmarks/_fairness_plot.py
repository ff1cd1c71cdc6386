"""A plot of ``epochfs bench fairness`` results: each epoch's folder-mix TV ratio against its cut
time, one line per key space: a PNG drawn by matplotlib (the bench extra's, as the other
benchmarks' plots, :mod:`._plots`) for an ``--out``/``--plot`` ending in ``.png``, else an SVG
written by hand (no plotting library needed).

    python -m epochfs.benchmarks._fairness_plot after.json --before before.json --out docs/fairness.png

The y axis is logarithmic (1x, a random sample's TV, at the bottom; the issue's aim, 2x, dashed);
``--before`` draws a second run's lines dotted, in the same colours.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

COLOURS = {"equal": "#1f77b4", "skewed": "#d62728", "nested": "#2ca02c", "many": "#9467bd",
           "flat": "#8c564b", "mixed": "#ff7f0e"}
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 720, 420, 60, 130, 30, 50
Y_MAX = 64.0


def _lines(rows: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for r in sorted(rows, key=lambda r: (r["shape"], r["at_s"])):
        out.setdefault(r["shape"], []).append((float(r["at_s"]), max(0.5, float(r["tv_ratio"]))))
    return out


def svg(after: list[dict[str, Any]], before: list[dict[str, Any]] | None = None, *, title: str) -> str:
    runs = [(_lines(after), "")] + ([(_lines(before), "2,4")] if before else [])
    t_max = max(t for lines, _ in runs for pts in lines.values() for t, _ in pts)
    x = lambda t: LEFT + (WIDTH - LEFT - RIGHT) * t / max(t_max, 1e-9)  # noqa: E731
    y = lambda v: TOP + (HEIGHT - TOP - BOTTOM) * (1 - math.log2(min(v, Y_MAX)) / math.log2(Y_MAX))  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
             f'<text x="{LEFT}" y="18" font-size="14">{title}</text>']
    for v in (1, 2, 4, 8, 16, 32, 64):
        dash = ' stroke-dasharray="6,3" stroke="#444"' if v == 2 else ' stroke="#ddd"'
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}"{dash}/>')
        parts.append(f'<text x="{LEFT - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v}x</text>')
    for t in range(0, int(t_max) + 1, 2):
        parts.append(f'<text x="{x(t):.1f}" y="{HEIGHT - BOTTOM + 18}" text-anchor="middle">{t}</text>')
    parts.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 12}" text-anchor="middle">'
                 'seconds from the sidecar\'s start to the cut</text>')
    mid = (TOP + HEIGHT - BOTTOM) / 2
    parts.append(f'<text x="14" y="{mid}" transform="rotate(-90 14 {mid})" text-anchor="middle">'
                 'folder-mix TV / a random sample\'s</text>')
    for lines, dash in runs:
        for shape, pts in lines.items():
            colour = COLOURS.get(shape, "#000")
            path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
            style = f' stroke-dasharray="{dash}"' if dash else ""
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{style}/>')
    for i, shape in enumerate(sorted(set().union(*(lines for lines, _ in runs)))):
        ly = TOP + 16 * i + 10
        parts.append(f'<line x1="{WIDTH - RIGHT + 12}" x2="{WIDTH - RIGHT + 32}" y1="{ly}" y2="{ly}" '
                     f'stroke="{COLOURS.get(shape, "#000")}" stroke-width="2"/>')
        parts.append(f'<text x="{WIDTH - RIGHT + 38}" y="{ly + 4}">{shape}</text>')
    if before:
        ly = TOP + 16 * len(COLOURS) + 18
        parts.append(f'<text x="{WIDTH - RIGHT + 12}" y="{ly}">solid: after</text>')
        parts.append(f'<text x="{WIDTH - RIGHT + 12}" y="{ly + 16}">dotted: before</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def figure(after: list[dict[str, Any]], before: list[dict[str, Any]] | None = None, *, title: str) -> Any:
    """The same plot as :func:`svg`, drawn by matplotlib: log y axis from 0.5x, the aim (2x)
    dashed, ``before`` dotted in the same colours."""
    from epochfs.benchmarks._plots import DPI, pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=DPI, layout="constrained")
    for rows, style, which in ((after, "-", "after"), (before or [], ":", "before")):
        for shape, pts in _lines(rows).items():
            ax.plot([t for t, _ in pts], [v for _, v in pts], linestyle=style, marker="o", markersize=3,
                    color=COLOURS.get(shape, "#000"), label=f"{shape} ({which})" if before else shape)
    ax.axhline(2.0, color="#444", linestyle="--", linewidth=1, label="the aim: 2x")
    ax.set_yscale("log", base=2)
    ax.set_ylim(0.5, Y_MAX)
    ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:g}x")
    ax.set_xlabel("seconds from the sidecar's start to the cut", fontsize=8)
    ax.set_ylabel("folder-mix TV / a random sample's", fontsize=8)
    ax.grid(True, linewidth=0.4, alpha=0.6)
    ax.legend(fontsize=7, ncol=2 if before else 1)
    ax.set_title(title, fontsize=10)
    return fig


def write(path: Path, after: list[dict[str, Any]], before: list[dict[str, Any]] | None = None, *,
          title: str) -> None:
    """``path``: a PNG (matplotlib) when it ends in ``.png``, else the hand-written SVG."""
    if path.suffix.lower() == ".png":
        from epochfs.benchmarks._plots import DPI, pyplot

        fig = figure(after, before, title=title)
        fig.savefig(path, dpi=DPI)
        pyplot().close(fig)
    else:
        path.write_text(svg(after, before, title=title))
    print(f"plot written to {path}", flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("after", type=Path, help="a --json file of benchmarks/fairness.py")
    p.add_argument("--before", type=Path, help="another run's --json file, drawn dotted")
    p.add_argument("--out", type=Path, required=True, help="the file to write: .png (matplotlib) or .svg")
    p.add_argument("--title", default="Each epoch's folder mix against a random sample's (bench fairness)")
    args = p.parse_args(argv)
    before = json.loads(args.before.read_text()) if args.before else None
    write(args.out, json.loads(args.after.read_text()), before, title=args.title)


if __name__ == "__main__":
    main()
