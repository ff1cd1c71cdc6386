"""The sidecar's listening ports and what each serves, bound the same way by the running sidecar
(:mod:`.observability`) and by a start that waits for room (:mod:`.roomwait`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from epochfs.sidecar.config import ConfigError
from epochfs.sidecar.confparse import bind_failure

log = logging.getLogger("epochfs.supervisor")


@dataclass(frozen=True)
class Port:
    """One listening port of the sidecar and what it serves."""

    flag: str
    """The flag that set it, named in a bind failure (``--health-port``, ``--metrics-port``)."""
    port: int
    metrics: bool
    """It serves ``/metrics``."""
    pod_only: bool
    """It takes the client reports and cut requests (the health port, which only the pod and
    the kubelet reach)."""


def ports(health_port: int, metrics_port: int | None) -> list[Port]:
    """The sidecar's ports: ``/metrics`` on the health port, or only on ``--metrics-port`` when
    that is given and differs, so a NetworkPolicy can open scrapes to Prometheus while the
    probes, the torch client's reports and cut requests stay on a port only the pod reaches."""
    separate = metrics_port is not None and metrics_port != health_port
    found = [Port("--health-port", health_port, not separate, True)]
    if metrics_port is not None and separate:
        found.append(Port("--metrics-port", metrics_port, True, False))
    return found


def open_ports(wanted: list[Port], *, host: str, health: Callable[[], tuple[bool, dict[str, Any]]],
               ready: Callable[[], tuple[bool, dict[str, Any]]], registry: Any, cache: Any,
               on_report: Callable[[Any], None] | None = None,
               on_cut: Callable[[Any], tuple[int, dict[str, Any]]] | None = None,
               why: str = "") -> list[Any]:
    """Bind and start the endpoints of each port of ``wanted``: ``registry`` on the ports that
    serve ``/metrics``, reports and cuts on the pod's own; ``why`` follows the log line and a bind
    failure's words. A port that cannot be bound is a bad setting (ConfigError naming its flag),
    and the ports bound before it are closed again."""
    from epochfs.sidecar import endpoints

    opened: list[Any] = []
    for p in wanted:
        try:
            ep = endpoints.Endpoints(
                host=host, port=p.port, health=health, ready=ready, cache=cache,
                registry=registry if p.metrics else None,
                on_client_report=on_report if p.pod_only else None,
                on_cut=on_cut if p.pod_only else None,
            )
        except OSError as e:
            for done in opened:
                done.stop()
            raise ConfigError(f"{p.flag} {p.port}: {bind_failure(e)}{f' ({why})' if why else ''}") from None
        ep.start()
        opened.append(ep)
        log.info("serving /healthz /readyz%s on port %d of %s%s", " /metrics" if p.metrics else "",
                 ep.port, ep.where, f" {why}" if why else "")
    return opened
