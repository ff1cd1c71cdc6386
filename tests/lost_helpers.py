"""Shared by the tests of lost samples (issue 20): make a sample of a published epoch lost the way
the background scrub does, and read the metrics a store or a server process exports."""

from __future__ import annotations

import os
from pathlib import Path

from fuse_helpers import sid_of
from prometheus_client import CollectorRegistry

from epochfs.sidecar.store import Store, object_name


def make_lost(store: Store, key: str) -> None:
    """What the background scrub does with a damaged object whose key the remote no longer lists
    (here: no catalog row at all): check it, take it out, and mark it lost (it cannot be fetched
    again into its place). The damage is a deleted file: a byte flipped in place would be served
    to a concurrent reader until the take-out (as on a real bad disk), which the readers of these
    tests would count as wrong bytes; the end-to-end test in tests/mount flips one."""
    os.unlink(store.objects_dir / object_name(sid_of(key)))
    [obj] = [o for o in store.stored_objects(after_id=0, limit=100_000) if o.key == key]
    problem = store.check_object(obj)
    assert problem is not None, "the damage is found"
    [taken] = store.take_out([(obj, problem)], quarantine=False)
    assert taken.refetch is None, "the key is not listed: the sample cannot be repaired"
    stats = store.stats()
    assert (stats.repairing, stats.lost) == (1, 1), stats


def store_gauge(store: Store, name: str) -> float | None:
    """The value of the store's gauge ``name`` as the sidecar's ``/metrics`` exports it."""
    from epochfs.sidecar import metrics

    registry = CollectorRegistry()
    registry.register(metrics.StoreCollector(stats=store.stats))
    return registry.get_sample_value(name)


def process_counter(mpdir: Path, name: str, labels: dict[str, str]) -> float:
    """A counter a child process wrote to the multiprocess folder ``mpdir`` (0 when absent)."""
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(mpdir))
    return registry.get_sample_value(name, labels) or 0.0
