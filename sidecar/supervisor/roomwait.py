"""The sidecar's ports while its start waits for room on the cache's volume.

A sidecar started on a volume too full to open the index waits for room rather than exits
(:meth:`.core.Supervisor._open_store`: an exit would be a crash loop of the container). Until the
index opens there is no store for the real checks to read, and without a listener the kubelet's
probes are refused and Prometheus finds the target down, which says nothing of why. So the same
ports answer with what is known while it waits: ``/healthz`` 200 (alive: a restart would meet the
same full volume), ``/readyz`` 503 naming the full volume, and ``/metrics`` with
``epochfs_disk_full`` 1, which the EpochfsDiskFull alert reads for a sampler paused on a full
volume too. They are closed before the real endpoints bind the same ports.
"""

from __future__ import annotations

from typing import Any

from epochfs.sidecar.supervisor.ports import open_ports, ports


class RoomWait:
    """The endpoints of a start waiting for room: bound at the first :meth:`serve`, closed by
    :meth:`close`. Keyword-only; nothing is bound until the wait begins, so a start with room
    binds its ports once, in the real endpoints."""

    def __init__(self, *, host: str, health_port: int, metrics_port: int | None, cache: str) -> None:
        self.host = host
        self.ports = ports(health_port, metrics_port)
        self.cache = cache
        self.reason = ""
        self._endpoints: list[Any] = []

    def serve(self, reason: str) -> None:
        """Answer with ``reason`` (the full volume, in words) from now on; binds the ports the
        first time. A port that cannot be bound is a bad setting, as for the real endpoints."""
        self.reason = reason
        if self._endpoints:
            return
        from prometheus_client import CollectorRegistry, Gauge

        from epochfs.sidecar.metrics import DISK_FULL_HELP

        registry = CollectorRegistry(auto_describe=True)
        Gauge("epochfs_disk_full", DISK_FULL_HELP, registry=registry).set(1)
        self._endpoints = open_ports(self.ports, host=self.host, health=self.health, ready=self.ready,
                                     registry=registry, cache=self.cache,
                                     why=f"while the start waits for room: {reason}")

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Alive: the start waits, as it should; no child runs yet."""
        return True, {"mount": "not mounted", "children": {}, "starting": self.reason}

    def ready(self) -> tuple[bool, dict[str, Any]]:
        """Not ready, the full volume the reason (the keys of the running sidecar's /readyz)."""
        return False, {"mounted": False, "epoch0": False, "first_epoch": None, "samples": 0,
                       "reason": self.reason}

    def close(self) -> None:
        """Close every port bound (the real endpoints bind them next)."""
        for ep in self._endpoints:
            ep.stop()
        self._endpoints = []
