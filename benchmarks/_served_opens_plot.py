"""The picture of ``epochfs bench served_opens`` (``--plot FILE.png``), drawn from its ``--json``.

The benchmark's point is a ratio: opens per second while the fanotify counter watches the objects
folder, over opens per second with nothing watching, the same files read from the page cache in the
same run. One bar per run (``_plots.ratio_figure``): the ratio as the benchmark prints it (the
ratio of the medians of as many passes each side, interleaved; rows written before that have the
best watched pass against the best of twice as many unwatched ones, labelled "best of"), whiskers
from any unwatched pass against any watched one (the spread of the passes: the range a loaded
machine gives), and the label says how many passes and whether every open was counted.

    python -m epochfs.benchmarks._served_opens_plot small.json big.json --out docs/served_opens.png

The rows-to-bars function is plain Python (the tests read it against rows); matplotlib is imported
only to draw.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochfs.benchmarks._plots import Bar, _bar, heading, ratio_figure, save

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Row = Mapping[str, Any]
TITLE = "epochfs bench served_opens: opens/s counted by fanotify / unwatched"
XLABEL = ("watched / unwatched opens/s (bar: as printed, median / median pass, best / best where labelled "
          "so; whiskers: every pair of passes)")


def size_text(size: int) -> str:
    """``64 KiB``, ``4 MiB``, ``100 B``: a file size as the docs write it."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def bars(rows: Sequence[Row]) -> list[Bar]:
    """One bar per run, in the rows' order: watched / unwatched throughput as printed (the ratio of
    the medians; a row from before it, the best passes' ratio, labelled so), the range of every
    unwatched pass's seconds over every watched pass's."""
    out = []
    for r in rows:
        pairs = [u / w for u in r["unwatched_s"] for w in r["watched_s"]]
        counted = ("every open counted" if r["counted"] == r["opens"]
                   else f"{r['counted']} of {r['opens']} counted")
        if "ratio_of_medians" in r:
            how, ratio = f"median of {r['repeat']} passes each", float(r["ratio_of_medians"])
        else:
            how, ratio = f"best of {r['repeat']}", float(r["ratio"])
        out.append(_bar(f"{r['files']} x {size_text(r['size'])}, {how}: {counted}", pairs, ratio))
    return out


def figure(rows: Sequence[Row], *, title: str) -> Figure:
    """:func:`bars` drawn by :func:`._plots.ratio_figure`, the x axis saying what bar and whiskers
    are here."""
    fig = ratio_figure(bars(rows), title=title)
    fig.axes[0].set_xlabel(XLABEL, fontsize=8)
    return fig


def write(path: Path, rows: Sequence[Row]) -> Figure:
    """Draw ``rows`` (the benchmark's JSON rows) and save the PNG at ``path``; returns the figure."""
    return save(figure(rows, title=heading(TITLE)), path)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, nargs="+", help="--json files of benchmarks/served_opens.py")
    p.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = p.parse_args(argv)
    write(args.out, [row for f in args.results for row in json.loads(f.read_text())])


if __name__ == "__main__":
    main()
