"""The picture of ``epochfs bench fuse_memory --plot FILE.png``: the FUSE server's memory per file
and its times against the files of the epoch (``--files 10000 100000``: one point per size).

Two panels, as :func:`._plots.scale_figure` draws them (log x, one line per figure):

- **bytes per file**: what the tree keeps and the tree-only process's RSS growth (every size), and
  per libfuse API mounted (sizes up to ``--mount-max``) the server's RSS growth after the scan and
  its total with the manifest read; issue 14's aim, 200 B per live file, dashed;
- **seconds**: the tree's build (without tracemalloc) and, per API, the scandir of every folder of
  the epoch through the mount.

matplotlib is imported only when drawing (:func:`._plots.pyplot`); :func:`memory_series` is plain
Python, so the tests check what is drawn against the rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochfs.benchmarks._plots import heading, save, scale_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Row = Mapping[str, Any]
Series = dict[str, dict[str, tuple[list[int], list[float]]]]
AIM = 200.0
"""Issue 14's aim: under 200 bytes per live file."""
TREE = {"bytes per file": {"tree kept (tracemalloc)": "tree_bytes_per_file",
                           "tree-only process RSS growth": "rss_bytes_per_file"},
        "seconds": {"tree build": "build_s"}}
"""Per panel, the figures of the tree step: one per size (every row of a size has the same)."""
MOUNT = {"bytes per file": {"server RSS after the scan": "server_rss_bytes_per_file",
                            "server total, manifest read": "server_total_bytes_per_file"},
         "seconds": {"scandir of the epoch": "scandir_s"}}
"""Per panel, the figures of a mount: one per size and API (``api`` ``-``: not mounted, none)."""


def memory_series(rows: Sequence[Row]) -> Series:
    """Per panel, each figure's (files, values) sorted by files: the tree's, then each API's (in
    the order run) labelled with it; a figure a row lacks is not a point."""
    ordered = sorted(rows, key=lambda r: r["files"])
    trees = list({r["files"]: r for r in ordered}.values())  # one row per size
    series: Series = {unit: {} for unit in TREE}
    for unit, figures in TREE.items():
        for name, key in figures.items():
            series[unit][name] = ([int(r["files"]) for r in trees], [float(r[key]) for r in trees])
    for api in dict.fromkeys(r["api"] for r in rows if r["api"] != "-"):
        mounted = [r for r in ordered if r["api"] == api]
        for unit, figures in MOUNT.items():
            for name, key in figures.items():
                have = [r for r in mounted if key in r]
                series[unit][f"{name} ({api})"] = ([int(r["files"]) for r in have],
                                                   [float(r[key]) for r in have])
    return series


def figure(rows: Sequence[Row]) -> Figure:
    """:func:`._plots.scale_figure` of :func:`memory_series`, the x axis named, the aim dashed."""
    fig = scale_figure(memory_series(rows), title=heading(
        "epochfs bench fuse_memory: the FUSE server's memory per file and its times against the "
        "files of epoch 0"))
    for ax in fig.axes:
        ax.set_xlabel("files in epoch 0", fontsize=8)
        if ax.get_ylabel() == "bytes per file":
            ax.axhline(AIM, color="#d62728", linestyle="--", linewidth=1, label=f"the aim: {AIM:.0f} B")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=7)  # again, with the aim
    return fig


def write(path: Path, rows: Sequence[Row]) -> Figure:
    """Draw ``rows`` (the benchmark's JSON rows) and save the PNG at ``path``; returns the figure."""
    return save(figure(rows), path)
