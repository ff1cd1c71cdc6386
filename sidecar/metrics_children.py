"""The supervisor's metrics of its children: how often each started again, and why, and whether it
runs (:class:`ChildMetrics`, part of :class:`epochfs.sidecar.metrics.SidecarMetrics`).

A child's start after an exit is a *restart* or a *retry*. A retry follows a transient failure
(exit 75, ``EXIT_RETRY``: the remote unreachable at the sampler's start, or the cache's volume too
full for it to write the index), which the sidecar waits out with backoff: a remote that answers
40 s late at the pod's start makes 7 of them, and counting those with the restarts fired
EpochfsChildRestarting for 15 minutes on a healthy pod. A remote that stays down has alerts of
its own (EpochfsListingStalled, EpochfsSamplerStalled), a full volume EpochfsDiskFull, which
the supervisor's ``epochfs_disk_full`` feeds while the sampler cannot start
(:meth:`ChildMetrics.waiting_for_room`).

Retries are counted in the supervisor's memory from its start, never saved in the index as the
restarts are (``Meta.SIDECAR_RESTARTS``): a wait is no state to carry over, and a full volume, one
of its causes, takes no save.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from epochfs.sidecar.metrics_sampler import DISK_FULL_HELP

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


class ChildMetrics:
    """``epochfs_child_restarts_total``, ``epochfs_child_retries_total`` and ``epochfs_child_up``
    by ``child``, each series made at once for every child in ``children`` (restarts and retries
    at 0, so ``increase()`` counts the first; up at 0 until the child starts), and the
    supervisor's ``epochfs_disk_full``, in ``registry``."""

    def __init__(self, registry: CollectorRegistry, children: Iterable[str]) -> None:
        from prometheus_client import Counter, Gauge

        self.restarts = Counter(
            "epochfs_child_restarts", "Restarts of a child process after it died (a crash, a "
            "remount, an index replaced); not its retries after a transient failure.", ["child"],
            registry=registry,
        )
        self.retries = Counter(
            "epochfs_child_retries", "Starts of a child process again after a transient failure "
            "(exit 75: the remote unreachable, or the cache's volume full, at its start).", ["child"],
            registry=registry,
        )
        self.up = Gauge("epochfs_child_up", "1 while the child process runs.", ["child"], registry=registry)
        self.disk_full = Gauge("epochfs_disk_full", DISK_FULL_HELP, registry=registry)
        for child in children:
            self.restarts.labels(child=child)
            self.retries.labels(child=child)
            self.up.labels(child=child)

    def waiting_for_room(self, waiting: Callable[[], bool]) -> None:
        """``epochfs_disk_full`` 1 whenever ``waiting()`` says, read at each scrape: the sampler
        waits to start again because the cache's volume was too full for its start
        (``ChildProcesses.waiting_for_room``). It exits before it could set its own gauge, and
        the index cannot take the store's record of the pause; the exposition takes the largest
        of the three (:data:`epochfs.sidecar.metrics_merge.EITHER`)."""
        self.disk_full.set_function(lambda: 1.0 if waiting() else 0.0)
