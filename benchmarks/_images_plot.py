"""The picture of ``epochfs bench images`` (``--plot FILE.png``), drawn from its ``--json``.

The benchmark's point is a ratio: decoded images per second through the mount over the same
DataLoader's on the local files, two reads made next to each other each round. Per run
(``_plots.ratio_figure``): the median of the rounds' ratios (whiskers: their range), then each
round's ratio (which side read first alternates), then the decoding worker's CPU seconds per read,
local over mount (above 1: the mount's worker spent less), which a loaded machine moves far less
than wall time. A dotted line marks the aim, 0.95x.

    python -m epochfs.benchmarks._images_plot mount.json plain.json --out docs/images.png

The results-to-bars function is plain Python (the tests read it against results); matplotlib is
imported only to draw.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochfs.benchmarks._plots import Bar, _bar, heading, ratio_figure, save

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Result = Mapping[str, Any]
AIM = 0.95
TITLE = "epochfs bench images: decoded images/s, epochfs / local files (the same DataLoader)"


def _where(result: Result) -> str:
    """What the epochfs side read: a real sidecar's mount, or the plain folder (``--plain``)."""
    return "plain folder (no FUSE)" if result.get("plain") else "mount"


def bars(results: Sequence[Result]) -> list[Bar]:
    """Per run, in order: the median ratio of the rounds (range: the rounds), each round's ratio,
    and the workers' CPU per read, local / mount (median of the reads; range: each round's pair).
    Several runs are numbered in the labels (``run 1, mount``), in the order given."""
    out = []
    for k, result in enumerate(results):
        where = _where(result) if len(results) == 1 else f"run {k + 1}, {_where(result)}"
        ratios = [float(r) for r in result["ratios"]]
        head = f"{where}, {result['images']} images {result['side']}px, {result['workers']} worker(s)"
        out.append(_bar(f"{head}: median of {len(ratios)} rounds", ratios, float(result["ratio"])))
        for n, ratio in enumerate(ratios):
            first = "mount" if n % 2 == 0 else "local"
            out.append(Bar(f"round {n} ({first} read first)", ratio, ratio, ratio))
        cpu = {side: {r["round"]: float(r["worker_cpu"]) for r in result["reads"] if r["side"] == side}
               for side in ("mount", "local")}
        pairs = [cpu["local"][n] / cpu["mount"][n] for n in cpu["mount"]
                 if cpu["mount"][n] > 0 and n in cpu["local"]]
        if pairs:
            median = statistics.median(cpu["local"].values()) / statistics.median(cpu["mount"].values())
            out.append(_bar(f"{where}: worker CPU s per read, local / mount", pairs, median))
    return out


def figure(results: Sequence[Result], *, title: str) -> Figure:
    """:func:`bars` drawn by :func:`._plots.ratio_figure`, with the aim as a dotted line; the title
    over the whole figure (the labels are long: over the bars alone it is cut off)."""
    fig = ratio_figure(bars(results), title="")
    fig.suptitle(title, fontsize=10)
    fig.axes[0].set_xlabel("epochfs / local (bar: median; whiskers: range of the rounds; dashed: 1.0x)",
                           fontsize=8)
    fig.axes[0].axvline(AIM, color="#444", linestyle=":", linewidth=1, label=f"aim: {AIM}x")
    fig.axes[0].legend(fontsize=7, loc="lower right")
    return fig


def write(path: Path, results: Sequence[Result]) -> Figure:
    """Draw ``results`` (the benchmark's JSON, one per run) and save the PNG at ``path``."""
    return save(figure(results, title=heading(TITLE)), path)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, nargs="+", help="--json files of benchmarks/images.py")
    p.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = p.parse_args(argv)
    write(args.out, [json.loads(f.read_text()) for f in args.results])


if __name__ == "__main__":
    main()
