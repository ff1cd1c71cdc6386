"""A fleet model: 1,000 sidecars starting at once against one bucket with S3's request limits.

A discrete-event simulation in pure Python (no servers, no sockets): what would a job start cost
the store, and how long would each node wait for epoch 0? S3 publishes its limits per partitioned
prefix: 3,500 PUT/COPY/POST/DELETE and 5,500 GET/HEAD requests per second; LIST is counted
against GET here. A request over the limit is answered ``503 SlowDown``. Each prefix is a token
bucket of ``--rate`` requests per second (one second of burst). S3 raises a prefix's limit by
splitting it under sustained load, over minutes; that is left out (the model is the first minutes
of a job, before any split; ``--prefixes`` spreads the keys over several partitions instead).

Each node does what ``epochfs sample`` does since 7c148ca (sidecar/listing), with the real code's
constants and the listing pause's rule (imported, so the model follows the code):

- **discovery** (without ``--index``), before the sampler starts: one page without the delimiter
  (a remote of one page is that page), then the folders with the delimiter, up to
  ``DISCOVERY_PAGES`` pages (a flat bucket: that many pages of keys). A ``SlowDown`` here is read
  again in place after ``uniform(0, bound)``, the bound doubling through ``DISCOVERY_RETRY``
  (:func:`~epochfs.sidecar.listing.retry.while_throttled`); the pages before it are kept, the
  sampler does not exit (it did until the discovery retry: the supervisor restarted it and the
  discovery started over).
- **listing**: the key space is cut into one span per folder (at most ``max_spans``; a flat bucket
  is one span), listed round-robin one page per turn by ``min(--list-threads, spans)`` listers,
  each page ``--page-seconds`` (S3's 20 ms and botocore's ~77 µs per key) and committed with its
  span's resume point. A ``SlowDown`` on a page fails the listing run: the other listers finish
  the pages they hold, and the listing thread (``ListingThread``) tries again after
  ``uniform(0, bound)``, the bound from the code's ``pause_bound`` (doubling up to ``RETRY_MAX``
  after a run that committed nothing, halved down to ``RETRY_MIN`` after one that committed a
  page), resuming every span from its committed point: no page is listed twice, the sampler keeps
  running.
- **with** ``--index``: the keys were listed once for the fleet beforehand by ``epochfs index``
  (its pages over ``min(8, spans)`` listers, reported apart); each node reads the index header
  with one GET at start (a ``SlowDown`` there is read again after ``uniform(0, bound)``,
  ``HEADER_RETRY``) and streams it with another
  (``--index-seconds-per-key``), a throttled stream being resumed by the listing thread as above.
- **fetching starts while listing**: ``concurrency`` downloads in flight draw from the keys of the
  node's shard listed so far (idle slots look again ``LISTING_WAIT`` after new keys, half of it on
  average); each download is a GET of ``--get-seconds``. A ``SlowDown`` is never retried in the
  slot nor skipped (:mod:`epochfs.sidecar.sampler.throttle`): the key waits
  ``uniform(0, min(DEFER_CAP, DEFER_BASE * 2**n))`` and is fetched again first, and the node's
  ``FetchWindow`` (the real class, on the simulated clock) halves; a waiting key holds its place
  in the window. Epoch 0 is the node's
  ``--epoch0-samples``-th sample. Each node fetches ``--fetch`` samples (0: its whole shard).

tests/remote/test_slowdown_backoff.py checks these assumptions against the real sampler.

``--nodes`` and ``--keys`` take a comma list (``100,300,1k``): every pair is simulated, in each
mode, and the table gets a nodes and a keys column. ``--plot FILE.png`` draws the runs as curves
against the one that took more values (:mod:`._fleet_plot`): the waits and the requests against
the fleet's (or the bucket's) size.

    epochfs bench fleet                                      # 1,000 nodes, 1M keys, both modes
    python -m epochfs.benchmarks.fleet --nodes 1000 --keys 1000000 --json fleet.json
    python -m epochfs.benchmarks.fleet --nodes 100,300,1k --keys 1M --json f.json --plot f.png
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from epochfs.benchmarks import harness
from epochfs.benchmarks._fleet_model import simulate
from epochfs.benchmarks._fleet_params import GET_LIMIT, LIST_RETRY, PUT_LIMIT, Outcome, Params, Store
from epochfs.benchmarks.scale import label, parse_count


def counts(text: str) -> list[int]:
    """``--nodes``/``--keys``: one count or a comma list (``100,300,1k``), in the order given."""
    try:
        values = [parse_count(part) for part in text.split(",") if part.strip()]
    except (ValueError, KeyError) as e:
        raise argparse.ArgumentTypeError(f"not a count or a comma list of counts: {text!r}") from e
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"counts must be 1 or more: {text!r}")
    return values


def _seconds(median: float, worst: float, digits: int) -> str:
    """``median / worst``: ``none`` when no node got there in the simulated time, a worst of
    ``not all`` when some did not."""
    if median != median:
        return "none"
    return f"{median:,.{digits}f} / " + ("not all" if worst == float("inf") else f"{worst:,.{digits}f}")


def row(o: Outcome, sizes: bool = False) -> str:
    """One outcome's table row; ``sizes``: with its nodes and keys first (a run of several)."""
    mode = "`--index`" if o.mode == "index" else f"each node lists ({o.folders or 'no'} folders)"
    cells = [*((label(o.nodes), label(o.keys)) if sizes else ()), mode, str(o.listers),
             f"{o.list_requests:,}",
             f"{o.peak_list_per_s:,.0f} / {o.mean_list_per_s:,.0f}", f"{o.get_requests:,}",
             f"{o.peak_get_per_s:,.0f} / {o.mean_get_per_s:,.0f}",
             f"{o.list_slowdowns:,} / {o.get_slowdowns:,}", f"{o.discovery_retries:,}",
             f"{o.listing_pauses:,}",
             f"{o.given_up:,} / {o.deferred:,}", f"{o.min_window_mean:.1f}", f"{o.header_retries:,}",
             _seconds(o.epoch0_median_s, o.epoch0_worst_s, 1),
             _seconds(o.listed_median_s, o.listed_worst_s, 0), str(o.nodes_without_epoch0),
             f"{o.index_build_s:.0f}"]
    return "| " + " | ".join(cells) + " |"


COLUMNS = ["mode", "listers per node", "LIST requests", "LIST/s peak / mean", "GET requests",
           "GET/s peak / mean", "SlowDown LIST / GET", "discovery retries", "listing pauses",
           "objects skipped / throttled GETs deferred", "smallest window (mean)", "index header retries",
           "epoch 0 median / worst (s)", "listed median / worst (s)",
           "nodes without epoch 0", "index build (s)"]
HEADER = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS)
SIZES_HEADER = "| nodes | keys | " + " | ".join(COLUMNS) + " |\n|" + "---|" * (len(COLUMNS) + 2)
"""The table of a run over several sizes: which nodes and keys each row simulated."""


def main(argv: list[str] | None = None) -> int:
    d = Params()
    ap = argparse.ArgumentParser(prog="python -m epochfs.benchmarks.fleet", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=counts, default=[d.nodes],
                    help=f"nodes starting, or a comma list of fleets to simulate each ({d.nodes})")
    ap.add_argument("--keys", type=counts, default=[d.keys],
                    help=f"keys in the bucket, or a comma list ({d.keys})")
    ap.add_argument("--mode", choices=("list", "index", "both"), default="both",
                    help="each node lists, a shared key index (--index), or both")
    ap.add_argument("--folders", type=int, default=d.folders, help="class folders (0: flat keys)")
    ap.add_argument("--prefixes", type=int, default=d.prefixes, help="partitioned prefixes the keys span")
    ap.add_argument("--rate", type=float, default=d.rate, help="GET+LIST requests/s per prefix (5500)")
    ap.add_argument("--page-seconds", type=float, default=d.page_seconds)
    ap.add_argument("--get-seconds", type=float, default=d.get_seconds)
    ap.add_argument("--start-seconds", type=float, default=d.start_seconds)
    ap.add_argument("--start-spread", type=float, default=d.start_spread,
                    help="seconds over which the nodes start (0: all at once)")
    ap.add_argument("--concurrency", type=int, default=d.concurrency)
    ap.add_argument("--list-threads", type=int, default=d.list_threads)
    ap.add_argument("--epoch0-samples", type=int, default=d.epoch0_samples)
    ap.add_argument("--fetch", type=int, default=d.fetch, help="samples per node (0: its shard)")
    ap.add_argument("--horizon", type=float, default=d.horizon, help="simulated seconds at most")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--json", help="write the outcomes here")
    ap.add_argument("--plot", type=Path, help=harness.PLOT_HELP + ": the epoch 0 waits and the requests "
                    "against the nodes (or the keys), one line per mode")
    ns = ap.parse_args(argv)
    if ns.plot:
        harness.require("matplotlib")  # before the minutes of simulation, not after
    modes = ("list", "index") if ns.mode == "both" else (ns.mode,)
    outcomes = []
    for nodes, keys, mode in ((n, k, m) for n in ns.nodes for k in ns.keys for m in modes):
        p = Params(nodes=nodes, keys=keys, index=mode == "index", folders=ns.folders,
                   prefixes=ns.prefixes, rate=ns.rate, page_seconds=ns.page_seconds,
                   get_seconds=ns.get_seconds, start_seconds=ns.start_seconds,
                   start_spread=ns.start_spread, concurrency=ns.concurrency,
                   list_threads=ns.list_threads, epoch0_samples=ns.epoch0_samples, fetch=ns.fetch,
                   horizon=ns.horizon, seed=ns.seed)
        outcomes.append(simulate(p))
    sizes = len(ns.nodes) * len(ns.keys) > 1
    print(SIZES_HEADER if sizes else HEADER)
    for o in outcomes:
        print(row(o, sizes))
    rows = [{k: v for k, v in asdict(o).items() if k != "epoch0_s"} for o in outcomes]
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(rows, f, indent=2)
    if ns.plot:
        from epochfs.benchmarks import _fleet_plot  # matplotlib only when a plot is asked for

        _fleet_plot.write(ns.plot, rows)
    return 0


__all__ = ["GET_LIMIT", "LIST_RETRY", "PUT_LIMIT", "Outcome", "Params", "Store", "main", "row",
           "simulate"]


if __name__ == "__main__":
    harness.entry(main, "fleet")
