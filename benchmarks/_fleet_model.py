"""The fleet model's simulation (:mod:`epochfs.benchmarks.fleet` has what it models and why, and
the command; :mod:`._fleet_params` its parameters, counts and the store's token buckets): each
node's discovery, parallel listing with resume, index stream and downloads as events in one heap.
Underscored: a helper, not a benchmark of its own.
"""

from __future__ import annotations

import heapq
import random
import statistics
from collections.abc import Callable

from epochfs.benchmarks._fleet_params import INDEX_THREADS, Outcome, Params, Store
from epochfs.sidecar.listing.background import pause_bound
from epochfs.sidecar.sampler.throttle import FetchWindow

# Event kinds.
_START, _DISCOVER, _PAGE, _LIST_RUN, _READ, _WORKER, _RETRY, _GET_DONE, _HEADER, _DUE = range(10)


class Node:
    __slots__ = ("available", "disc", "disc_bound", "due", "failed", "fetched", "gets", "header_bound",
                 "inflight", "list_pause", "listed", "min_window", "next_key", "parked", "read", "run_began",
                 "run_listed", "taken", "waiting", "window")

    def __init__(self, p: Params, clock: Callable[[], float]) -> None:
        self.disc = 0  # discovery pages done in this start
        self.listed = 0  # pages (or index chunks) committed
        self.taken = 0  # pages handed to listers (committed or in flight)
        self.inflight = 0  # lister pages in flight
        self.failed = False  # the running listing run hit a SlowDown
        self.list_pause: float | None = None  # the bound of the last listing pause (None: none yet)
        self.run_listed = 0  # pages committed when the running listing run began
        self.run_began = 0.0  # when it began
        self.read = 0  # index chunks read in the current stream (a resumed stream reads again)
        self.available = 0  # shard keys in the catalog
        self.parked = 0  # download slots waiting for keys
        self.next_key = 0
        self.fetched = 0
        self.gets = 0  # GETs in flight
        self.waiting = 0  # throttled keys waiting for their delay (then in ``due``)
        self.due: list[int] = []  # throttled keys whose delay has passed (their throttled answers)
        self.window = FetchWindow(p.concurrency, cooldown=p.window_cooldown, clock=clock)
        self.min_window = p.concurrency
        self.header_bound = p.header_retry[0]
        self.disc_bound = p.discovery_retry[0]


def simulate(p: Params) -> Outcome:
    """Run the model; every random draw comes from ``p.seed``."""
    rng = random.Random(p.seed)
    store = Store(p.prefixes, p.rate)
    listers = min(p.list_threads, p.spans)
    out = Outcome(mode="index" if p.index else "list", nodes=p.nodes, keys=p.keys, folders=p.folders,
                  listers=INDEX_THREADS if p.index else listers)
    pages = p.pages
    chunk_keys = 10 * p.page_keys  # the index stream, read in chunks of ten pages
    chunks = -(-p.keys // chunk_keys)
    units = chunks if p.index else pages  # what makes keys available
    shard = p.keys // p.nodes
    target = min(shard, p.fetch) if p.fetch else shard
    epoch0 = min(p.epoch0_samples, target)
    events: list[tuple[float, int, int, int, int]] = []
    seq = 0
    second_lists: dict[int, int] = {}
    second_gets: dict[int, int] = {}
    epoch0_at = [float("nan")] * p.nodes
    listed_at = [float("nan")] * p.nodes
    sim_now = [0.0]
    nodes = [Node(p, lambda: sim_now[0]) for _ in range(p.nodes)]

    def push(t: float, kind: int, node: int, a: int = 0) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, node, a))

    def request(now: float, prefix: int, listing: bool) -> bool:
        counts = second_lists if listing else second_gets
        counts[int(now)] = counts.get(int(now), 0) + 1
        if listing:
            out.list_requests += 1
        else:
            out.get_requests += 1
        if store.admit(prefix, now):
            return True
        out.slowdowns += 1
        if listing:
            out.list_slowdowns += 1
        else:
            out.get_slowdowns += 1
        return False

    def wake(now: float, i: int, node: Node, n: int) -> None:
        """Wake up to ``n`` parked download slots."""
        n = max(0, min(node.parked, n))
        for _ in range(n):
            push(now, _WORKER, i)
        node.parked -= n

    def committed(now: float, i: int, node: Node) -> None:
        """One more page (chunk) in the catalog: the shard keys it holds, and idle slots woken."""
        node.listed += 1
        node.available = shard * node.listed // units
        if node.listed == units:
            listed_at[i] = now
        wake(now + p.listing_wait / 2, i, node, node.available - node.next_key)

    def start_fetching(now: float, i: int, node: Node) -> None:
        node.parked = p.concurrency  # every slot waits for the first keys

    def run_listing(now: float, i: int, node: Node) -> None:
        """A listing run: ``listers`` threads, one page per turn, from the committed points."""
        node.failed = False
        node.run_listed, node.run_began = node.listed, now
        for _ in range(min(listers, pages - node.taken)):
            node.taken += 1
            node.inflight += 1
            push(now, _PAGE, i, node.taken - 1)

    def list_failed(now: float, i: int, node: Node) -> None:
        """The run's listers are all back: the listing thread pauses (full jitter, the bound from
        the code's ``pause_bound``), then resumes."""
        out.listing_pauses += 1
        node.list_pause = pause_bound(node.list_pause, node.listed - node.run_listed, now - node.run_began)
        push(now + rng.uniform(0, node.list_pause), _LIST_RUN, i)

    def header_throttled(now: float, i: int, node: Node) -> None:
        """The index header's GET was throttled: read again after a full-jitter pause."""
        out.header_retries += 1
        push(now + rng.uniform(0, node.header_bound), _HEADER, i)
        node.header_bound = min(p.header_retry[1], node.header_bound * 2)

    if p.index:
        # One listing for the fleet, before the job: `epochfs index`, its listers over the spans.
        build_listers = min(INDEX_THREADS, p.spans)
        out.index_build_s = (p.discovery + -(-pages // build_listers)) * p.page_seconds
        out.list_requests = p.discovery + pages
    for i in range(p.nodes):
        push(p.start_seconds + rng.uniform(0, p.start_spread), _START, i)
    now = 0.0
    while events:
        now, _, kind, i, a = heapq.heappop(events)
        sim_now[0] = now
        if now > p.horizon:
            break
        node = nodes[i]
        if kind == _START:
            if p.index:
                push(now, _HEADER, i)
            else:
                node.disc = 0
                push(now, _DISCOVER, i)
        elif kind == _HEADER:  # the index header: one GET; throttled, read again later
            if request(now, rng.randrange(p.prefixes), False):
                start_fetching(now, i, node)
                push(now + p.get_seconds, _LIST_RUN, i)
            else:
                header_throttled(now, i, node)
        elif kind == _DISCOVER:
            if not request(now, 0, True):  # throttled: the same page again after a full-jitter pause
                out.discovery_retries += 1
                push(now + p.page_seconds + rng.uniform(0, node.disc_bound), _DISCOVER, i)
                node.disc_bound = min(p.discovery_retry[1], node.disc_bound * 2)
            elif node.disc + 1 < p.discovery:
                node.disc += 1
                push(now + p.page_seconds, _DISCOVER, i)
            else:
                start_fetching(now, i, node)
                run_listing(now + p.page_seconds, i, node)
        elif kind == _LIST_RUN:
            if p.index:  # (re)open the index stream: one GET
                node.run_listed, node.run_began = node.listed, now
                if request(now, rng.randrange(p.prefixes), False):
                    node.read = 0
                    push(now + p.get_seconds, _READ, i)
                else:
                    list_failed(now, i, node)
            else:
                run_listing(now, i, node)
        elif kind == _READ:  # a chunk of the index stream read (and, if new, committed)
            node.read += 1
            if node.read > node.listed:
                committed(now, i, node)
            if node.read < chunks:
                push(now + chunk_keys * p.index_seconds_per_key, _READ, i)
        elif kind == _PAGE:  # a lister asks for page ``a`` (in turn order) of the listing
            span, nth = a % p.spans, a // p.spans  # round-robin: one page of each span per round
            place = (span * (pages // p.spans) + nth) / pages  # spans cut the key space evenly
            ok = request(now, min(p.prefixes - 1, int(place * p.prefixes)), True)
            done = now + p.page_seconds
            if ok:
                committed(done, i, node)
            else:
                node.failed = True
                node.taken -= 1  # the page is asked for again from its span's resume point
            node.inflight -= 1
            if node.failed:
                if node.inflight == 0:
                    list_failed(done, i, node)
            elif node.taken < pages:
                node.taken += 1
                node.inflight += 1
                push(done, _PAGE, i, node.taken - 1)
        elif kind == _WORKER:  # a download slot asks for its next key (due throttled keys first)
            nothing = not node.due and node.next_key >= min(target, node.available)
            # A throttled key's wait holds its place in the window (as in the sampler's loop).
            full = node.gets >= node.window.size or (
                not node.due and node.gets + node.waiting >= node.window.size)
            if full or nothing:
                node.parked += 1  # the window is full, or nothing to fetch now
                continue
            node.gets += 1
            if node.due:
                push(now, _RETRY, i, node.due.pop())
            else:
                node.next_key += 1
                push(now, _RETRY, i, 0)
        elif kind == _RETRY:  # a GET of a key throttled ``a`` times before
            if request(now, rng.randrange(p.prefixes), False):
                push(now + p.get_seconds, _GET_DONE, i)
            else:  # throttled: the key waits a full-jitter delay; the window halves
                out.deferred += 1
                node.gets -= 1
                if node.window.throttled():
                    out.window_shrinks += 1
                    node.min_window = min(node.min_window, node.window.size)
                first, longest = p.defer
                node.waiting += 1
                push(now + 0.01 + rng.uniform(0, min(longest, first * 2 ** min(a, 30))), _DUE, i, a + 1)
                push(now + 0.01, _WORKER, i)
        elif kind == _DUE:  # a throttled key's delay has passed: fetched again first
            node.waiting -= 1
            node.due.append(a)
            wake(now, i, node, 1)
        elif kind == _GET_DONE:
            node.fetched += 1
            node.gets -= 1
            if node.window.succeeded():
                wake(now, i, node, 1)
            if node.fetched == epoch0:
                epoch0_at[i] = now
            push(now, _WORKER, i)
    out.simulated_s = min(now, p.horizon)
    out.min_window_mean = statistics.fmean(n.min_window for n in nodes)
    reached = [t for t in epoch0_at if t == t]
    out.epoch0_s = reached
    out.nodes_without_epoch0 = p.nodes - len(reached)
    if reached:
        out.epoch0_median_s = statistics.median(reached)
        out.epoch0_worst_s = max(reached) if len(reached) == p.nodes else float("inf")
    listed = [t for t in listed_at if t == t]
    if listed:
        out.listed_median_s = statistics.median(listed)
        out.listed_worst_s = max(listed) if len(listed) == p.nodes else float("inf")
    out.peak_list_per_s = float(max(second_lists.values(), default=0))
    out.peak_get_per_s = float(max(second_gets.values(), default=0))
    seconds = max(out.simulated_s, 1e-9)
    out.mean_list_per_s = sum(second_lists.values()) / seconds
    out.mean_get_per_s = sum(second_gets.values()) / seconds
    return out


__all__ = ["Node", "simulate"]
