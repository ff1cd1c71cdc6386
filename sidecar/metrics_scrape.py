"""The metrics read when ``/metrics`` is scraped, which no process counts: what the store persists,
the build, and each process's ``/proc`` facts.

Apart from :mod:`epochfs.sidecar.metrics` (which re-exports every name here, so callers import
them from there) because these are collectors, not instruments: nothing increments them; each
``collect()`` reads its source afresh (``Store.stats()``, the package version, ``/proc/<pid>``), so
they hold no state of their own and none of them goes through the children's mmap files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from epochfs.sidecar import procfs
from epochfs.sidecar.metrics_merge import Collector, LabelledCollector
from epochfs.sidecar.store import Stats
from epochfs.sidecar.store.stats import DISK_FULL

if TYPE_CHECKING:
    from prometheus_client.core import Metric

# prometheus-client is imported inside the functions that collect (the sampler imports the metrics
# on its way to its first GET and must not pay for prometheus-client there).

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
    "epochfs_cache_capacity_bytes": "The cache byte budget in force: --capacity, or less while the "
                                    "cache's filesystem cannot hold that much (snapshot mode: what the "
                                    "disk allows, at least 1), as status shows it.",
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
    "epochfs_samples_repairing": "Samples whose object file is being fetched again in place (the old "
                                 "file kept until the new one replaces it; lost ones included).",
    "epochfs_samples_lost": "Samples the remote lost (cannot be fetched again): their entries stay in "
                            "their epochs and a read of one fails with EIO until the epoch retires.",
}


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
            "epochfs_disk_full": 1 if (stats.backpressure_reason or "").startswith(DISK_FULL) else 0,
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


PROCESS_NAMES = ("supervisor", "sampler", "fuse", "publisher", "listing")
"""Values of the ``process`` label of the ``process_*`` families: the supervisor (the one process
that serves ``/metrics``), the children it may run, and the sampler's listing process (a child
of the sampler, found by :func:`child_of`)."""

Pid = Callable[[], int | None]
"""The current pid of a child (None while it is not running): read at every scrape, so a
restarted child is followed without re-registering anything."""

LISTING_NAME = b"epochfs-listing"
"""The listing process's name (``/proc/PID/comm``: the child names itself so with
``prctl(PR_SET_NAME)``, ``sidecar/listing/child.py``'s ``NAME``): how :func:`child_of` tells it
from any other child of the sampler. Its command line cannot: the first listing process is
forked from the sampler and keeps the sampler's. Named here, not imported: the metrics sit below
the listing."""


def child_of(parent: Pid, name: bytes) -> Pid:
    """The pid of the child process of ``parent`` named ``name`` (its ``comm``; None when there
    is none now), read from ``/proc`` at every call.

    Why from ``/proc``: the listing process is the sampler's child, not the supervisor's, and is
    started again by the sampler when it dies, so the supervisor holds no handle on it; its
    parent's children list is the one record that is always current (no pid file to go stale
    after a kill -9 and name a reused pid). A few small reads per scrape."""

    def pid() -> int | None:
        ppid = parent()
        if ppid is None:
            return None
        wanted = name.decode("utf-8", "replace")  # as procfs decodes a name
        for child in procfs.children(ppid):
            stat = procfs.stat(child)  # None: exited meanwhile
            if stat is not None and stat.name == wanted:
                return child
        return None

    return pid


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

    Registered nowhere: :func:`~.metrics.sidecar_registry` merges them. Each is labelled (see
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


__all__ = [
    "LISTING_NAME",
    "PROCESS_NAMES",
    "STORE_COUNTERS",
    "STORE_GAUGES",
    "BuildInfoCollector",
    "Pid",
    "StoreCollector",
    "child_of",
    "process_collectors",
]
