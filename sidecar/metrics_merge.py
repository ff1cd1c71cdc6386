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


class _StartedFiles:
    """prometheus-client's collector of the mmap files in a folder, less the files a starting
    child has created and not yet sized (shorter than a header): the library read such a file
    as a header, and the scrape that met it failed whole (``unpack_from requires a buffer of at
    least 4 bytes``, met right after a child's restart). Such a file holds no value yet."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def collect(self) -> Iterable[Metric]:
        from prometheus_client.multiprocess import MultiProcessCollector

        files = []
        for file in self.path.glob("*.db"):
            try:
                if file.stat().st_size >= EMPTY:
                    files.append(str(file))
            except FileNotFoundError:  # a dead child's, removed meanwhile
                continue
        return MultiProcessCollector.merge(files, accumulate=True)


def multiprocess_collector(path: Path) -> Collector:
    """The children's values from the mmap files in ``path`` (not registered anywhere)."""
    return _StartedFiles(path)


USED_HEADER = 4
"""prometheus-client's mmap files begin with the bytes in use, a little-endian int32
(``prometheus_client.mmap_dict``: ``MmapedDict`` writes it, ``read_all_values_from_file`` reads no
further than it)."""
EMPTY = 8
"""The bytes in use of a file with no value yet (the header and its padding)."""


FILE_KINDS = ("counter", "histogram", "gauge_livesum", "gauge_livemax")
"""The files a child writes: its metrics' types, and for gauges their multiprocess mode
(``epochfs.sidecar.metrics_sampler`` and ``epochfs.fuse.metrics``; a test holds them to this)."""

def file_names(pid: int) -> list[str]:
    """The names prometheus-client gives a process's files (``<kind>_<pid>.db``)."""
    return [f"{kind}_{pid}.db" for kind in FILE_KINDS]


def forget_process(pid: int, path: Path) -> None:
    """A child died: drop its live gauges (downloads in flight); its counters stay summed, and
    its other files shrink to the bytes their values take.

    Each child's files are allocated :data:`~epochfs.sidecar.metrics_files.RESERVED` bytes up
    front (so that a full volume is no SIGBUS), and a dead child's counter and histogram files
    stay until the supervisor restarts, their totals summed: 256 KiB of the cache's volume per
    restart, ~30 MiB an hour for a crash-looping sampler. Cut to their used length they keep every
    value (nothing reads past it, the scrape included: it reads the header, then up to it) and
    cost a page or two each. Truncating frees blocks, so it works on a full volume too. The pid
    is not running (it was reaped), so nothing writes them.
    """
    from prometheus_client.multiprocess import mark_process_dead


    mark_process_dead(pid, str(path))
    for name in file_names(pid):
        _shrink(path / name)


def _shrink(file: Path) -> None:
    """Cut a dead process's mmap file to the bytes its header says are in use (at least the
    header: a scrape may have listed the file already, and reads it whole). A header beyond the
    file (not one prometheus-client wrote) leaves it as it is."""
    try:
        with open(file, "r+b") as f:
            used = max(EMPTY, int.from_bytes(f.read(USED_HEADER).ljust(USED_HEADER, b"\0"), "little"))
            if used < os.fstat(f.fileno()).st_size:
                f.truncate(used)
    except FileNotFoundError:
        return


EITHER = frozenset({"epochfs_backpressure", "epochfs_disk_full"})
"""Flags two sources give (the index's record and the live sampler's gauges,
:class:`epochfs.sidecar.metrics_sampler.PauseGauges`): the larger value is taken, not the sum (either one
saying 1 is the answer; both saying it is 1, not 2)."""


class MergedCollector:
    """Merge families of the same name from several collectors into one.

    ``epochfs_remote_objects_total`` gets ``ok``/``skipped`` from the store and ``retried``/``failed``
    from the sampler; an exposition with the family twice would be invalid, so samples are joined
    (and summed when the same labels come twice; the largest taken for the :data:`EITHER` flags).
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
                        value = (max(old.value, s.value) if family.name in EITHER
                                 else old.value + s.value)
                        known.samples[index[key]] = old._replace(value=value)
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
