"""Every Prometheus metric of epochfs, importable from one module.

Three sources feed the sidecar's ``/metrics``, merged into one exposition by :class:`MergedCollector`
(:mod:`.metrics_merge`, the plumbing; every metric itself is defined here or in the two modules
below, whose names this module re-exports, so every metric is imported from here):

* **The store** (:class:`StoreCollector`, :mod:`.metrics_scrape`): counters the SQLite index already
  persists (samples fetched, bytes fetched, skipped, evicted, cuts) and occupancy/epoch gauges, read
  with ``Store.stats()`` at scrape time. They never go backwards when a child restarts, because they
  live on the node volume, not in a process.
* **The children**: per-process instrumentation of the sampler (:class:`ProcessMetrics`,
  :mod:`.metrics_sampler`: retried/failed fetches, fetch latency, downloads in flight, cut waits,
  idle by design; :class:`PauseGauges`: its pauses, which need no room on a full disk) and of the
  FUSE server (:class:`FuseMetrics`, defined in ``epochfs.fuse.metrics``
  because fuse may import nothing from sidecar but the store: requests and errors by operation,
  the waits of the cuts a lookup of ``epoch-N`` makes).
  The supervisor sets ``PROMETHEUS_MULTIPROC_DIR`` for its children, so prometheus-client writes
  their values to mmap files that survive a crash; the supervisor sums them
  (:func:`multiprocess_collector`). Dead children's live gauges are dropped with
  :func:`forget_process`.
* **The supervisor itself** (:class:`SidecarMetrics`, here): samples and bytes served (counted from
  opens of object files, see ``epochfs.sidecar.served``), what the torch client reports, child
  restarts and retries (:class:`ChildMetrics`, :mod:`.metrics_children`, with the supervisor's
  ``epochfs_disk_full``), the sampler's exits on a damaged index (in a row: what ``/healthz``
  fails on); and
  the counters of its HTTP endpoints (:class:`EndpointMetrics`, here).
* **The admission webhook** (:class:`WebhookMetrics`, here): ``epochfs webhook`` is a process of its
  own with a registry of its own (no store, no children); its metrics are defined here all the same.
* **Build and process facts** (:mod:`.metrics_scrape`): ``epochfs_build_info{version}``
  (:class:`BuildInfoCollector`), ``python_info``, and the standard ``process_*`` families (CPU
  seconds, resident memory, open fds...) of the supervisor, of each child and of the sampler's
  listing process (:func:`child_of`), read from ``/proc/<pid>`` at scrape time and told apart by a
  ``process`` label (:func:`process_collectors`).
  A custom registry has none of these unless they are added, and the default registry's would
  describe only the supervisor.

This module keeps the instruments of the two long-lived server processes (the supervisor's and the
webhook's, each on a plain registry of its own) and :func:`sidecar_registry`, which assembles the
sidecar's exposition from every source above.

Labels are bounded: ``result`` (4 values), ``op`` (FUSE operation names, others folded into
``other``), ``errno`` (a short list, others ``other``), ``child`` (3 values), ``reason`` (6 values),
``process`` (5 values), ``version`` (one per build; ``python_info``'s own labels are constant).
Never a key, a path or an epoch number.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from epochfs.sidecar.metrics_children import ChildMetrics
from epochfs.sidecar.metrics_merge import (
    Collector,
    MergedCollector,
    forget_process,
    multiprocess_collector,
    prepare_multiproc_dir,
)
from epochfs.sidecar.metrics_sampler import (
    BACKPRESSURE_HELP,
    CUT_WAIT_BUCKETS,
    CUT_WAIT_HELP,
    DISK_FULL_HELP,
    FETCH_BUCKETS,
    OUTAGE_CAUSES,
    PROCESS_RESULTS,
    REMOTE_OUTAGE_HELP,
    OutageGauges,
    PauseGauges,
    ProcessMetrics,
    lazy_singleton,
    outage_gauges,
    pause_gauges,
    process_metrics,
)
from epochfs.sidecar.metrics_scrape import (
    LISTING_NAME,
    PROCESS_NAMES,
    STORE_COUNTERS,
    STORE_GAUGES,
    BuildInfoCollector,
    Pid,
    StoreCollector,
    child_of,
    process_collectors,
)
from epochfs.sidecar.store import Stats

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

# prometheus-client (~0.05 s of imports, http.server among them) is imported where a metric is
# made or a family collected, never at this module's import: the sampler imports this module on
# its way to its first GET, and counts nothing before its first download.


TOTAL_NAMES = ("served_samples_total", "served_bytes_total", "client_samples_total",
               "client_bytes_total", "client_wait_seconds_total")
"""The keys of :meth:`SidecarMetrics.totals` (each ``epochfs_<key>`` in ``/metrics``)."""


class SidecarMetrics:
    """Metrics the supervisor process counts itself (not multiprocess: it is one long-lived process)."""

    def __init__(self, *, registry: CollectorRegistry, children: Iterable[str] = ("sampler", "fuse")) -> None:
        """``children``: the names of the children this sidecar runs (the sampler and its view's:
        ``fuse``, or ``publisher`` for the folder view). Their ``child`` series exist from the
        start, restarts at 0 (so ``increase()`` counts the first restart) and up at 0 until they
        start; no other child gets one (a series of a child this sidecar never runs would read
        as down for ever)."""
        self.registry = registry
        self.children = tuple(children)
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
        self.children_metrics = ChildMetrics(registry, self.children)
        kids = self.children_metrics
        self.child_restarts, self.child_retries, self.child_up = kids.restarts, kids.retries, kids.up
        self.mounted = Gauge(
            "epochfs_mounted", "1 while the view is up: the FUSE view mounted and answering, or the "
            "folder view published by a publisher that is not hung.", registry=registry,
        )
        self.index_damage_exits = Counter(
            "epochfs_index_damage_exits", "Exits of the sampler on a damaged cache index (status "
            "74), each restarted to replace the index.",
            registry=registry,
        )
        self.index_damage_streak = Gauge(
            "epochfs_index_damage_streak", "The sampler's exits on a damaged cache index in a row, "
            "with no good run between (an epoch cut, or 30 s run); /healthz fails at 3.",
            registry=registry,
        )
        from prometheus_client import Histogram

        # The same family as the sampler's and the FUSE server's (same name, help and buckets):
        # the cuts POST /v1/cut makes.
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

    def restarts(self) -> dict[str, float]:
        """``epochfs_child_restarts_total`` by child (the children this sidecar runs), saved beside
        :meth:`totals` under a key of its own (``Meta.SIDECAR_RESTARTS``): the totals' keys are the
        status document's (``epochfs status --json --cache``), which names no child."""
        get = self.registry.get_sample_value
        return {child: get("epochfs_child_restarts_total", {"child": child}) or 0.0
                for child in self.children}

    def resume_restarts(self, restarts: Mapping[str, float]) -> None:
        """Start the restarts of the children this sidecar runs from a previous supervisor's save
        (a child it does not run, the other view's, gets no series: see ``__init__``)."""
        for child in self.children:
            self.child_restarts.labels(child=child).inc(max(0.0, float(restarts.get(child, 0.0))))

    def at_most_saved(self, families: list[Metric], totals: Mapping[str, float]) -> list[Metric]:
        """``families`` (this registry's, collected) with each of the :data:`TOTAL_NAMES` at most
        its value in ``totals`` (what the store holds; a missing one: 0), changed in place.

        Why: a supervisor killed with -9 resumes from its last save, and a counter a scrape showed
        above that would come back lower: Prometheus reads the drop as a reset and ``increase()``
        adds the whole resumed value (93,000 for 22,500 counted, measured). :class:`SavedFirst`
        saves after it collects, so this takes something off only while a save fails (a full
        volume): the counter then stays at its saved value, and catches up once a save succeeds.
        Not the children's restarts: EpochfsChildRestarting reads them, and a volume that fails is
        when a child keeps restarting; held at their save they froze, and the alert could not
        fire. A supervisor killed -9 while its saves fail resumes them lower, a reset to
        Prometheus, which then counts the resumed restarts (a few) once more."""
        saved = {f"epochfs_{name}" for name in TOTAL_NAMES}
        for family in families:
            for i, s in enumerate(family.samples):
                if s.name in saved and s.value > (top := totals.get(s.name[len("epochfs_"):], 0.0)):
                    family.samples[i] = s._replace(value=top)
        return families


class SavedFirst:
    """The supervisor's own metrics as ``/metrics`` shows them: saved before they are shown.

    ``save`` saves the current totals when they changed since the last save (or are missing from
    the store) and returns what the store holds then, ``(totals, restarts)``. It runs after this
    scrape's values are read, so what it saves is at least what is shown (counters only grow):
    a supervisor killed with -9 right after a scrape resumes at or above every value a scrape
    showed. Totals above what the store holds (a save that failed) are shown at the saved value
    (:meth:`SidecarMetrics.at_most_saved`; the restarts as counted)."""

    def __init__(self, metrics: SidecarMetrics,
                 save: Callable[[], tuple[Mapping[str, float], Mapping[str, float]]]) -> None:
        self._metrics = metrics
        self._save = save

    def collect(self) -> Iterator[Metric]:
        families = list(self._metrics.registry.collect())
        totals, _ = self._save()
        yield from self._metrics.at_most_saved(families, totals)


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


@lazy_singleton
def endpoint_metrics() -> EndpointMetrics:
    """The process-wide :class:`EndpointMetrics` (created on first use, registered nowhere)."""
    return EndpointMetrics()


WEBHOOK_RESULTS = ("mutated", "skipped", "refused", "busy", "error")
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
            "for but cannot be served: the response says why), busy (no review slot freed in time: answered "
            "429 with Retry-After, which the API server retries), error (not an AdmissionReview, or a "
            "failure)",
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


def sidecar_registry(
    *, stats: Callable[[], Stats | None], multiproc_dir: Path | None, sidecar: SidecarMetrics,
    children: Mapping[str, Pid] | None = None,
    save: Callable[[], tuple[Mapping[str, float], Mapping[str, float]]] | None = None,
) -> CollectorRegistry:
    """The registry the sidecar's ``/metrics`` serves: store + children + supervisor, merged, with
    the build info and the ``process_*`` families of this process and of ``children`` (name: pid).
    ``save``: the supervisor's save of its totals, run at each scrape before the values are shown
    (:class:`SavedFirst`)."""
    from prometheus_client import CollectorRegistry

    own: Collector = sidecar.registry if save is None else SavedFirst(sidecar, save)
    sources: list[Collector] = [StoreCollector(stats=stats), own, endpoint_metrics(),
                                BuildInfoCollector(), *process_collectors(children)]
    if multiproc_dir is not None:
        sources.append(multiprocess_collector(multiproc_dir))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MergedCollector(sources))
    return registry


__all__ = [
    "BACKPRESSURE_HELP",
    "CUT_WAIT_BUCKETS",
    "CUT_WAIT_HELP",
    "DISK_FULL_HELP",
    "ENDPOINT_REJECT_REASONS",
    "FETCH_BUCKETS",
    "LISTING_NAME",
    "OUTAGE_CAUSES",
    "PROCESS_NAMES",
    "PROCESS_RESULTS",
    "REMOTE_OUTAGE_HELP",
    "STORE_COUNTERS",
    "STORE_GAUGES",
    "WEBHOOK_RESULTS",
    "BuildInfoCollector",
    "EndpointMetrics",
    "MergedCollector",
    "OutageGauges",
    "PauseGauges",
    "Pid",
    "ProcessMetrics",
    "SavedFirst",
    "SidecarMetrics",
    "StoreCollector",
    "WebhookMetrics",
    "child_of",
    "endpoint_metrics",
    "forget_process",
    "lazy_singleton",
    "multiprocess_collector",
    "outage_gauges",
    "pause_gauges",
    "prepare_multiproc_dir",
    "process_collectors",
    "process_metrics",
    "sidecar_registry",
]
