"""Every Prometheus metric of epochfs, in one module.

Three sources feed the sidecar's ``/metrics``, merged into one exposition by :class:`MergedCollector`
(:mod:`.metrics_merge`, the plumbing; every metric itself is defined here):

* **The store** (:class:`StoreCollector`): counters the SQLite index already persists (samples
  fetched, bytes fetched, skipped, evicted, cuts) and occupancy/epoch gauges, read with
  ``Store.stats()`` at scrape time. They never go backwards when a child restarts, because they
  live on the node volume, not in a process.
* **The children**: per-process instrumentation of the sampler (:class:`ProcessMetrics`:
  retried/failed fetches, fetch latency, downloads in flight, cut waits, idle by design) and of the
  FUSE server (:class:`FuseMetrics`, defined in ``epochfs.fuse.metrics`` because fuse may import
  nothing from sidecar but the store: requests and errors by operation). The supervisor sets
  ``PROMETHEUS_MULTIPROC_DIR`` for its children, so prometheus-client writes their values to mmap
  files that survive a crash; the supervisor sums them (:func:`multiprocess_collector`). Dead
  children's live gauges are dropped with :func:`forget_process`.
* **The supervisor itself** (:class:`SidecarMetrics`): samples and bytes served (counted from
  opens of object files, see ``epochfs.sidecar.served``), what the torch client reports, child
  restarts; and the counters of its HTTP endpoints (:class:`EndpointMetrics`).
* **The admission webhook** (:class:`WebhookMetrics`): ``epochfs webhook`` is a process of its
  own with a registry of its own (no store, no children); its metrics are defined here all the same.
* **Build and process facts**: ``epochfs_build_info{version}`` (:class:`BuildInfoCollector`),
  ``python_info``, and the standard ``process_*`` families (CPU seconds, resident memory, open
  fds...) of the supervisor and of each child, read from ``/proc/<pid>`` at scrape time and told
  apart by a ``process`` label (:func:`process_collectors`). A custom registry has none of these
  unless they are added, and the default registry's would describe only the supervisor.

Labels are bounded: ``result`` (4 values), ``op`` (FUSE operation names, others folded into
``other``), ``errno`` (a short list, others ``other``), ``child`` (3 values), ``reason`` (6 values),
``process`` (4 values), ``version`` (one per build; ``python_info``'s own labels are constant).
Never a key, a path or an epoch number.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from epochfs.sidecar.metrics_merge import (
    Collector,
    LabelledCollector,
    MergedCollector,
    forget_process,
    multiprocess_collector,
    prepare_multiproc_dir,
)
from epochfs.sidecar.store import Stats

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

# prometheus-client (~0.05 s of imports, http.server among them) is imported where a metric is
# made or a family collected, never at this module's import: the sampler imports this module on
# its way to its first GET, and counts nothing before its first download.

PROCESS_RESULTS = ("retried", "failed")
"""``epochfs_remote_objects_total{result}`` values counted by the sampler process; ``ok`` and
``skipped`` come from the store (so a sampler crash never loses the persistent ones)."""

FETCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
CUT_WAIT_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)
CUT_WAIT_HELP = ("Seconds from a cut request (lookup of epoch-N, POST /v1/cut) to the cut; a cut made "
                 "at once counts too, with the request's own time.")
"""``epochfs_cut_wait_seconds``: observed by the sampler (queued cuts) and by the supervisor (cuts
that ``POST /v1/cut`` makes); one family in ``/metrics`` (:class:`MergedCollector` sums the two)."""

# Families the store collector exports (the dashboard test checks expressions against these names).
STORE_COUNTERS = {
    "epochfs_remote_bytes": "Bytes of objects fetched from the remote and admitted to the cache.",
    "epochfs_evicted_samples": "Samples evicted from the cache to make room.",
    "epochfs_evicted_bytes": "Bytes evicted from the cache to make room.",
    "epochfs_cuts": "Epochs cut.",
    "epochfs_corrupt_objects": "Cached objects a scrub found damaged (wrong bytes, wrong size, missing) "
                               "and took out of the cache.",
    "epochfs_repaired_samples": "Damaged samples fetched again into their place (their epochs kept them).",
}
STORE_GAUGES = {
    "epochfs_cache_bytes": "Bytes of complete samples in the cache.",
    "epochfs_cache_capacity_bytes": "The cache byte budget (--capacity).",
    "epochfs_cache_inflight_bytes": "Bytes reserved for downloads in flight.",
    "epochfs_cache_samples": "Complete samples in the cache.",
    "epochfs_catalog_objects": "Objects listed in the remote catalog (this shard).",
    "epochfs_listing_covered_ratio": "Share of the remote's keys the listing has seen (1 once complete; "
                                     "from its estimate of the keys left while it runs).",
    "epochfs_catalog_estimated_objects": "Objects the remote is estimated to hold (this shard): the "
                                         "catalog over the covered share.",
    "epochfs_epoch_latest": "Number of the newest epoch (absent before the first cut).",
    "epochfs_epoch_samples": "Samples in the newest epoch.",
    "epochfs_epoch_bytes": "Bytes in the newest epoch.",
    "epochfs_epochs_live": "Epochs currently visible.",
    "epochfs_pending_cuts": "Cut requests waiting for their condition.",
    "epochfs_backpressure": "1 while sampling is paused (nothing evictable, or the disk is full), else 0.",
    "epochfs_disk_full": "1 while sampling is paused because the cache's filesystem is full, else 0.",
    "epochfs_publish_paused": "Folder view: 1 while publishing waits for room on the folder's volume, "
                              "else 0.",
    "epochfs_samples_repairing": "Samples whose object file is being fetched again in place (absent "
                                 "meanwhile; lost ones included).",
    "epochfs_samples_lost": "Samples the remote lost (cannot be fetched again): their entries stay in "
                            "their epochs and a read of one fails with EIO until the epoch retires.",
}


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
        self._idle: bool | None = None
        for result in PROCESS_RESULTS:
            self.remote_objects.labels(result=result)

    # The calls the sampler makes -------------------------------------------------------------
    def remote_retried(self) -> None:
        """One failed attempt that will be retried (``epochfs_remote_objects_total{result="retried"}``
        counts it too, deprecated: it counts attempts under a name that counts objects)."""
        self.remote_retries.inc()
        self.remote_objects.labels(result="retried").inc()

    def remote_failed(self) -> None:
        """An object given up after its last attempt (the store counts it as skipped too)."""
        self.remote_objects.labels(result="failed").inc()

    def observe_fetch(self, seconds: float) -> None:
        """Latency of one successful fetch (GET, stream, hash, fsync)."""
        self.remote_fetch_seconds.observe(seconds)

    def throttled(self) -> None:
        """One object GET answered with throttling (not a retry, not a failure); the deprecated
        ``epochfs_throttled_total`` too."""
        self.throttled_requests.inc()
        self.throttled_total.inc()

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
        the requester's to report: :meth:`SidecarMetrics.cut_waited`)."""
        self.cut_wait_seconds.observe(max(0.0, seconds))

    def set_idle(self, idle: bool) -> None:
        """The fetch order has nothing to offer now and nothing is in flight (``idle``), or it has
        keys to fetch: the stall alert (EpochfsSamplerStalled) stays quiet while the sampler waits by
        design, and fires when it has keys but admits nothing (a remote that is down, downloads
        that hang). Cheap to call per candidate: the value is written only when it changes."""
        if idle is not self._idle:
            self._idle = idle
            self.sampler_idle.set(1 if idle else 0)


_default_lock = threading.Lock()
_default: ProcessMetrics | None = None


def process_metrics() -> ProcessMetrics:
    """The process-wide :class:`ProcessMetrics` on the default registry (created on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            from prometheus_client import REGISTRY

            _default = ProcessMetrics(registry=REGISTRY)
        return _default


class SidecarMetrics:
    """Metrics the supervisor process counts itself (not multiprocess: it is one long-lived process)."""

    def __init__(self, *, registry: CollectorRegistry) -> None:
        self.registry = registry
        from prometheus_client import Counter, Gauge

        self.served_samples = Counter(
            "epochfs_served_samples", "Opens of cached object files by any process (samples served).",
            registry=registry,
        )
        self.served_bytes = Counter(
            "epochfs_served_bytes", "Bytes served, counting each open as a whole-file read.",
            registry=registry,
        )
        self.served_lost_events = Counter(
            "epochfs_served_lost_events", "Open events lost because the fanotify queue overflowed.",
            registry=registry,
        )
        self.client_samples = Counter(
            "epochfs_client_samples", "Samples the torch client reports it delivered to training.",
            registry=registry,
        )
        self.client_bytes = Counter(
            "epochfs_client_bytes", "Bytes the torch client reports it delivered to training.",
            registry=registry,
        )
        self.client_wait_seconds = Counter(
            "epochfs_client_wait_seconds", "Seconds the training loop reports it waited for data.",
            registry=registry,
        )
        self.child_restarts = Counter(
            "epochfs_child_restarts", "Restarts of a child process after it died.", ["child"],
            registry=registry,
        )
        self.child_up = Gauge(
            "epochfs_child_up", "1 while the child process runs.", ["child"], registry=registry,
        )
        self.mounted = Gauge(
            "epochfs_mounted", "1 while the FUSE view is mounted and answers.", registry=registry,
        )
        for child in ("sampler", "fuse"):
            self.child_restarts.labels(child=child)
            self.child_up.labels(child=child)
        from prometheus_client import Histogram

        # The same family as the sampler's (same name and buckets): the cuts POST /v1/cut makes.
        self.cut_wait_seconds = Histogram(
            "epochfs_cut_wait_seconds", CUT_WAIT_HELP, buckets=CUT_WAIT_BUCKETS, registry=registry,
        )

    def cut_waited(self, seconds: float) -> None:
        """A cut a request to ``/v1/cut`` made, ``seconds`` after it was asked for (cutrequest)."""
        self.cut_wait_seconds.observe(max(0.0, seconds))

    def add_served(self, samples: int, nbytes: int) -> None:
        self.served_samples.inc(samples)
        self.served_bytes.inc(nbytes)

    def add_client_report(self, *, samples: int, nbytes: int, wait_seconds: float) -> None:
        """Add one report (deltas since the client's previous report); validated by the caller."""
        self.client_samples.inc(samples)
        self.client_bytes.inc(nbytes)
        self.client_wait_seconds.inc(wait_seconds)

    def totals(self) -> dict[str, float]:
        """Current values of the persistent counters (saved to the store so restarts resume them)."""
        get = self.registry.get_sample_value
        return {
            "served_samples_total": get("epochfs_served_samples_total") or 0.0,
            "served_bytes_total": get("epochfs_served_bytes_total") or 0.0,
            "client_samples_total": get("epochfs_client_samples_total") or 0.0,
            "client_bytes_total": get("epochfs_client_bytes_total") or 0.0,
            "client_wait_seconds_total": get("epochfs_client_wait_seconds_total") or 0.0,
        }

    def resume(self, totals: dict[str, float]) -> None:
        """Start from totals a previous supervisor saved, so the counters keep growing."""
        self.served_samples.inc(max(0.0, totals.get("served_samples_total", 0.0)))
        self.served_bytes.inc(max(0.0, totals.get("served_bytes_total", 0.0)))
        self.client_samples.inc(max(0.0, totals.get("client_samples_total", 0.0)))
        self.client_bytes.inc(max(0.0, totals.get("client_bytes_total", 0.0)))
        self.client_wait_seconds.inc(max(0.0, totals.get("client_wait_seconds_total", 0.0)))


ENDPOINT_REJECT_REASONS = ("capacity", "evicted", "timeout", "too_large", "bad_request", "busy")
"""``epochfs_http_rejected_total{reason}``: why the sidecar's HTTP endpoints closed a connection or
refused a request (see ``epochfs.sidecar.endpoints``)."""


class EndpointMetrics:
    """Counters of the sidecar's HTTP endpoints (``epochfs.sidecar.endpoints``), summed over the
    process's listeners (the health port and, when given, the metrics port).

    A collector itself (not registered anywhere by default): :func:`sidecar_registry` merges the
    process-wide one (:func:`endpoint_metrics`); tests give an Endpoints a fresh one to read back.
    """

    def __init__(self, *, registry: CollectorRegistry | None = None) -> None:
        from prometheus_client import Counter, Gauge

        self.rejected = Counter(
            "epochfs_http_rejected",
            "Connections closed or requests refused by the HTTP endpoints, by reason: capacity (every "
            "slot busy), evicted (an idle connection closed for a new one), timeout, too_large, "
            "bad_request, busy (the report queue full).",
            ["reason"], registry=registry,
        )
        self.connections = Gauge(
            "epochfs_http_connections", "Open connections to the sidecar's HTTP endpoints.",
            multiprocess_mode="livesum", registry=registry,
        )
        self._by_reason = {reason: self.rejected.labels(reason=reason) for reason in ENDPOINT_REJECT_REASONS}

    def reject(self, reason: str) -> None:
        """Count one (an unknown reason counts as bad_request); cheap: called per connection."""
        self._by_reason.get(reason, self._by_reason["bad_request"]).inc()

    def collect(self) -> Iterator[Metric]:
        yield from self.rejected.collect()
        yield from self.connections.collect()


_endpoint_default: EndpointMetrics | None = None


def endpoint_metrics() -> EndpointMetrics:
    """The process-wide :class:`EndpointMetrics` (created on first use, registered nowhere)."""
    global _endpoint_default
    with _default_lock:
        if _endpoint_default is None:
            _endpoint_default = EndpointMetrics()
        return _endpoint_default


class StoreCollector:
    """Exports what the store persists, read at scrape time; absent while the cache has no index."""

    def __init__(self, *, stats: Callable[[], Stats | None]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        if stats is None:
            return
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        remote = CounterMetricFamily(
            "epochfs_remote_objects", "Remote objects by result (ok, failed, skipped; retried: "
            "deprecated, attempts: epochfs_remote_retries_total).",
            labels=["result"],
        )
        remote.add_metric(["ok"], stats.fetched_total)
        remote.add_metric(["skipped"], stats.skipped_total)
        yield remote
        counters = {
            "epochfs_remote_bytes": stats.fetched_bytes_total,
            "epochfs_evicted_samples": stats.evicted_total,
            "epochfs_evicted_bytes": stats.evicted_bytes_total,
            "epochfs_cuts": stats.cuts_total,
            "epochfs_corrupt_objects": stats.corrupt_objects_total,
            "epochfs_repaired_samples": stats.repaired_total,
        }
        for name, value in counters.items():
            yield CounterMetricFamily(name, STORE_COUNTERS[name], value=value)
        newest = stats.epochs[-1] if stats.epochs else None
        gauges: dict[str, float | None] = {
            "epochfs_cache_bytes": stats.cache_bytes,
            "epochfs_cache_capacity_bytes": stats.capacity_bytes,
            "epochfs_cache_inflight_bytes": stats.inflight_bytes,
            "epochfs_cache_samples": stats.samples,
            "epochfs_catalog_objects": stats.catalog_objects,
            "epochfs_listing_covered_ratio": stats.listing.get("covered"),
            "epochfs_catalog_estimated_objects": stats.listing.get("estimated_objects"),
            "epochfs_epoch_latest": None if newest is None else newest["epoch"],
            "epochfs_epoch_samples": None if newest is None else newest["samples"],
            "epochfs_epoch_bytes": None if newest is None else newest["bytes"],
            "epochfs_epochs_live": len(stats.epochs),
            "epochfs_pending_cuts": len(stats.pending_cuts),
            "epochfs_backpressure": 1 if stats.backpressure else 0,
            "epochfs_disk_full": 1 if stats.backpressure_reason == "disk full" else 0,
            "epochfs_publish_paused": 1 if stats.publish_paused else 0,
            "epochfs_samples_repairing": stats.repairing,
            "epochfs_samples_lost": stats.lost,
        }
        for name, gauge_value in gauges.items():
            if gauge_value is not None:
                yield GaugeMetricFamily(name, STORE_GAUGES[name], value=gauge_value)


class BuildInfoCollector:
    """``epochfs_build_info{version="..."} 1``: which release a sidecar runs, to join on
    (``* on (pod) group_left (version) epochfs_build_info``) or to count versions during a rollout."""

    def __init__(self, version: str | None = None) -> None:
        self._version = version

    def collect(self) -> Iterator[Metric]:
        if self._version is None:
            import epochfs

            self._version = epochfs.__version__
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily(
            "epochfs_build_info", "Always 1; the version label names the epochfs release running.",
            labels=["version"],
        )
        family.add_metric([self._version], 1)
        yield family


WEBHOOK_RESULTS = ("mutated", "skipped", "refused", "error")
"""``epochfs_webhook_requests_total{result}``: how the admission webhook answered."""
WEBHOOK_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)


class WebhookMetrics:
    """The admission webhook's (``epochfs webhook``, :mod:`epochfs.sidecar.webhook`): requests by
    result, their duration, the profiles loaded, the build and the process. A process of its own
    (a Deployment, no sidecar beside it), so one plain registry of its own: ``registry`` (a fresh
    one unless given), which its metrics port serves."""

    def __init__(self, *, registry: CollectorRegistry | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

        self.registry = registry if registry is not None else CollectorRegistry()
        self.requests = Counter(
            "epochfs_webhook_requests",
            "Admission requests answered, by result: mutated (epochfs "
            "injected), skipped (not asked for, already injected, not a pod creation), refused (asked "
            "for but cannot be served: the response says why), error (not an AdmissionReview, or a failure)",
            ["result"], registry=self.registry,
        )
        for result in WEBHOOK_RESULTS:
            self.requests.labels(result)
        self.duration = Histogram(
            "epochfs_webhook_request_duration_seconds", "Time to answer an admission request",
            buckets=WEBHOOK_DURATION_BUCKETS, registry=self.registry,
        )
        self.profiles = Gauge("epochfs_webhook_profiles", "Injection profiles loaded", registry=self.registry)
        ProcessCollector(registry=self.registry)
        self.registry.register(BuildInfoCollector())


PROCESS_NAMES = ("supervisor", "sampler", "fuse", "publisher")
"""Values of the ``process`` label of the ``process_*`` families: the supervisor (the one process
that serves ``/metrics``) and the children it may run."""

Pid = Callable[[], int | None]
"""The current pid of a child (None while it is not running): read at every scrape, so a
restarted child is followed without re-registering anything."""


def _proc_entry(pid: Pid) -> Callable[[], str]:
    """ProcessCollector reads ``/proc/<this>``: a pid, or a name no /proc entry has while the
    child is not running (its families are then left out, as the collector does on any OSError)."""

    def entry() -> str:
        value = pid()
        return "not-running" if value is None else str(value)

    return entry


def process_collectors(children: Mapping[str, Pid] | None = None) -> list[Collector]:
    """prometheus-client's ``process_*`` families (``process_cpu_seconds_total``,
    ``process_resident_memory_bytes``, ``process_virtual_memory_bytes``, ``process_open_fds``,
    ``process_max_fds``, ``process_start_time_seconds``) for this process (``process="supervisor"``)
    and for each of ``children`` (label value: its name), plus ``python_info``.

    Registered nowhere: :func:`sidecar_registry` merges them. Each is labelled (see
    :class:`~.metrics_merge.LabelledCollector`) because the merge would otherwise sum the
    processes' values into one sample. Linux only (they read /proc); elsewhere they are absent.
    """
    from prometheus_client import PlatformCollector, ProcessCollector

    sources: list[Collector] = [
        LabelledCollector(ProcessCollector(registry=None), "process", "supervisor"),
        PlatformCollector(registry=None),
    ]
    for name, pid in (children or {}).items():
        if name not in PROCESS_NAMES or name == "supervisor":
            raise ValueError(f"unknown child process {name!r} (one of {PROCESS_NAMES[1:]})")
        collector = ProcessCollector(registry=None, pid=_proc_entry(pid))
        sources.append(LabelledCollector(collector, "process", name))
    return sources


def sidecar_registry(
    *, stats: Callable[[], Stats | None], multiproc_dir: Path | None, sidecar: SidecarMetrics,
    children: Mapping[str, Pid] | None = None,
) -> CollectorRegistry:
    """The registry the sidecar's ``/metrics`` serves: store + children + supervisor, merged, with
    the build info and the ``process_*`` families of this process and of ``children`` (name: pid)."""
    from prometheus_client import CollectorRegistry

    sources: list[Collector] = [StoreCollector(stats=stats), sidecar.registry, endpoint_metrics(),
                                BuildInfoCollector(), *process_collectors(children)]
    if multiproc_dir is not None:
        sources.append(multiprocess_collector(multiproc_dir))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MergedCollector(sources))
    return registry


__all__ = [
    "ENDPOINT_REJECT_REASONS",
    "PROCESS_NAMES",
    "STORE_COUNTERS",
    "STORE_GAUGES",
    "WEBHOOK_RESULTS",
    "BuildInfoCollector",
    "EndpointMetrics",
    "MergedCollector",
    "Pid",
    "ProcessMetrics",
    "SidecarMetrics",
    "StoreCollector",
    "WebhookMetrics",
    "endpoint_metrics",
    "forget_process",
    "multiprocess_collector",
    "prepare_multiproc_dir",
    "process_collectors",
    "process_metrics",
    "sidecar_registry",
]
