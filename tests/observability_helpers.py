"""The supervisor's saving of its totals without a supervisor: an :class:`Observability` over a
store and fresh metrics, and a scrape of a registry, for the tests of what ``/metrics`` shows
while the volume refuses the saves."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from epochfs.sidecar import metrics
from epochfs.sidecar.store import Store
from epochfs.sidecar.supervisor.observability import Observability


class StoreObservability(Observability):
    """The supervisor's periodic duty with what it reads: a store, its metrics, no reporter."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._metrics = metrics.SidecarMetrics(registry=CollectorRegistry())
        self._reporter = None
        self._seen: dict[str, Any] = {}

    def registry(self) -> CollectorRegistry:
        """What ``/metrics`` scrapes: these metrics, saved to the store before each collection."""
        return metrics.sidecar_registry(stats=lambda: None, multiproc_dir=None, sidecar=self._metrics,
                                        save=self._saved_totals)


def scraped(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """The value of sample ``name`` with exactly ``labels`` in ``registry``'s exposition."""
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    raise AssertionError(f"{name}{labels} not in the exposition")
