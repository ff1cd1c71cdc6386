"""The fairness benchmark's table (:mod:`epochfs.benchmarks.fairness`): one :class:`Row` per epoch
of a key space, its markdown cells with each ratio judged against its aim, and over ``--runs`` the
median and range of each figure per key space and epoch.

Apart from the run (sidecars, endpoints, cuts) so that each reads on its own; the tests render
tables from hand-made rows without running anything.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

from epochfs.benchmarks import _fairness_stats as stats
from epochfs.benchmarks import harness
from epochfs.benchmarks.scale import label


@dataclass
class Row:
    """One epoch of one key space, beside random samples of its size."""

    shape: str
    spec: str
    keys: int
    strata: int
    epoch: int
    at_s: float
    """Seconds from the sidecar's start to the lookup that found the epoch."""
    listed: int
    """Keys in the catalog at the cut."""
    samples: int
    covered: int
    covered_random: float
    covered_ratio: float
    tv: float
    tv_random: float
    tv_ratio: float
    ks: float
    ks_random: float
    ks_ratio: float
    ks_same_mix: float
    """The in-folder KS of random samples with this epoch's count in each folder."""
    ks_same_mix_ratio: float
    listed_tv: float = float("nan")
    """The folder-mix TV of the keys listed by the cut (the catalog's first ``listed`` rows, in
    listing order) against the dataset's: an epoch can be no fairer than what was listed, so this
    tells a lopsided listing from a fetch order that strays from what was listed."""
    run: int = 0
    """Which of ``--runs`` runs of the key space (run-to-run spread: the cut times and sample
    counts move with the machine's load)."""
    order: int = 0
    """The sampling order of the run (the sidecar's ``--seed``: ``--sampler-seed``). Each epoch is
    about the lowest-ranked keys listed by its cut, so runs of one order repeat its draw; runs
    of several orders (``--sampler-seed 7,11,12``) spread over the draws too."""
    random_miss_tv: float = float("nan")
    """The share of ``--miss-trials`` uniform random samples of this size whose TV, as a ratio to
    ``tv_random``, misses the aim (over 2): how often chance alone misses it."""
    random_miss_folders: float = float("nan")
    """The same for folders covered (a ratio to ``covered_random`` under 0.9)."""
    miss_trials: int = 0
    """The random samples drawn for ``random_miss_tv`` and ``random_miss_folders``."""
    largest_share: float = float("nan")
    """The share of the epoch's samples in the largest folder (stratum), beside
    ``largest_share_dataset``, that folder's share of the dataset: tells a large folder
    under-drawn from one over-drawn, which a TV alone does not (JSON only)."""
    largest_share_dataset: float = float("nan")
    prefix_tv: float = float("nan")
    """The folder-mix TV of the sampling order's own first ``samples`` keys among those listed by
    the cut (lowest ``keyorder.rank(order, key)`` first): what a sampler that follows the order
    exactly would hold."""
    prefix_tv_ratio: float = float("nan")
    """``prefix_tv`` to ``tv_random``: the order's own luck. Epochs are nested prefixes of one
    order, so a lucky or unlucky front stays in every epoch of the run."""
    sampler_vs_order: float = float("nan")
    """``tv`` / ``prefix_tv``: near 1.0 when the sampler drew what the order's front holds (a TV
    ratio far from 1 is then the order's draw, not the sampler's fault)."""
    prefix_shared: int = 0
    """The epoch's keys among the order's first ``samples`` listed keys: with few outside (keys
    in flight at the cut), a ``sampler_vs_order`` far from 1 is two small TVs apart by those few."""


MISSES = "random misses: TV, folders"
SUMMARY_COLUMNS = ("shape", "epoch", "runs", "cut at (s)", "samples", "folders ratio", "TV ratio",
                   "KS ratio", "KS ratio, same mix", MISSES, "order's first N: TV ratio", "sampler vs order")


def _spread(values: list[float], fmt: str) -> str:
    """``median [min-max]`` of ``values`` (the median alone for one)."""
    values = sorted(values)
    mid = statistics.median(values)
    if len(values) == 1:
        return format(mid, fmt)
    return f"{format(mid, fmt)} [{format(values[0], fmt)}-{format(values[-1], fmt)}]"


def summary(rows: list[Row]) -> list[dict[str, str | int]]:
    """Per key space and epoch over the runs: the median of each figure and its range."""
    groups: dict[tuple[str, int], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.shape, r.epoch), []).append(r)
    return [{"shape": shape, "epoch": epoch, "runs": len(rs),
             "cut at (s)": _spread([r.at_s for r in rs], ".1f"),
             "samples": _spread([float(r.samples) for r in rs], ".0f"),
             "folders ratio": _spread([r.covered_ratio for r in rs], ".2f"),
             "TV ratio": _spread([r.tv_ratio for r in rs], ".2f"),
             "KS ratio": _spread([r.ks_ratio for r in rs], ".2f"),
             "KS ratio, same mix": _spread([r.ks_same_mix_ratio for r in rs], ".2f"),
             MISSES: f"{_spread([r.random_miss_tv for r in rs], '.0%')}, "
                     f"{_spread([r.random_miss_folders for r in rs], '.0%')}",
             "order's first N: TV ratio": _spread([r.prefix_tv_ratio for r in rs], ".2f"),
             "sampler vs order": _spread([r.sampler_vs_order for r in rs], ".2f")}
            for (shape, epoch), rs in groups.items()]


COLUMNS = ("shape", "keys", "strata", "epoch", "cut at (s)", "listed", "samples",
           "folders covered (random)", "ratio", "folder-mix TV (random)", "ratio",
           "in-folder KS (random)", "ratio", "KS ratio, same mix", MISSES, "listed keys' TV",
           "order's first N: TV (ratio)", "sampler vs order (keys shared)")


def judged(value: float, missed: bool, chance: float) -> str:
    """A ratio, marked when it misses its aim with how often a random sample misses it too."""
    return f"{harness.times(value)} (miss, chance {chance:.0%})" if missed else harness.times(value)


def cells(r: Row) -> list[str]:
    return [r.shape, label(r.keys), str(r.strata), str(r.epoch), f"{r.at_s:.1f}", str(r.listed),
            str(r.samples),
            f"{r.covered} ({r.covered_random:.0f})",
            judged(r.covered_ratio, r.covered_ratio < stats.COVERED_AIM, r.random_miss_folders),
            f"{r.tv:.3f} ({r.tv_random:.3f})",
            judged(r.tv_ratio, r.tv_ratio > stats.TV_AIM, r.random_miss_tv),
            f"{r.ks:.3f} ({r.ks_random:.3f})", harness.times(r.ks_ratio), harness.times(r.ks_same_mix_ratio),
            f"{r.random_miss_tv:.0%}, {r.random_miss_folders:.0%}", f"{r.listed_tv:.3f}",
            f"{r.prefix_tv:.3f} ({harness.times(r.prefix_tv_ratio)})",
            f"{harness.times(r.sampler_vs_order)} ({r.prefix_shared}/{r.samples})"]


def source() -> str:
    """The commit of the checkout this epochfs runs from (``+ changes`` when it has any), or unknown."""
    import epochfs

    top = Path(epochfs.__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(top), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(top), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return f"{head} + uncommitted changes ({top})" if dirty else f"{head} ({top})"


def _run(r: Row, orders: list[int]) -> str:
    """A row's run, with its sampling order where the runs have several."""
    return f"{r.run} (order {r.order})" if len(orders) > 1 else str(r.run)


def markdown(rows: list[Row], ns: argparse.Namespace, argv: list[str], specs: list[str]) -> str:
    trials = "/".join(sorted({str(r.miss_trials) for r in rows}))
    lines = [f"commit {source()}",
             f"command: python -m epochfs.benchmarks.fairness {shlex.join(argv)}".rstrip(), "",
             f"{ns.size} B objects, {ns.list_latency * 1000:.0f} ms per listing page, epoch N cut at "
             f"(N + 1) x {ns.every:g} s from the sidecar's start, strata: {ns.strata} folders, random: "
             f"median of {ns.draws} draws; ratio = epoch / random; KS ratio, same mix: to random samples "
             "with the epoch's count in each folder (the spread inside folders alone); random misses: "
             f"of {trials} more random samples of the epoch's size, the share over 2x the random "
             "TV and under 0.9x the random folders (a miss by chance; docs/fairness-floor.md); order's "
             "first N: the sampling order's own first N keys of those listed by the cut (N: the epoch's "
             "samples), its TV and ratio to random (the order's luck); sampler vs order: epoch TV / that "
             "TV (1.00x: the sampler drew the order's front), and the epoch's keys among the order's "
             "first N", "",
             ]
    orders = sorted({r.order for r in rows})
    if ns.runs > 1:
        over = (f" of sampling orders {', '.join(map(str, orders))} (the sidecar's --seed, one a run "
                "in turn)" if len(orders) > 1 else f" of one sampling order ({orders[0] if orders else 0}: "
                "each run repeats its draw)")
        lines += [f"Over {ns.runs} runs{over}: the median and [the range] of each figure", "",
                  "| " + " | ".join(SUMMARY_COLUMNS) + " |", "|" + "---|" * len(SUMMARY_COLUMNS)]
        lines += ["| " + " | ".join(str(s[c]) for c in SUMMARY_COLUMNS) + " |" for s in summary(rows)]
        lines += ["", "Every run:", ""]
    lines += ["| " + " | ".join(COLUMNS) + (" | run |" if ns.runs > 1 else " |"),
              "|" + "---|" * (len(COLUMNS) + (ns.runs > 1))]
    lines += ["| " + " | ".join(cells(r)) + (f" | {_run(r, orders)} |" if ns.runs > 1 else " |")
              for r in rows]
    lines += ["", "key spaces: " + "; ".join(specs)]
    return "\n".join(lines)
