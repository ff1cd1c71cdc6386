"""The sampler's own metrics: what the sampler process counts while it fetches and cuts.

Apart from :mod:`epochfs.sidecar.metrics` (which re-exports every name here, so callers import
them from there) because this is the one set of metrics written from a child process: in
prometheus-client's multiprocess mode under the supervisor (``PROMETHEUS_MULTIPROC_DIR``), to mmap
files the supervisor sums, so each metric's ``multiprocess_mode`` matters here and nowhere else.
The one family the supervisor and the FUSE server observe too (``epochfs_cut_wait_seconds``)
takes its help and buckets from :mod:`epochfs.sidecar.store.cutwait`, as theirs do, so the three
stay one family. :func:`lazy_singleton` makes each process-wide instance here and in
:mod:`epochfs.sidecar.metrics`.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from epochfs.sidecar.store.cutwait import CUT_WAIT_BUCKETS, CUT_WAIT_HELP
from epochfs.sidecar.store.outage import CAUSES
from epochfs.sidecar.store.stats import DISK_FULL

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

T = TypeVar("T")

# prometheus-client (~0.05 s of imports, http.server among them) is imported where a metric is
# made, never at this module's import: the sampler imports this module on its way to its first
# GET, and counts nothing before its first download.

PROCESS_RESULTS = ("retried", "failed")
"""``epochfs_remote_objects_total{result}`` values counted by the sampler process; ``ok`` and
``skipped`` come from the store (so a sampler crash never loses the persistent ones)."""

WAITING_REASONS = ("throttled", "throttled_alone", "held")
"""``epochfs_keys_waiting{reason}`` values."""

FETCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class ProcessMetrics:
    """Per-process instrumentation of the sampler (the FUSE server's counters are
    :class:`epochfs.fuse.metrics.FuseMetrics`: this module imports nothing of the FUSE server, so
    the sampler's downloader can count here without loading it).

    Under the supervisor (``PROMETHEUS_MULTIPROC_DIR`` set before prometheus-client is imported) the
    values go to mmap files the supervisor merges; otherwise they live in ``registry`` (tests
    inject a fresh ``CollectorRegistry`` and read values back with ``get_sample_value``). Every
    label value is created up front, so each series exists (at zero) from the first scrape.
    """

    def __init__(self, *, registry: CollectorRegistry | None) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.remote_objects = Counter(
            "epochfs_remote_objects", "Remote objects by result (ok, failed, skipped; retried: "
            "deprecated, attempts: epochfs_remote_retries_total).",
            ["result"], registry=registry,
        )
        self.remote_fetch_seconds = Histogram(
            "epochfs_remote_fetch_seconds", "Seconds to fetch and verify one object.",
            buckets=FETCH_BUCKETS, registry=registry,
        )
        self.inflight_downloads = Gauge(
            "epochfs_inflight_downloads", "Downloads in flight.",
            multiprocess_mode="livesum", registry=registry,
        )
        self.inflight_received = Gauge(
            "epochfs_inflight_downloaded_bytes", "Bytes the downloads in flight have received so far "
            "(a large object's download moving before it is admitted).",
            multiprocess_mode="livesum", registry=registry,
        )
        self.remote_retries = Counter(
            "epochfs_remote_retries", "Fetch attempts that failed and were tried again: attempts, not "
            "objects (one object tried three times counts 2).",
            registry=registry,
        )
        self.throttled_requests = Counter(
            "epochfs_remote_throttled_requests", "Object GET requests the remote answered with "
            "throttling (S3 SlowDown, HTTP 429, GCS rateLimitExceeded); the key is fetched again "
            "later, never skipped.",
            registry=registry,
        )
        self.throttled_total = Counter(
            "epochfs_throttled", "Deprecated (removed in the next release): "
            "epochfs_remote_throttled_requests_total.",
            registry=registry,
        )
        self.fetch_window = Gauge(
            "epochfs_fetch_window", "Downloads the sampler allows in flight (its AIMD window: "
            "halved on throttling, grown back to --concurrency).",
            multiprocess_mode="livesum", registry=registry,
        )
        self.cut_wait_seconds = Histogram(
            "epochfs_cut_wait_seconds", CUT_WAIT_HELP, buckets=CUT_WAIT_BUCKETS, registry=registry,
        )
        self.sampler_idle = Gauge(
            "epochfs_sampler_idle", "1 while the sampler has nothing to fetch by design and nothing "
            "in flight (schedule mode: the next windows are complete; every listed key cached or "
            "skipped; the listing's pace holding it back), else 0.",
            multiprocess_mode="livemax", registry=registry,
        )
        self.keys_waiting = Gauge(
            "epochfs_keys_waiting", "Keys the sampler keeps waiting, neither in flight, fetched nor "
            "skipped, by reason: throttled (the store throttled them, fetched again after a delay), "
            "throttled_alone (a key throttled on its own while others come through: asked less and "
            "less often), held (failed as an outage would fail them; fetched again or skipped once "
            "later answers tell, or after a deadline).",
            ["reason"], multiprocess_mode="livesum", registry=registry,
        )
        self._idle: bool | None = None
        for reason in WAITING_REASONS:
            self.keys_waiting.labels(reason=reason)
        for result in PROCESS_RESULTS:
            self.remote_objects.labels(result=result)

    # The calls the sampler makes -------------------------------------------------------------
    def remote_retried(self) -> None:
        """One failed attempt that will be retried (``epochfs_remote_objects_total{result="retried"}``
        counts it too, deprecated: it counts attempts under a name that counts objects)."""
        self.remote_retries.inc()
        self.remote_objects.labels(result="retried").inc()

    def remote_failed(self) -> None:
        """An object skipped for good after its downloads kept failing (the store counts it as
        skipped too): called when the loop skips the key (:func:`.sampler.breaker.give_up`), never
        for a key it keeps (an outage's, one waiting for a repair), once per key."""
        self.remote_objects.labels(result="failed").inc()

    def observe_fetch(self, seconds: float) -> None:
        """Latency of one successful fetch (GET, stream, hash, fsync)."""
        self.remote_fetch_seconds.observe(seconds)

    def throttled(self) -> None:
        """One object GET answered with throttling (not a retry, not a failure); the deprecated
        ``epochfs_throttled_total`` too."""
        self.throttled_requests.inc()
        self.throttled_total.inc()

    def set_inflight_received(self, nbytes: int) -> None:
        """The downloads in flight have received ``nbytes`` so far (set when the sampler publishes)."""
        self.inflight_received.set(nbytes)

    def set_keys_waiting(self, *, throttled: int, alone: int, held: int) -> None:
        """The keys waiting now, by reason (``epochfs_keys_waiting``)."""
        for reason, n in zip(WAITING_REASONS, (throttled, alone, held), strict=True):
            self.keys_waiting.labels(reason=reason).set(n)

    def set_fetch_window(self, size: int) -> None:
        """The sampler's fetch window now allows ``size`` downloads in flight."""
        self.fetch_window.set(size)

    @contextmanager
    def download(self) -> Iterator[None]:
        """Count one download in flight for the duration of the block."""
        self.inflight_downloads.inc()
        try:
            yield
        finally:
            self.inflight_downloads.dec()

    def cut_waited(self, seconds: float) -> None:
        """A queued cut request was served ``seconds`` after it was made (cuts made at once are
        the requester's to report: :meth:`~.metrics.SidecarMetrics.cut_waited`)."""
        self.cut_wait_seconds.observe(max(0.0, seconds))

    def set_idle(self, idle: bool) -> None:
        """The fetch order has nothing to offer now and nothing is in flight (``idle``), or it has
        keys to fetch: the stall alert (EpochfsSamplerStalled) stays quiet while the sampler waits by
        design, and fires when it has keys but admits nothing (a remote that is down, downloads
        that hang). Cheap to call per candidate: the value is written only when it changes."""
        if idle is not self._idle:
            self._idle = idle
            self.sampler_idle.set(1 if idle else 0)


BACKPRESSURE_HELP = "1 while sampling is paused (nothing evictable, or the disk is full), else 0."
DISK_FULL_HELP = "1 while sampling is paused because the cache's filesystem is full, else 0."
"""The help texts of the store's families of the same names (one family each in the exposition)."""


class PauseGauges:
    """The sampler's backpressure as live gauges of its own process: ``epochfs_backpressure`` and
    ``epochfs_disk_full`` (livemax: a dead sampler's are dropped at its reaping).

    The same families are read from the index at scrape time
    (:class:`~epochfs.sidecar.metrics_scrape.StoreCollector`), but on a volume filled to its last
    byte the index cannot record the pause, and the gauges would say 0 while the sampler waits
    for room. Under the supervisor these live in the sampler's multiprocess file, whose blocks
    were allocated before anything was written to it (:func:`epochfs.sidecar.metrics_files.reserve`),
    so setting them needs no room. The supervisor's exposition takes the larger of the two sources
    (:data:`epochfs.sidecar.metrics_merge.EITHER`): the index's record, which outlives the sampler,
    or the live sampler's word, dropped with its other live gauges when it dies.

    Made at the sampler's first pause (:func:`pause_gauges`), not at its start: prometheus-client
    is not imported on the way to the first GET (tests/sampler/test_startup_imports.py). Until then
    they are absent, which the exposition reads as the index's value alone.
    """

    def __init__(self) -> None:
        from prometheus_client import Gauge

        self._backpressure = Gauge("epochfs_backpressure", BACKPRESSURE_HELP, multiprocess_mode="livemax")
        self._disk_full = Gauge("epochfs_disk_full", DISK_FULL_HELP, multiprocess_mode="livemax")
        self.show(None)

    def show(self, reason: str | None) -> None:
        """Sampling is paused for ``reason`` now (None: it is not)."""
        self._backpressure.set(0 if reason is None else 1)
        self._disk_full.set(1 if reason is not None and reason.startswith(DISK_FULL) else 0)


OUTAGE_CAUSES = tuple(CAUSES)
"""The ``cause`` label's values of ``epochfs_remote_outage``: a bounded set, every one exported
(at 0 but the cause now) from the first outage on."""

REMOTE_OUTAGE_HELP = ("1 while the running sampler waits out an outage of the remote for this "
                      "cause (its outage breaker paused, the keys kept): credentials_refused (new "
                      "credentials mend it) or remote_unavailable; else 0.")


class OutageGauges:
    """``epochfs_remote_outage{cause}``: the sampler's outage breaker, live from its process
    (livemax: a dead sampler's series are dropped at its reaping, so a run killed mid-outage leaves
    no outage on /metrics). Made at the first outage (:func:`outage_gauges`): prometheus-client is
    not imported on the sampler's way to its first GET, and an outage comes after GETs."""

    def __init__(self, *, registry: CollectorRegistry | None = None) -> None:
        """``registry``: the default one unless given (tests read a fresh one)."""
        from prometheus_client import REGISTRY, Gauge

        self._gauge = Gauge("epochfs_remote_outage", REMOTE_OUTAGE_HELP, ["cause"],
                            multiprocess_mode="livemax", registry=registry or REGISTRY)
        self.show(None)

    def show(self, cause: str | None) -> None:
        """The outage's cause now (None: the remote answers): 1 for it, 0 for the others."""
        for name in OUTAGE_CAUSES:
            self._gauge.labels(cause=name).set(1 if name == cause else 0)


def lazy_singleton(make: Callable[[], T]) -> Callable[[], T]:
    """``make`` as a function that makes its object at the first call and returns that one from
    then on, in every thread: a metric family is registered once per process (a second
    registration of a name is refused), and not before it is needed (prometheus-client is not
    imported on the sampler's way to its first GET)."""
    lock = threading.Lock()
    made: list[T] = []

    @functools.wraps(make)
    def once() -> T:
        with lock:
            if not made:
                made.append(make())
            return made[0]

    return once


@lazy_singleton
def process_metrics() -> ProcessMetrics:
    """The process-wide :class:`ProcessMetrics` on the default registry (created on first use)."""
    from prometheus_client import REGISTRY

    return ProcessMetrics(registry=REGISTRY)


@lazy_singleton
def pause_gauges() -> PauseGauges:
    """The process-wide :class:`PauseGauges` (made at the sampler's first pause)."""
    return PauseGauges()


@lazy_singleton
def outage_gauges() -> OutageGauges:
    """The process-wide :class:`OutageGauges` (made at the sampler's first outage)."""
    return OutageGauges()


__all__ = [
    "BACKPRESSURE_HELP",
    "CUT_WAIT_BUCKETS",
    "CUT_WAIT_HELP",
    "DISK_FULL_HELP",
    "FETCH_BUCKETS",
    "OUTAGE_CAUSES",
    "PROCESS_RESULTS",
    "REMOTE_OUTAGE_HELP",
    "OutageGauges",
    "PauseGauges",
    "ProcessMetrics",
    "lazy_singleton",
    "outage_gauges",
    "pause_gauges",
    "process_metrics",
]
