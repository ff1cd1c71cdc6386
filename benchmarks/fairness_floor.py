"""How often a uniform random sample misses the fairness aims by itself: the floor under the
per-epoch ratios of ``epochfs bench fairness`` (:mod:`epochfs.benchmarks.fairness`).

The aims (issue 19) judge an epoch against the median of uniform random samples of its size:
folder-mix TV and in-folder KS at most 2x that median, folders covered at least 0.9x. A small
sample over many skewed folders misses them by chance now and then: a random 34-key sample of
100 Zipf-sized folders covers fewer than 0.9x the median's folders in about one draw of five.
This command draws ``--trials`` uniform random samples (without replacement) of each size in
``--sizes`` from each key space shape (:mod:`epochfs.benchmarks._keyspaces`), takes each metric's
median over them, and prints the share of the samples that miss each aim against it: a miss an
epoch shares with chance at that size is no sign of a sampler fault.

No sidecar, endpoint or mount: numpy alone (folder counts by the multivariate hypergeometric
distribution for TV and coverage, positions for KS), seconds for the defaults. Output: one
markdown table (``--markdown FILE`` too) headed by the commit and the command, JSON rows
(``--json FILE``).

    python -m epochfs.benchmarks.fairness_floor                       # every shape, 100k keys
    python -m epochfs.benchmarks.fairness_floor --shapes skewed --sizes 10,34,100 --json f.json
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from epochfs.benchmarks import _fairness_stats as stats
from epochfs.benchmarks import harness
from epochfs.benchmarks._keyspaces import SHAPES, KeySpace, Shape, with_defaults
from epochfs.benchmarks.fairness import source
from epochfs.benchmarks.scale import label, parse_count

DEFAULT_SIZES = (2, 3, 5, 10, 20, 34, 50, 100, 200, 500, 1000, 2000, 5000, 10_000)
"""Sample sizes, about log-spaced from 2 to 10,000 (34: the example of issue 19)."""


@dataclass
class FloorRow:
    """One key space and sample size: random samples' medians and how often they miss each aim."""

    shape: str
    spec: str
    keys: int
    strata: int
    samples: int
    trials: int
    covered_median: float
    tv_median: float
    ks_median: float
    """nan with ``--no-ks``."""
    miss_tv: float
    """The share of the trials with a folder-mix TV over 2x the median."""
    miss_folders: float
    """The share covering fewer than 0.9x the median's folders."""
    miss_ks: float
    """The share with an in-folder KS over 2x the median (nan with ``--no-ks``)."""


def floor(space: KeySpace, bounds: list[int], samples: int, *, trials: int, ks: bool,
          rng: np.random.Generator) -> FloorRow:
    """``trials`` random samples of ``samples`` keys of ``space``, against their own medians."""
    covered, tv = stats.random_mixes(samples, bounds, trials=trials, rng=rng)
    spread = stats.random_ks(samples, bounds, trials=trials, rng=rng) if ks else None
    median = stats.Fairness(samples, float(np.median(covered)), float(np.median(tv)),
                            float(np.median(spread)) if spread is not None else float("nan"))
    misses = stats.miss_fractions(covered, tv, median, spread)
    return FloorRow(shape=space.shape.name, spec=space.shape.spec(), keys=space.count, strata=len(bounds) - 1,
                    samples=samples, trials=trials, covered_median=median.covered, tv_median=median.tv,
                    ks_median=median.ks, miss_tv=misses.tv, miss_folders=misses.folders, miss_ks=misses.ks)


COLUMNS = ("shape", "strata", "samples", "folders (median)", "TV (median)", "KS (median)",
           "misses: TV > 2x", "folders < 0.9x", "KS > 2x")


def _share(value: float) -> str:
    return "-" if value != value else f"{value:.0%}"  # nan (KS not drawn): a dash


def cells(r: FloorRow) -> list[str]:
    return [r.shape, str(r.strata), label(r.samples), f"{r.covered_median:g}", f"{r.tv_median:.3f}",
            "-" if r.ks_median != r.ks_median else f"{r.ks_median:.3f}",
            _share(r.miss_tv), _share(r.miss_folders), _share(r.miss_ks)]


def markdown(rows: list[FloorRow], ns: argparse.Namespace, argv: list[str], specs: list[str]) -> str:
    lines = [f"commit {source()}",
             f"command: python -m epochfs.benchmarks.fairness_floor {shlex.join(argv)}".rstrip(), "",
             f"{ns.trials} uniform random samples (without replacement) per key space and size, strata: "
             f"{ns.strata} folders; each figure's median over them, and the share of them that miss "
             f"each aim against it (TV or KS over {stats.TV_AIM:g}x, folders under {stats.COVERED_AIM:g}x)",
             "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    lines += ["", "key spaces: " + "; ".join(specs)]
    return "\n".join(lines)


def sizes(text: str) -> list[int]:
    """``2,34,100``: the sample sizes, each at least 1."""
    try:
        values = [parse_count(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"sample sizes are counts separated by commas: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"sample sizes must be at least 1: {text!r}")
    return sorted(set(values))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m epochfs.benchmarks.fairness_floor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=",".join(SHAPES), help=f"key spaces (default {','.join(SHAPES)})")
    p.add_argument("--keys", type=parse_count, default=100_000, help="keys per key space: 100k, 1M (100k)")
    p.add_argument("--folders", type=int, help="class folders (default per shape, as bench fairness)")
    p.add_argument("--skew", type=float, help="Zipf exponent of folder sizes (default per shape)")
    p.add_argument("--subfolders", type=int, help="nested: mean sub-folders per class folder (20)")
    p.add_argument("--sizes", type=sizes, default=list(DEFAULT_SIZES),
                   help="sample sizes, comma-separated (default 2 to 10k, about log-spaced); sizes above "
                        "--keys are skipped, with a note")
    p.add_argument("--trials", type=int, default=200, help="random samples per key space and size (200)")
    p.add_argument("--strata", choices=("top", "leaf"), default="top",
                   help="what a key counts in: its top-level class folder (default) or its own folder")
    p.add_argument("--no-ks", action="store_true", help="leave out the in-folder KS (the slowest figure)")
    p.add_argument("--seed", type=int, default=0, help="seed of the key spaces and the random draws (0)")
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument("--markdown", type=Path, help="write the table here")
    ns = p.parse_args(argv)
    if ns.trials < 1:
        p.error("--trials must be at least 1")
    names = [s.strip() for s in ns.shapes.split(",") if s.strip()]
    try:
        shapes = [with_defaults(Shape(n, ns.keys, ns.folders, ns.skew, ns.subfolders, ns.seed))
                  for n in names]
    except ValueError as e:
        p.error(str(e))
    if not shapes:
        p.error("--shapes names no key space")
    wanted = [n for n in ns.sizes if n <= ns.keys]
    if len(wanted) < len(ns.sizes):
        print(f"fairness_floor: skipped {len(ns.sizes) - len(wanted)} sample sizes above the {ns.keys} keys",
              file=sys.stderr)
    if not wanted:
        p.error(f"no sample size is at most --keys ({ns.keys})")
    started = time.monotonic()
    rows = []
    for i, shape in enumerate(shapes):
        space = KeySpace(shape)
        _, bounds = space.strata(ns.strata)
        rng = np.random.default_rng([ns.seed, i])  # a stream per key space: the same flags, the same table
        rows += [floor(space, bounds, n, trials=ns.trials, ks=not ns.no_ks, rng=rng) for n in wanted]
    table = markdown(rows, ns, argv, [s.spec() for s in shapes])
    print(table)
    print(f"fairness_floor: {len(rows)} rows in {time.monotonic() - started:.1f} s", file=sys.stderr)
    harness.write_results(table, rows, markdown=ns.markdown, json_path=ns.json)
    return 0


if __name__ == "__main__":
    harness.entry(main, "fairness_floor")
