"""How the sidecar's metric sources become one exposition: the children's mmap files summed, dead
children's live gauges dropped, and families of one name from several sources merged.

No metric is defined here (they are all in :mod:`epochfs.sidecar.metrics`); this is the plumbing
between prometheus-client's collectors, kept apart so that module stays a list of metrics.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prometheus_client.core import Metric

# prometheus-client is imported inside the functions that use it (the sampler imports the metrics
# on its way to its first GET and must not pay for prometheus-client there: epochfs.sidecar.metrics).


class Collector(Protocol):
    """Anything a registry can collect from."""

    def collect(self) -> Iterable[Metric]: ...


def multiprocess_collector(path: Path) -> Collector:
    """The children's values from the mmap files in ``path`` (not registered anywhere)."""
    from prometheus_client.multiprocess import MultiProcessCollector

    return MultiProcessCollector(None, path=str(path))


def forget_process(pid: int, path: Path) -> None:
    """A child died: drop its live gauges (downloads in flight); its counters stay summed."""
    from prometheus_client.multiprocess import mark_process_dead

    mark_process_dead(pid, str(path))


class MergedCollector:
    """Merge families of the same name from several collectors into one.

    ``epochfs_remote_objects_total`` gets ``ok``/``skipped`` from the store and ``retried``/``failed``
    from the sampler; an exposition with the family twice would be invalid, so samples are joined
    (and summed when the same labels come twice).
    """

    def __init__(self, collectors: Iterable[Collector]) -> None:
        self._collectors = list(collectors)

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import Metric

        merged: dict[str, Metric] = {}
        for collector in self._collectors:
            for family in collector.collect():
                known = merged.get(family.name)
                if known is None:
                    copy = Metric(family.name, family.documentation, family.type, family.unit)
                    copy.samples = list(family.samples)
                    merged[family.name] = copy
                    continue
                index = {(s.name, tuple(sorted(s.labels.items()))): i for i, s in enumerate(known.samples)}
                for s in family.samples:
                    key = (s.name, tuple(sorted(s.labels.items())))
                    if key in index:
                        old = known.samples[index[key]]
                        known.samples[index[key]] = old._replace(value=old.value + s.value)
                    else:
                        known.samples.append(s)
        yield from merged.values()


class LabelledCollector:
    """Every sample of ``collector`` with one more label, ``name="value"``.

    Why: the supervisor exports the standard ``process_*`` families (prometheus-client's
    ``ProcessCollector``) once for itself and once for each child. :class:`MergedCollector` joins
    families of one name and *sums* samples whose labels are equal, so without a label that tells
    the processes apart the sampler's memory would be added to the FUSE server's; with a
    ``process`` label they stay separate series of one family.
    """

    def __init__(self, collector: Collector, name: str, value: str) -> None:
        self._collector = collector
        self._name = name
        self._value = value

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import Metric

        for family in self._collector.collect():
            copy = Metric(family.name, family.documentation, family.type, family.unit)
            copy.samples = [s._replace(labels={**s.labels, self._name: self._value}) for s in family.samples]
            yield copy


def prepare_multiproc_dir(path: Path) -> Path:
    """Create (or empty) the folder for the children's metric files: stale files from a previous
    supervisor would be summed with the new ones."""
    path.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(path):
        if entry.name.endswith(".db"):
            os.unlink(entry.path)
    return path
