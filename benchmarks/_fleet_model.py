"""The fleet model's simulation (:mod:`epochfs.benchmarks.fleet` has what it models and why, and
the command): the store's token buckets, each node's discovery, parallel listing with resume,
index stream and downloads as events in one heap. Underscored: a helper, not a benchmark of its own.
"""

from __future__ import annotations

import heapq
import inspect
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from epochfs.sidecar.config import SamplerSettings
from epochfs.sidecar.download import RetryPolicy
from epochfs.sidecar.listing.background import RETRY_MAX, RETRY_MIN
from epochfs.sidecar.listing.indexfile import HEADER_RETRY
from epochfs.sidecar.listing.sources import DISCOVERY_PAGES, PagedSource
from epochfs.sidecar.sampler.breaker import OUTAGE_AFTER, OUTAGE_PAUSE
from epochfs.sidecar.sampler.order import LISTING_WAIT
from epochfs.sidecar.sampler.throttle import DEFER_BASE, DEFER_CAP, THROTTLE_COOLDOWN, FetchWindow
from epochfs.sidecar.supervisor.children import ChildProcesses

GET_LIMIT = 5500.0
"""S3: GET/HEAD requests per second per partitioned prefix (LIST counted against it here)."""
PUT_LIMIT = 3500.0
"""S3: PUT/COPY/POST/DELETE requests per second per partitioned prefix (the model makes none)."""
RESTART = (ChildProcesses.BACKOFF_MIN, ChildProcesses.BACKOFF_MAX, ChildProcesses.STABLE_AFTER)
"""The supervisor's restart backoff of a dead sampler: first, longest, reset after this long up."""
LIST_RETRY = (RETRY_MIN, RETRY_MAX)
"""The listing thread's pause after a failed listing run: first, longest (doubling between)."""
LIST_THREADS: int = SamplerSettings.list_threads
"""``--list-threads``: listers per node."""
CONCURRENCY: int = SamplerSettings.concurrency
"""``--concurrency``: downloads in flight per node."""
MAX_SPANS = int(inspect.signature(PagedSource.__init__).parameters["max_spans"].default)
"""Spans (folders) a listing is cut into at most."""
INDEX_THREADS = 8
"""``epochfs index``'s listers (its ``threads``)."""


@dataclass
class Params:
    nodes: int = 1000
    keys: int = 1_000_000
    index: bool = False
    folders: int = 100
    """Class folders the keys sit in (0: flat keys, one span)."""
    prefixes: int = 1
    rate: float = GET_LIMIT
    page_keys: int = 1000
    page_seconds: float = 0.097
    get_seconds: float = 0.02
    start_seconds: float = 1.0
    start_spread: float = 0.0
    """Nodes start at ``start_seconds`` plus a uniform draw in [0, this) (0: all at once)."""
    concurrency: int = CONCURRENCY
    list_threads: int = LIST_THREADS
    max_spans: int = MAX_SPANS
    discovery_pages: int = DISCOVERY_PAGES
    epoch0_samples: int = 100
    fetch: int = 0
    """Samples each node fetches (0: its whole shard)."""
    index_seconds_per_key: float = 2e-6
    horizon: float = 3600.0
    seed: int = 0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    outage_after: int = OUTAGE_AFTER
    outage_pause: tuple[float, float] = OUTAGE_PAUSE
    list_retry: tuple[float, float] = LIST_RETRY
    listing_wait: float = LISTING_WAIT
    defer: tuple[float, float] = (DEFER_BASE, DEFER_CAP)
    """A throttled key's full-jitter delay: first bound, longest bound (doubling per answer)."""
    window_cooldown: float = THROTTLE_COOLDOWN
    header_retry: tuple[float, float] = HEADER_RETRY

    @property
    def spans(self) -> int:
        return 1 if self.folders < 2 else min(self.folders, self.max_spans)

    @property
    def pages(self) -> int:
        """Listing pages of the whole key space (each span's last page may be short)."""
        return self.spans * -(-self.keys // (self.spans * self.page_keys))

    @property
    def discovery(self) -> int:
        """LIST requests that find the spans: the probe page, then delimiter pages."""
        if self.keys <= self.page_keys:
            return 1
        shown = self.keys if self.folders < 2 else self.folders  # keys or folders per delimiter page
        return 1 + min(self.discovery_pages, -(-shown // self.page_keys))


@dataclass
class Outcome:
    mode: str
    nodes: int
    keys: int
    folders: int = 0
    listers: int = 0
    list_requests: int = 0
    get_requests: int = 0
    slowdowns: int = 0
    list_slowdowns: int = 0
    get_slowdowns: int = 0
    sampler_restarts: int = 0
    listing_pauses: int = 0
    given_up: int = 0
    """Objects skipped for good: none since throttling is its own kind (a SlowDown never skips)."""
    deferred: int = 0
    """Throttled GETs whose key was put back for a full-jitter delay (the sampler's Deferred)."""
    header_retries: int = 0
    """Throttled index-header GETs read again after a full-jitter pause (no restart)."""
    window_shrinks: int = 0
    min_window_mean: float = float("nan")
    """The smallest fetch window each node reached, averaged over the nodes."""
    index_build_s: float = 0.0
    simulated_s: float = 0.0
    epoch0_median_s: float = float("nan")
    epoch0_worst_s: float = float("nan")
    listed_median_s: float = float("nan")
    listed_worst_s: float = float("nan")
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
_START, _DISCOVER, _PAGE, _LIST_RUN, _READ, _WORKER, _RETRY, _GET_DONE, _HEADER, _DUE = range(10)


class Node:
    __slots__ = ("available", "backoff", "disc", "due", "failed", "fetched", "gets", "header_bound",
                 "inflight", "list_pause", "listed", "min_window", "next_key", "parked", "read", "run_listed",
                 "started_at", "taken", "waiting", "window")

    def __init__(self, p: Params, clock: Callable[[], float]) -> None:
        self.disc = 0  # discovery pages done in this start
        self.listed = 0  # pages (or index chunks) committed
        self.taken = 0  # pages handed to listers (committed or in flight)
        self.inflight = 0  # lister pages in flight
        self.failed = False  # the running listing run hit a SlowDown
        self.list_pause = p.list_retry[0]  # the bound of the next full-jitter pause
        self.run_listed = 0  # pages committed when the running listing run began
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
        self.backoff = 0.0
        self.started_at = 0.0


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

    def restart(now: float, i: int, node: Node) -> None:
        """The sampler exited (status 2): the supervisor starts it again after its backoff."""
        out.sampler_restarts += 1
        first, longest, stable = RESTART
        if now - node.started_at >= stable:
            node.backoff = 0.0
        node.backoff = min(longest, max(first, node.backoff * 2))
        push(now + node.backoff + p.start_seconds, _START, i)

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
        node.run_listed = node.listed
        for _ in range(min(listers, pages - node.taken)):
            node.taken += 1
            node.inflight += 1
            push(now, _PAGE, i, node.taken - 1)

    def list_failed(now: float, i: int, node: Node) -> None:
        """The run's listers are all back: the listing thread pauses (full jitter; the bound back
        to its minimum when the run committed pages), then resumes."""
        out.listing_pauses += 1
        if node.listed > node.run_listed:
            node.list_pause = p.list_retry[0]
        push(now + rng.uniform(0, node.list_pause), _LIST_RUN, i)
        node.list_pause = min(p.list_retry[1], node.list_pause * 2)

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
            node.started_at = now
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
            if not request(now, 0, True):
                restart(now + p.page_seconds, i, node)
            elif node.disc + 1 < p.discovery:
                node.disc += 1
                push(now + p.page_seconds, _DISCOVER, i)
            else:
                start_fetching(now, i, node)
                run_listing(now + p.page_seconds, i, node)
        elif kind == _LIST_RUN:
            if p.index:  # (re)open the index stream: one GET
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


__all__ = ["GET_LIMIT", "LIST_RETRY", "RESTART", "Outcome", "Params", "Store", "simulate"]
