"""Shared by the tests of lost samples (issue 20): make a sample of a published epoch lost the way
the background scrub does, and read the metrics a store or a server process exports."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Collection
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


def names(root: Path) -> set[str]:
    """Every file under ``root``, relative to it (the entries of an epoch)."""
    return {os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files}


class Reader(threading.Thread):
    """Reads every file of ``epochs`` (folders) over and over; each file but ``lost`` must read its
    bytes, ``lost`` its bytes or (once lost) one of ``lost_errnos``, and each folder of ``listed``
    must list exactly ``objects`` at every look. (The FUSE test lists only one epoch: a listing,
    readdir-plus, refreshes the kernel's entries by itself, so the other is read by path alone, as
    from its manifest, to show the server's invalidation.)"""

    def __init__(self, epochs: list[Path], objects: dict[str, bytes], lost: str, *,
                 listed: Collection[Path], lost_errnos: Collection[int] = (errno.ENOENT, errno.EIO)) -> None:
        super().__init__(daemon=True)
        self.epochs, self.objects, self.lost = epochs, objects, lost
        self.listed, self.allowed = set(listed), set(lost_errnos)
        self.stop = threading.Event()
        self.passes = 0
        self.problems: list[str] = []
        self.lost_errnos: set[int] = set()

    def run(self) -> None:
        while not self.stop.is_set():
            for epoch in self.epochs:
                if epoch in self.listed and names(epoch) != set(self.objects):
                    self.problems.append(f"{epoch.name}'s listing changed")
                for key, body in self.objects.items():
                    try:
                        data = (epoch / key).read_bytes()
                    except OSError as e:
                        if key == self.lost and e.errno in self.allowed:
                            self.lost_errnos.add(e.errno)
                        else:
                            self.problems.append(f"{epoch.name}/{key}: {e}")
                        continue
                    if data != body:
                        self.problems.append(f"{epoch.name}/{key}: wrong bytes")
            self.passes += 1
