"""A fleet model: 1,000 sidecars starting at once against one bucket with S3's request limits.

A discrete-event simulation in pure Python (no servers, no sockets): what would a job start cost
the store, and how long would each node wait for epoch 0? S3 publishes its limits per partitioned
prefix: 3,500 PUT/COPY/POST/DELETE and 5,500 GET/HEAD requests per second; LIST is counted
against GET here. A request over the limit is answered ``503 SlowDown``. Each prefix is a token
bucket of ``--rate`` requests per second (one second of burst). S3 raises a prefix's limit by
splitting it under sustained load, over minutes; that is left out (the model is the first minutes
of a job, before any split).

Each node does what the sampler on main does, with the real code's constants (imported, so the
model follows the code):

- **listing** (without ``--index``): ListObjectsV2 pages one after another, ``--page-seconds`` each
  (S3's latency and botocore's XML parsing, 20 ms + ~77 µs per key). botocore's retries are off and
  the listing has none of its own, so a ``SlowDown`` on any page ends the sampler (``cannot list``,
  status 2); the supervisor restarts it after its backoff (``ChildProcesses``: 0.5 s doubling to
  30 s, reset after 30 s of running) plus ``--start-seconds`` of start-up, and the listing starts
  again from the first page. tests/remote/test_slowdown_backoff.py checks this against the real
  sampler.
- **with** ``--index``: the keys were listed once for the fleet beforehand (its cost is reported
  apart: pages over ``--index-listers`` parallel listers); each node reads the index with one GET
  and ``--index-seconds-per-key`` of reading, then fetches its shard.
- **fetching**: ``concurrency`` downloads in flight, each a GET of ``--get-seconds``; a
  ``SlowDown`` is retried by :class:`~epochfs.sidecar.download.RetryPolicy` (``attempts`` in all,
  full-jitter backoff between them); an object given up that way counts toward the outage breaker
  (:mod:`epochfs.sidecar.sampler.breaker`): ``OUTAGE_AFTER`` in a row pause new downloads for
  2 s, doubling to 60 s, keeping the keys. Epoch 0 is the node's ``--epoch0-samples``-th sample.
  Each node fetches ``--fetch`` samples (its whole shard by default) and then stops asking.

    epochfs bench fleet                                      # 1,000 nodes, 1M keys, both modes
    python -m epochfs.benchmarks.fleet --nodes 1000 --keys 1000000 --json fleet.json
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import sys
from dataclasses import asdict, dataclass, field

from epochfs.sidecar.download import RetryPolicy
from epochfs.sidecar.sampler.breaker import OUTAGE_AFTER, OUTAGE_PAUSE
from epochfs.sidecar.supervisor.children import ChildProcesses

GET_LIMIT = 5500.0
"""S3: GET/HEAD requests per second per partitioned prefix (LIST counted against it here)."""
PUT_LIMIT = 3500.0
"""S3: PUT/COPY/POST/DELETE requests per second per partitioned prefix (the model makes none)."""
RESTART = (ChildProcesses.BACKOFF_MIN, ChildProcesses.BACKOFF_MAX, ChildProcesses.STABLE_AFTER)
"""The supervisor's restart backoff of a dead sampler: first, longest, reset after this long up."""


@dataclass
class Params:
    nodes: int = 1000
    keys: int = 1_000_000
    index: bool = False
    prefixes: int = 1
    rate: float = GET_LIMIT
    page_keys: int = 1000
    page_seconds: float = 0.097
    get_seconds: float = 0.02
    start_seconds: float = 1.0
    concurrency: int = 32
    epoch0_samples: int = 100
    fetch: int = 0
    """Samples each node fetches (0: its whole shard)."""
    index_listers: int = 1
    index_seconds_per_key: float = 2e-6
    horizon: float = 3600.0
    seed: int = 0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    outage_after: int = OUTAGE_AFTER
    outage_pause: tuple[float, float] = OUTAGE_PAUSE


@dataclass
class Outcome:
    mode: str
    nodes: int
    keys: int
    list_requests: int = 0
    get_requests: int = 0
    slowdowns: int = 0
    sampler_restarts: int = 0
    given_up: int = 0
    breaker_pauses: int = 0
    index_build_s: float = 0.0
    simulated_s: float = 0.0
    epoch0_median_s: float = float("nan")
    epoch0_worst_s: float = float("nan")
    nodes_without_epoch0: int = 0
    peak_list_per_s: float = 0.0
    peak_get_per_s: float = 0.0
    mean_list_per_s: float = 0.0
    mean_get_per_s: float = 0.0
    epoch0_s: list[float] = field(default_factory=list, repr=False)


class Store:
    """Token buckets per prefix: ``rate`` requests per second, one second of burst."""

    def __init__(self, prefixes: int, rate: float) -> None:
        self.rate = rate
        self.tokens = [rate] * prefixes
        self.last = [0.0] * prefixes

    def admit(self, prefix: int, now: float) -> bool:
        tokens = min(self.rate, self.tokens[prefix] + (now - self.last[prefix]) * self.rate)
        self.last[prefix] = now
        if tokens >= 1.0:
            self.tokens[prefix] = tokens - 1.0
            return True
        self.tokens[prefix] = tokens
        return False


# Event kinds.
_START, _PAGE, _WORKER, _GET_DONE, _RETRY = range(5)


class Node:
    __slots__ = (
        "backoff",
        "fetched",
        "next_key",
        "page",
        "pause",
        "paused_until",
        "shard",
        "started_at",
        "streak",
        "waiting",
    )

    def __init__(self, shard: int) -> None:
        self.shard = shard
        self.page = 0
        self.next_key = 0
        self.fetched = 0
        self.streak = 0
        self.pause = 0.0
        self.paused_until = 0.0
        self.backoff = 0.0
        self.started_at = 0.0
        self.waiting = 0


def simulate(p: Params) -> Outcome:
    """Run the model; every random draw comes from ``p.seed``."""
    rng = random.Random(p.seed)
    store = Store(p.prefixes, p.rate)
    out = Outcome(mode="index" if p.index else "list", nodes=p.nodes, keys=p.keys)
    pages = -(-p.keys // p.page_keys)
    shard = p.keys // p.nodes
    target = min(shard, p.fetch) if p.fetch else shard
    epoch0 = min(p.epoch0_samples, target)
    events: list[tuple[float, int, int, int, int]] = []
    seq = 0
    second_lists: dict[int, int] = {}
    second_gets: dict[int, int] = {}
    epoch0_at = [float("nan")] * p.nodes
    nodes = [Node(shard) for _ in range(p.nodes)]

    def push(t: float, kind: int, node: int, a: int = 0) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, node, a))

    def request(now: float, prefix: int, counts: dict[int, int]) -> bool:
        counts[int(now)] = counts.get(int(now), 0) + 1
        ok = store.admit(prefix, now)
        if not ok:
            out.slowdowns += 1
        return ok

    if p.index:
        # One listing for the fleet, before the job: pages split over parallel listers.
        out.index_build_s = -(-pages // p.index_listers) * p.page_seconds
        out.list_requests = pages
    for i in range(p.nodes):
        push(p.start_seconds, _START, i)
    while events:
        now, _, kind, i, a = heapq.heappop(events)
        if now > p.horizon:
            break
        node = nodes[i]
        if kind == _START:
            node.started_at = now
            if p.index:
                out.get_requests += 1
                if request(now, rng.randrange(p.prefixes), second_gets):
                    ready = now + p.get_seconds + p.keys * p.index_seconds_per_key
                    for w in range(p.concurrency):
                        push(ready, _WORKER, i, w)
                else:  # the index GET is retried like any GET
                    push(now + p.retry.delay(1, rng), _START, i)
            else:
                node.page = 0
                push(now, _PAGE, i)
        elif kind == _PAGE:
            out.list_requests += 1
            prefix = node.page * p.prefixes // pages
            if request(now, prefix, second_lists):
                node.page += 1
                if node.page < pages:
                    push(now + p.page_seconds, _PAGE, i)
                else:
                    for w in range(p.concurrency):
                        push(now + p.page_seconds, _WORKER, i, w)
            else:  # "cannot list": the sampler exits; the supervisor restarts it after its backoff
                out.sampler_restarts += 1
                first, longest, stable = RESTART
                if now - node.started_at >= stable:
                    node.backoff = 0.0
                node.backoff = min(longest, max(first, node.backoff * 2))
                push(now + p.page_seconds + node.backoff + p.start_seconds, _START, i)
        elif kind == _WORKER:  # a download slot asks for its next key
            if node.next_key >= target:
                continue
            if now < node.paused_until:
                push(node.paused_until, _WORKER, i)
                continue
            node.next_key += 1
            push(now, _RETRY, i, 1)
        elif kind == _RETRY:  # attempt ``a`` of a GET
            out.get_requests += 1
            if request(now, rng.randrange(p.prefixes), second_gets):
                push(now + p.get_seconds, _GET_DONE, i)
            elif a < p.retry.attempts:
                push(now + 0.01 + p.retry.delay(a, rng), _RETRY, i, a + 1)
            else:  # given up as unavailable: the outage breaker counts it
                out.given_up += 1
                node.streak += 1
                if node.streak >= p.outage_after:
                    node.next_key -= 1  # the key is kept for later
                    if now >= node.paused_until:
                        first, longest = p.outage_pause
                        node.pause = min(longest, node.pause * 2) if node.pause else first
                        node.paused_until = now + node.pause
                        out.breaker_pauses += 1
                push(now + 0.01, _WORKER, i)
        elif kind == _GET_DONE:
            node.fetched += 1
            node.streak = 0
            node.pause = 0.0
            if node.fetched == epoch0:
                epoch0_at[i] = now
            push(now, _WORKER, i)
    out.simulated_s = min(now, p.horizon) if events else now
    reached = [t for t in epoch0_at if t == t]
    out.epoch0_s = reached
    out.nodes_without_epoch0 = p.nodes - len(reached)
    if reached:
        out.epoch0_median_s = statistics.median(reached)
        out.epoch0_worst_s = max(reached) if len(reached) == p.nodes else float("inf")
    out.peak_list_per_s = float(max(second_lists.values(), default=0))
    out.peak_get_per_s = float(max(second_gets.values(), default=0))
    span = max(out.simulated_s, 1e-9)
    out.mean_list_per_s = sum(second_lists.values()) / span
    out.mean_get_per_s = sum(second_gets.values()) / span
    return out


def row(o: Outcome) -> str:
    return (f"| {o.mode} | {o.nodes} | {o.keys} | {o.list_requests} | {o.peak_list_per_s:.0f} / "
            f"{o.mean_list_per_s:.0f} | {o.get_requests} | {o.peak_get_per_s:.0f} / {o.mean_get_per_s:.0f} | "
            f"{o.slowdowns} | {o.sampler_restarts} | {o.epoch0_median_s:.1f} | {o.epoch0_worst_s:.1f} | "
            f"{o.nodes_without_epoch0} | {o.index_build_s:.0f} |")


HEADER = ("| mode | nodes | keys | LIST requests | LIST/s peak / mean | GET requests | GET/s peak / mean | "
          "SlowDown (503) | sampler restarts | epoch 0 median (s) | epoch 0 worst (s) | nodes without "
          "epoch 0 | index build (s) |\n|" + "---|" * 13)


def main(argv: list[str] | None = None) -> int:
    d = Params()
    ap = argparse.ArgumentParser(prog="python -m epochfs.benchmarks.fleet", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=d.nodes)
    ap.add_argument("--keys", type=int, default=d.keys)
    ap.add_argument("--mode", choices=("list", "index", "both"), default="both",
                    help="each node lists (main today), a shared key index (--index), or both")
    ap.add_argument("--prefixes", type=int, default=d.prefixes, help="partitioned prefixes the keys span")
    ap.add_argument("--rate", type=float, default=d.rate, help="GET+LIST requests/s per prefix (5500)")
    ap.add_argument("--page-seconds", type=float, default=d.page_seconds)
    ap.add_argument("--get-seconds", type=float, default=d.get_seconds)
    ap.add_argument("--start-seconds", type=float, default=d.start_seconds)
    ap.add_argument("--epoch0-samples", type=int, default=d.epoch0_samples)
    ap.add_argument("--fetch", type=int, default=d.fetch, help="samples per node (0: its shard)")
    ap.add_argument("--index-listers", type=int, default=d.index_listers)
    ap.add_argument("--horizon", type=float, default=d.horizon, help="simulated seconds at most")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--json", help="write the outcomes here")
    ns = ap.parse_args(argv)
    modes = ("list", "index") if ns.mode == "both" else (ns.mode,)
    outcomes = []
    for mode in modes:
        p = Params(nodes=ns.nodes, keys=ns.keys, index=mode == "index", prefixes=ns.prefixes, rate=ns.rate,
                   page_seconds=ns.page_seconds, get_seconds=ns.get_seconds, start_seconds=ns.start_seconds,
                   epoch0_samples=ns.epoch0_samples, fetch=ns.fetch, index_listers=ns.index_listers,
                   horizon=ns.horizon, seed=ns.seed)
        outcomes.append(simulate(p))
    print(HEADER)
    for o in outcomes:
        print(row(o))
    if ns.json:
        with open(ns.json, "w") as f:
            rows = [{k: v for k, v in asdict(o).items() if k != "epoch0_s"} for o in outcomes]
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
