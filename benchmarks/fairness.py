"""How fair a sample each epoch is: every epoch of a real sidecar against uniform random samples of
the same size from the whole dataset (issue 19, "the sampler samples").

The design promises that at every cut an epoch is as close to a uniform random sample of the
dataset as what is known allows (DESIGN.md, "A fair sample, always"), including while the listing
runs. Early epochs were measured to hold the keys that happened to list first: the first pages of
each folder, small folders over-represented. This benchmark measures that per epoch, so that a
change to the listing or the fetch order shows its effect as numbers:

For each key space shape (:mod:`epochfs.benchmarks._keyspaces`: ``equal``, ``skewed``, ``nested``,
``many``, ``flat``, ``mixed`` class folders, ``bigtiny``, one folder holding most keys beside
``--folders`` folders of 3 keys, and ``trainval``, ``train/`` (94%) beside ``val/`` (6%);
``--keys`` keys of ``--size`` bytes), the synthetic S3
endpoint serves it in its own process (ListObjectsV2 pages after ``--list-latency`` each, 20 ms
like S3), and a real ``epochfs sidecar`` (supervisor, sampler, FUSE view; as root) samples it into
a fresh cache large enough that nothing is evicted. Epoch N is cut by a lookup of ``epoch-N``
through the mount at ``(N + 1) x --every`` seconds from the sidecar's start (a lookup above the
newest epoch asks for the cut; ENOENT means not yet, and the lookup is tried again every 50 ms),
and its manifest (``.epochfs/epoch-N.manifest``) gives the sample. Per epoch, against the median
of ``--draws`` uniform random samples of its size (:mod:`epochfs.benchmarks._fairness_stats`):

- **folders covered**: the class folders (strata) the epoch holds keys of, and the ratio to random;
- **folder-mix TV**: the total-variation distance between the epoch's mix of folders and the
  dataset's (0: the same mix), and the ratio to random;
- **in-folder KS**: how evenly the epoch's keys spread inside their folders (the KS distance of
  their positions in the folder to uniform, weighted by the folders' sample counts; near 1 when
  only each folder's first keys are there), and the ratio to random; and the ratio to random
  samples with the epoch's own count in each folder (**KS ratio, same mix**): a folder's KS
  shrinks with its samples, so an epoch crowded into few folders looks better spread than a random
  sample of the whole dataset; the same-mix ratio measures the spread inside folders alone.

A fair epoch has ratios near 1.0 (TV and KS above 1 are worse than random, folders covered below 1).
Beside them, **listed keys' TV**: the folder-mix TV of the keys listed by the cut (the catalog's
first rows in listing order, read from the index after the run) against the dataset's. An epoch
can be no fairer than what was listed: an epoch TV near this one says the listing is lopsided,
one far above it that the fetch order strays from what was listed.
**Order's first N: TV (ratio)**: the folder-mix TV of the sampling order's own first N keys of
those listed by the cut (N: the epoch's samples, lowest ``keyorder.rank(order, key)`` first), what
a sampler that follows its order exactly holds, and its ratio to random: the order's own luck.
**Sampler vs order**: epoch TV / that TV, near 1.00x when the sampler drew the order's front; a
TV ratio far from 1 beside it is the order's draw, which every nested epoch of the run shares
(on two folders, such as ``trainval``'s, about one order in seven stays at 2x for a whole run).
**Random misses: TV, folders**: the share of ``--miss-trials`` further uniform random samples of
the epoch's size that miss the aims themselves against the same median (TV ratio over 2, folders
ratio under 0.9): a sample of a few dozen keys over skewed folders misses the folders aim by chance
often, so an epoch's miss is marked with that chance (``0.50x (miss, chance 19%)``) to tell a miss
by chance from one by design (docs/fairness-floor.md).
Strata: the top-level class folder (``mixed``: ``arrays/`` and each ``train/class-k/``; ``flat``:
deciles of the key order); ``--strata leaf`` uses the folders that hold the files (``nested``'s
sub-folders). Also in each row: the catalog's keys at the cut (how far the listing had come).

The sidecar runs with ``--warm-files 0 --scrub-rate 0`` (nothing reads the epochs; their CPU
would only slow the sampler on a small machine) and ``--min-samples 1``; ``--sidecar-arg`` adds
flags. ``--jobs N`` runs N key spaces at once (each with its own endpoint and sidecar): a smoke
run's wall time is mostly process start-ups, but the key spaces then share the CPU, so their cut
times and sample counts are not those of a run alone; measure with the default of one. Output:
one markdown table (``--markdown FILE`` too) headed by the commit and the command, and JSON rows
(``--json FILE``); the table is rendered by :mod:`epochfs.benchmarks._fairness_table`.
``--runs N`` gives each figure's median and range over N runs; an epoch is about the lowest-ranked
keys listed by its cut, so runs of one sampling order repeat its draw (a lopsided one in every
run): ``--sampler-seed 7,11,12`` gives the runs those orders in turn, and the medians spread over
the draws as well as the listing's and the load's.

    epochfs bench fairness                                     # eight shapes, 100k keys, 6 epochs
    python -m epochfs.benchmarks.fairness --shapes skewed,mixed --keys 1M --markdown f.md
    python -m epochfs.benchmarks.fairness --keys 2000 --epochs 2 --every 1     # a smoke run

A listing whose first round of pages (one a folder) outlasts the first epoch's 3 s wait is what
``--list-latency`` slows the endpoint for: ``bigtiny``'s 301 first pages take about 5 s at 0.25 s
a page on the first round's 16 listers, and ``many``'s 1,024 ranges about 16 s (docs/performance.md,
"A span not reached yet holds the walk at the floor", adds ``--epochs 8 --sampler-seed 0,3,6``)::

    python -m epochfs.benchmarks.fairness --shapes bigtiny --keys 10900 --list-latency 0.25 --every 1.5
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from epochfs.benchmarks import _fairness_stats as stats
from epochfs.benchmarks import harness
from epochfs.benchmarks._fairness_table import (
    COLUMNS,
    MISSES,
    SUMMARY_COLUMNS,
    Row,
    cells,
    judged,
    markdown,
    source,
    summary,
)
from epochfs.benchmarks._keyspaces import SHAPES, KeySpace, Shape, with_defaults
from epochfs.benchmarks._scale_fetch import progress
from epochfs.benchmarks._sidecar_probes import get_json
from epochfs.benchmarks.scale import label, parse_count
from epochfs.sidecar import keyorder
from epochfs.torchclient.layout import read_manifest

__all__ = ["COLUMNS", "MISSES", "SUMMARY_COLUMNS", "Cut", "Row", "cells", "judged", "listed_by", "main",
           "markdown", "row", "source", "summary"]  # the table's names too: the tests and fairness_floor

RETRY = 0.05
"""Seconds between lookups of an epoch not cut yet."""
STOPPING = threading.Event()
"""Set on Ctrl-C or SIGTERM, or when a key space run beside others failed (``--jobs``): each run
stops at its next wait, its sidecar and endpoint stopped by their ``with`` blocks."""


def _pause(seconds: float) -> None:
    """Sleep, but raise KeyboardInterrupt at once when :data:`STOPPING` is set (a run on a worker
    thread of ``--jobs``, which the signal does not reach)."""
    if STOPPING.wait(max(0.0, seconds)):
        raise KeyboardInterrupt


@dataclass
class Cut:
    epoch: int
    at_s: float
    listed: int
    positions: list[int]
    last_row: int = 0
    """The catalog's largest rowid at the cut: the rows up to it are what was listed by then."""
    listed_positions: list[int] | None = None
    """The positions of the keys listed by the cut, read from the index after the run, in the
    run's sampling order (lowest rank first)."""


def last_row(index: Path) -> int:
    """The catalog's largest rowid now (SQLite numbers a table's rows as they are inserted: the
    listing commits pages in the order they come, and nothing is deleted during a first listing)."""
    with contextlib.closing(sqlite3.connect(f"file:{index}?mode=ro", uri=True, timeout=30)) as db:
        row = db.execute("SELECT MAX(rowid) FROM catalog").fetchone()
    return int(row[0] or 0)


def listed_by(space: KeySpace, index: Path, rows: list[int], order: int | None = None) -> list[list[int]]:
    """For each rowid of ``rows``, the positions of the catalog's keys inserted up to it: in the
    listing's order, or with ``order`` in that sampling order (lowest ``keyorder.rank`` first: the
    order's definition, not the rank the sidecar stored, so a wrong stored rank reads as the
    sampler's fault)."""
    with contextlib.closing(sqlite3.connect(f"file:{index}?mode=ro", uri=True)) as db:
        listed = [(int(r), str(k)) for r, k in db.execute("SELECT rowid, key FROM catalog ORDER BY rowid")]
    rowids = [r for r, _ in listed]
    positions = np.array([-1 if (q := space.position(k)) is None else q for _, k in listed], dtype=np.int64)
    # One stable sort for every cut: filtered to a prefix of rowids it is that prefix sorted.
    if order is None:
        by_rank = np.arange(len(listed))
    else:
        ranks = np.array([keyorder.rank(order, k) for _, k in listed], dtype=np.int64)
        by_rank = np.argsort(ranks, kind="stable")
    out = []
    for upto in rows:
        end = bisect.bisect_right(rowids, upto)
        picked = positions[by_rank[by_rank < end]]
        out.append(picked[picked >= 0].tolist())
    return out


@contextlib.contextmanager
def endpoint(shape: Shape, latency: float, log: Path) -> Iterator[str]:
    """The synthetic S3 endpoint serving ``shape`` in its own process."""
    port = harness.free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [*harness.PYTHON, "-m", "epochfs.benchmarks.synthetic_s3", "--keyspace", shape.spec(),
           "--port", str(port), "--list-latency", str(latency)]
    with harness.running(cmd, what="synthetic S3", ready=lambda: bool(get_json(url + "/_stats")), log=log):
        yield url


def look_up(mount: Path, epoch: int, proc: subprocess.Popen[bytes], *, wait: float, log: Path) -> None:
    """``stat epoch-N`` through the mount until it answers (ENOENT: the cut is pending)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            os.stat(mount / f"epoch-{epoch}")
            return
        except OSError:  # ENOENT: not cut yet (or the mount not up: the bare folder has no epochs)
            pass
        if proc.poll() is not None:
            harness.fail(f"the sidecar exited with status {proc.returncode}{harness.log_tail(log)}")
        if time.monotonic() > deadline:
            harness.fail(f"epoch-{epoch} was not cut within {wait:.0f} s{harness.log_tail(log)}")
        _pause(RETRY)


def sample(space: KeySpace, ns: argparse.Namespace, folder: Path, order: int = 0) -> list[Cut]:
    """Run the sidecar (its sampling order ``order``) against ``space`` and cut its epochs on the
    schedule."""
    cache, mount, log = folder / "cache", folder / "mnt", folder / "sidecar.log"
    capacity = ns.capacity or str(max(256 << 20, 2 * space.count * max(space.size, 4096)))
    cuts: list[Cut] = []
    with endpoint(space.shape, ns.list_latency, folder / "s3.log") as url:
        cmd = [*harness.EPOCHFS, "--log-level", "INFO", "sidecar", "--remote", f"s3://{space.bucket}",
               "--endpoint-url", url, "--cache", str(cache), "--mount", str(mount),
               "--health-port", str(harness.free_port()), "--capacity", capacity, "--min-samples", "1",
               "--seed", str(order), "--warm-files", "0", "--scrub-rate", "0", *ns.sidecar_arg]
        started = time.monotonic()
        with harness.running(cmd, what="epochfs sidecar", log=log, env=harness.s3_env(),
                             unmount=[mount]) as proc:
            for epoch in range(ns.epochs):
                _pause(started + (epoch + 1) * ns.every - time.monotonic())
                look_up(mount, epoch, proc, wait=ns.cut_wait, log=log)
                at = time.monotonic() - started
                listed = progress(cache / "index.sqlite").keys
                upto = last_row(cache / "index.sqlite")
                manifest = read_manifest(mount, epoch)
                if manifest is None:
                    harness.fail(f"epoch-{epoch} has no manifest in {mount / '.epochfs'}")
                positions = [space.position(p) for p in manifest.paths]
                unknown = [p for p, q in zip(manifest.paths, positions, strict=True) if q is None]
                if unknown:
                    harness.fail(f"epoch-{epoch} holds {len(unknown)} paths the key space lacks: "
                                 f"{unknown[:3]}")
                cuts.append(Cut(epoch, at, listed, [q for q in positions if q is not None], upto))
                print(f"  {space.shape.name} epoch {epoch} at {at:.1f} s: {len(positions)} samples, "
                      f"{listed} keys listed", file=sys.stderr, flush=True)
    for cut, listed_then in zip(cuts, listed_by(space, cache / "index.sqlite", [c.last_row for c in cuts],
                                                order), strict=True):
        cut.listed_positions = listed_then
    return cuts


def row(space: KeySpace, bounds: list[int], cut: Cut, ns: argparse.Namespace, run: int = 0,
        order: int = 0) -> Row:
    """One epoch's figures beside random samples of its size (``ns``: ``draws``, ``seed``,
    ``miss_trials``), and how often such samples miss the aims by chance."""
    c = stats.compare(cut.positions, bounds, draws=ns.draws, seed=ns.seed)
    misses = stats.random_misses(c.sample.samples, bounds, c.random, trials=ns.miss_trials, seed=ns.seed)
    top, top_dataset = stats.largest_share(cut.positions, bounds)
    front = stats.order_prefix(cut.positions, cut.listed_positions or [], bounds, c)
    return Row(shape=space.shape.name, spec=space.shape.spec(), keys=space.count, strata=c.strata,
               epoch=cut.epoch, at_s=cut.at_s, listed=cut.listed, samples=c.sample.samples,
               covered=int(c.sample.covered),
               covered_random=c.random.covered, covered_ratio=c.covered_ratio, tv=c.sample.tv,
               tv_random=c.random.tv, tv_ratio=c.tv_ratio, ks=c.sample.ks, ks_random=c.random.ks,
               ks_ratio=c.ks_ratio, ks_same_mix=c.same_mix_ks,
               ks_same_mix_ratio=c.same_mix_ks_ratio, run=run, order=order,
               listed_tv=stats.folder_mix_tv(cut.listed_positions or [], bounds),
               random_miss_tv=misses.tv, random_miss_folders=misses.folders, miss_trials=misses.trials,
               largest_share=top, largest_share_dataset=top_dataset, prefix_tv=front.tv,
               prefix_tv_ratio=front.tv_ratio, sampler_vs_order=front.sampler_vs_order,
               prefix_shared=front.shared)


def order_of(ns: argparse.Namespace, run: int) -> int:
    """The sampling order of run ``run``: the next of ``--sampler-seed``'s in turn."""
    orders: list[int] = ns.sampler_seed
    return orders[run % len(orders)]


def measure(shape: Shape, ns: argparse.Namespace, folder: Path, run: int = 0) -> list[Row]:
    space = KeySpace(shape)
    _, bounds = space.strata(ns.strata)
    order = order_of(ns, run)
    return [row(space, bounds, cut, ns, run, order) for cut in sample(space, ns, folder, order)]


def run_shape(shape: Shape, ns: argparse.Namespace, run: int) -> list[Row]:
    """One run of one key space in its scratch folder."""
    with harness.work_dir(ns.dir / shape.name if ns.dir else None) as folder:
        print(f"{shape.name}: {label(shape.keys)} keys ({shape.spec()}), run {run + 1} of "
              f"{ns.runs} ...", file=sys.stderr, flush=True)
        return measure(shape, ns, folder, run)


def run_shapes(shapes: list[Shape], ns: argparse.Namespace, run: int) -> list[Row]:
    """Every key space of one run, ``--jobs`` at a time; the rows in the order of ``shapes``. A
    failure or an interrupt stops the others at their next wait, and is raised once all have
    stopped (their sidecars and endpoints stopped, their scratch removed)."""
    if ns.jobs == 1:
        return [row for shape in shapes for row in run_shape(shape, ns, run)]
    with ThreadPoolExecutor(max_workers=ns.jobs, thread_name_prefix="fairness") as pool:
        futures: list[Future[list[Row]]] = [pool.submit(run_shape, shape, ns, run) for shape in shapes]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)  # a failure stops the others now
            return [row for future in futures for row in future.result()]
        except BaseException:
            STOPPING.set()
            for future in futures:
                future.cancel()  # not started yet: never started
            raise


def _orders(text: str) -> list[int]:
    """``--sampler-seed``: one sampling order or several, comma-separated (integers, as the
    sidecar's ``--seed``)."""
    try:
        orders = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: sampling orders are integers, comma-separated "
                                         "(7 or 7,11,12)") from None
    return orders


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m epochfs.benchmarks.fairness", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=",".join(SHAPES), help=f"key spaces (default {','.join(SHAPES)})")
    p.add_argument("--keys", type=parse_count, default=100_000, help="keys per key space: 100k, 1M (100k)")
    p.add_argument("--folders", type=int, help="class folders (default per shape: equal and skewed 100, "
                   "nested 10, many 5000; bigtiny: its folders of 3 keys, 300)")
    p.add_argument("--skew", type=float, help="Zipf exponent of folder sizes (skewed 1.1; equal and many 0), "
                   "lognormal sigma of nested's sub-folders (1.0)")
    p.add_argument("--subfolders", type=int, help="nested: mean sub-folders per class folder (20)")
    p.add_argument("--seed", type=int, default=0, help="seed of the key spaces and the random draws (0)")
    p.add_argument("--size", type=int, default=4096, help="bytes per object (4096)")
    p.add_argument("--list-latency", type=float, default=0.02, help="seconds per listing page (0.02)")
    p.add_argument("--every", type=float, default=2.0, help="seconds between cuts, from the start (2)")
    p.add_argument("--epochs", type=int, default=6, help="epochs cut per key space (6)")
    p.add_argument("--capacity",
                   help="the sidecar's --capacity (default: twice the dataset, at least 256 MiB)")
    p.add_argument("--strata", choices=("top", "leaf"), default="top",
                   help="what a key counts in: its top-level class folder (default) or its own folder")
    p.add_argument("--draws", type=int, default=20, help="random samples per epoch (median taken; 20)")
    p.add_argument("--miss-trials", type=int, default=200,
                   help="more random samples per epoch, for how often chance misses the aims (200)")
    p.add_argument("--sampler-seed", type=_orders, default=[0], metavar="N[,N...]",
                   help="the sidecar's --seed, its sampling order (0); several, comma-separated, go to "
                        "the runs in turn: each epoch is about the lowest-ranked keys listed by its cut, "
                        "so runs of one order repeat its draw, and medians over orders spread over "
                        "the draws too (--runs defaults to their count)")
    p.add_argument("--sidecar-arg", action="append", default=[], metavar="FLAG",
                   help="one more flag for the sidecar, e.g. --sidecar-arg=--list-threads=8 (repeatable)")
    p.add_argument("--cut-wait", type=float, default=60.0, help="seconds a pending cut may take (60)")
    p.add_argument("--jobs", type=int, default=1,
                   help="key spaces run at once (1; more share the CPU, which moves the cut times and "
                   "sample counts: for smoke runs)")
    p.add_argument("--runs", type=int, default=None,
                   help="runs of every key space (the table gives the median and range of each figure; "
                        "default: one for each --sampler-seed)")
    p.add_argument("--dir", type=Path, help=harness.DIR_HELP + " (default: the system's temp folder)")
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument("--markdown", type=Path, help="write the table here")
    p.add_argument("--plot", type=Path,
                   help="also draw each epoch's TV ratio against its cut time per key space here "
                        "(.png: matplotlib; else SVG)")
    ns = p.parse_args(argv)
    if ns.runs is None:
        ns.runs = len(ns.sampler_seed)
    elif ns.runs < len(ns.sampler_seed):  # orders left out would pass unseen
        p.error(f"--runs {ns.runs}: fewer runs than --sampler-seed's {len(ns.sampler_seed)} orders")
    if ns.draws < 1 or ns.miss_trials < 1:
        p.error("--draws and --miss-trials must be at least 1")
    names = [s.strip() for s in ns.shapes.split(",") if s.strip()]
    try:
        shapes = [with_defaults(Shape(n, ns.keys, ns.folders, ns.skew, ns.subfolders, ns.seed, ns.size))
                  for n in names]
    except ValueError as e:
        p.error(str(e))
    harness.require("botocore")
    if not Path("/dev/fuse").exists() or os.geteuid() != 0:
        harness.fail("needs root and /dev/fuse (the sidecar mounts its FUSE view)")
    if ns.runs < 1 or ns.jobs < 1:
        p.error("--runs and --jobs must be at least 1")
    rows: list[Row] = []
    STOPPING.clear()
    try:
        harness.clean_up_on_sigterm()  # SIGTERM and Ctrl-C raise KeyboardInterrupt: the clean-up below runs
        for run in range(ns.runs):
            rows += run_shapes(shapes, ns, run)
    except KeyboardInterrupt:
        print("fairness: interrupted; the sidecar and the endpoint stopped, scratch removed", file=sys.stderr)
        return 130
    table = markdown(rows, ns, argv, [s.spec() for s in shapes])
    print(table)
    harness.write_results(table, rows, markdown=ns.markdown, json_path=ns.json)
    if ns.plot:
        from epochfs.benchmarks._fairness_plot import write

        write(ns.plot, [asdict(r) for r in rows], title=f"Each epoch's folder mix against a random "
                                                        f"sample's: {source()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
