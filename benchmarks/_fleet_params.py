"""The fleet model's inputs and outputs (:mod:`epochfs.benchmarks.fleet` has what it models and
why): the constants imported from the code, the parameters of a run, what a run counts, and the
store's token buckets. Apart from the simulation (:mod:`._fleet_model`) so that each stays one
concern; underscored: a helper, not a benchmark of its own.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from epochfs.sidecar.config import SamplerSettings
from epochfs.sidecar.download import RetryPolicy
from epochfs.sidecar.listing.background import RETRY_MAX, RETRY_MIN
from epochfs.sidecar.listing.indexfile import HEADER_RETRY
from epochfs.sidecar.listing.paged import DISCOVERY_PAGES, DISCOVERY_RETRY, PagedSource
from epochfs.sidecar.sampler.breaker import OUTAGE_AFTER, OUTAGE_PAUSE
from epochfs.sidecar.sampler.order import LISTING_WAIT
from epochfs.sidecar.sampler.throttle import DEFER_BASE, DEFER_CAP, THROTTLE_COOLDOWN

GET_LIMIT = 5500.0
"""S3: GET/HEAD requests per second per partitioned prefix (LIST counted against it here)."""
PUT_LIMIT = 3500.0
"""S3: PUT/COPY/POST/DELETE requests per second per partitioned prefix (the model makes none)."""
LIST_RETRY = (RETRY_MIN, RETRY_MAX)
"""The listing thread's pause after a failed listing run: first, longest (``pause_bound`` between)."""
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
    """The listing pause's bounds, for the tests to compare with; the model calls the code's
    ``pause_bound``, which holds them."""
    listing_wait: float = LISTING_WAIT
    defer: tuple[float, float] = (DEFER_BASE, DEFER_CAP)
    """A throttled key's full-jitter delay: first bound, longest bound (doubling per answer)."""
    window_cooldown: float = THROTTLE_COOLDOWN
    header_retry: tuple[float, float] = HEADER_RETRY
    discovery_retry: tuple[float, float] = DISCOVERY_RETRY

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
    discovery_retries: int = 0
    """Throttled discovery pages read again after a full-jitter pause (no restart)."""
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


__all__ = ["CONCURRENCY", "GET_LIMIT", "INDEX_THREADS", "LIST_RETRY", "LIST_THREADS", "MAX_SPANS",
           "PUT_LIMIT", "Outcome", "Params", "Store"]
