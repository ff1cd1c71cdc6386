"""Prometheus counters of the FUSE server: requests and errors by operation, reads of lost samples.

They live in the fuse package because fuse may import nothing from ``epochfs.sidecar`` but the
store (DESIGN.md's dependency rule, checked by import-linter: .importlinter); every other metric is in
``epochfs.sidecar.metrics``, which re-exports these. Under the supervisor,
``PROMETHEUS_MULTIPROC_DIR`` is set for this process, so the values go to mmap files the supervisor
sums into its ``/metrics``, and they survive a crash of the server.

The server observes one family it shares with the sampler and the supervisor,
``epochfs_cut_wait_seconds``: the cuts a lookup of ``epoch-N`` makes (:meth:`FuseMetrics.cut_waited`).
Its help and buckets come from :mod:`epochfs.sidecar.store.cutwait`, as the sampler's and the
supervisor's do: the three halves must stay one family.

Labels are bounded: ``op`` is a FUSE operation name (others fold into ``other``), ``errno`` a short
list of names (others ``other``). Never a path.
"""

from __future__ import annotations

import errno as errno_mod
import threading
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram

from epochfs.sidecar.store.cutwait import CUT_WAIT_BUCKETS, CUT_WAIT_HELP

FUSE_OPS = (
    "lookup", "getattr", "readdir", "opendir", "releasedir", "readlink", "open", "read", "release",
    "statfs", "access", "getxattr", "listxattr", "flush", "fsync", "fsyncdir", "write", "create",
    "mkdir", "mknod", "unlink", "rmdir", "rename", "link", "symlink", "chmod", "chown", "truncate",
    "utimens", "setxattr", "removexattr", "init", "destroy", "other",
)
FUSE_ERRNOS = ("ENOENT", "EROFS", "EACCES", "EPERM", "EIO", "EINVAL", "EBADF", "ENOTDIR", "EISDIR",
               "ENODATA", "other")


def fuse_op_label(op: str) -> str:
    """Fold an operation name into the bounded ``op`` label set."""
    return op if op in FUSE_OPS else "other"


def errno_label(code: int | None) -> str:
    """Fold an errno into the bounded ``errno`` label set."""
    name = errno_mod.errorcode.get(code or 0, "other")
    return name if name in FUSE_ERRNOS else "other"


class FuseMetrics:
    """``epochfs_fuse_requests_total{op}``, ``epochfs_fuse_errors_total{op,errno}`` and
    ``epochfs_fuse_lost_reads_total{op}`` (reads of an entry whose sample the remote lost), and
    ``epochfs_cut_wait_seconds`` for the cuts a lookup made."""

    def __init__(self, *, registry: CollectorRegistry | None) -> None:
        self.requests = Counter(
            "epochfs_fuse_requests", "FUSE requests served, by operation.", ["op"], registry=registry,
        )
        self.errors = Counter(
            "epochfs_fuse_errors", "FUSE requests answered with an error, by operation and errno.",
            ["op", "errno"], registry=registry,
        )

        self.lost_reads = Counter(
            "epochfs_fuse_lost_reads", "Reads (opens, or readlinks of an entry the kernel still held "
            "as a symlink) of entries whose sample the remote lost, answered EIO, by operation.",
            ["op"], registry=registry,
        )
        # Registered nowhere: the family is the sampler's too, and a registry holding both (a
        # test's, one process running both) refuses a second family of one name. Under the
        # supervisor its values reach /metrics through the mmap files all the same, as this
        # server's registry is never served itself.
        self.cut_wait_seconds = Histogram(
            "epochfs_cut_wait_seconds", CUT_WAIT_HELP, buckets=CUT_WAIT_BUCKETS, registry=None,
        )

    def cut_waited(self, seconds: float) -> None:
        """A lookup of ``epoch-N`` made its cut ``seconds`` after it was asked for (since the
        request was queued, or the lookup's own time): :meth:`epochfs.fuse.view.View`."""
        self.cut_wait_seconds.observe(max(0.0, seconds))

    def init_ops(self, ops: Iterable[str]) -> None:
        """Create the series of the operations a server implements, at zero, so they exist from the
        first scrape (dashboards then show 0 rather than no data)."""
        for op in ops:
            label = fuse_op_label(op)
            self.requests.labels(op=label)
            self.errors.labels(op=label, errno="ENOENT" if label in ("getattr", "lookup") else "EIO")

    def lost_read(self, op: str) -> None:
        """A read of a lost sample's entry, answered EIO (:mod:`epochfs.fuse.lost`)."""
        self.lost_reads.labels(op=fuse_op_label(op)).inc()

    def request(self, op: str, error: int | None = None) -> None:
        """One FUSE request; ``error`` is the errno it answered, if any."""
        label = fuse_op_label(op)
        self.requests.labels(op=label).inc()
        if error:
            self.errors.labels(op=label, errno=errno_label(error)).inc()


_lock = threading.Lock()
_default: FuseMetrics | None = None


def fuse_metrics() -> FuseMetrics:
    """The process-wide :class:`FuseMetrics` on the default registry (created on first use)."""
    global _default
    with _lock:
        if _default is None:
            from prometheus_client import REGISTRY

            _default = FuseMetrics(registry=REGISTRY)
            _default.init_ops(("getattr", "readlink", "readdir", "open", "read", "release", "statfs"))
            for op in ("open", "readlink"):
                _default.lost_reads.labels(op=op)
        return _default
