"""The picture of ``epochfs bench scale_cached --plot FILE.png``: each figure of a restart against
the samples already cached (``--cached 10k,100k,1M``: one point per size of the same run).

Three panels, as :func:`._plots.scale_figure` draws them (log x, one line per figure):

- **seconds** (log y: the scandir grows with the samples, the rest is a second or less): the
  restart (to the next sample fetched, to ``epoch-0`` served, to ``/readyz``), the CLI commands,
  the lookup cut and the scandir of a fresh epoch; a bare ``python`` start, the CLIs' baseline,
  dashed;
- **MB**: the index on disk and each process's RSS at the end;
- **bytes per file**: the FUSE server's RSS growth over the scandir, per file listed.

matplotlib is imported only when drawing (:func:`._plots.pyplot`); :func:`cached_series` is plain
Python, so the tests check what is drawn against the rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochfs.benchmarks._plots import heading, save, scale_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Row = Mapping[str, Any]
BASELINE = "python start (the CLIs' baseline)"
"""The one figure that is not epochfs's: drawn dashed."""


def _rss(process: str) -> Callable[[Row], float]:
    """A process's RSS at the end of the run (MB); NaN when it was not read."""
    return lambda r: float(r["rss_mb"].get(f"{process}@end", float("nan")))


PANELS: dict[str, dict[str, Callable[[Row], float]]] = {
    "seconds": {
        "restart: next sample": lambda r: r["restart_sample_s"],
        "restart: epoch-0 served": lambda r: r["restart_epoch_s"],
        "restart: /readyz": lambda r: r["restart_ready_s"],
        "status (CLI)": lambda r: r["status_s"],
        "cut (CLI)": lambda r: r["cut_cli_s"],
        BASELINE: lambda r: r["python_start_s"],
        "lookup cut": lambda r: r["lookup_cut_s"],
        "scandir of a fresh epoch": lambda r: r["scandir_s"],
    },
    "MB": {
        "index on disk": lambda r: r["index_bytes"] / 1e6,
        **{f"{p} RSS at the end": _rss(p) for p in ("supervisor", "sampler", "fuse")},
    },
    "bytes per file": {
        "FUSE server's RSS growth over the scandir": lambda r: r["fuse_bytes_per_file"],
    },
}
"""Per panel (its unit), each figure read from a result row."""


def cached_series(rows: Sequence[Row]) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """Per panel, each figure's (cached samples, values), sorted by the samples cached."""
    ordered = sorted(rows, key=lambda r: r["cached"])
    cached = [int(r["cached"]) for r in ordered]
    return {unit: {name: (cached, [float(read(r)) for r in ordered]) for name, read in figures.items()}
            for unit, figures in PANELS.items()}


def figure(rows: Sequence[Row]) -> Figure:
    """:func:`._plots.scale_figure` of :func:`cached_series`, the x axis named, the seconds on a log
    axis, the baseline dashed."""
    first = rows[0]
    ratio = first["keys"] / first["cached"]
    fig = scale_figure(cached_series(rows), title=heading(
        f"epochfs bench scale_cached: the sidecar restarted on a cache of N samples "
        f"({ratio:g} keys per cached sample, {first['size']} B objects)"))
    for ax in fig.axes:
        ax.set_xlabel("samples cached (a complete catalog)", fontsize=8)
        if ax.get_ylabel() == "seconds":
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:g}")
            ax.yaxis.set_minor_formatter(lambda _v, _pos: "")
        for line in ax.get_lines():
            if line.get_label() == BASELINE:
                line.set_linestyle("--")
        # Again, so that it shows the styles as they are now; below the panel, where it hides no line.
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    fig.set_size_inches(15, 5.6)
    return fig


def write(path: Path, rows: Sequence[Row]) -> Figure:
    """Draw ``rows`` (the benchmark's JSON rows) and save the PNG at ``path``; returns the figure."""
    return save(figure(rows), path)
