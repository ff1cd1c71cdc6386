"""What the supervisor holds: the :class:`Reporter` protocol, the reporter that does nothing, the pod.

Its own module so that the supervisor's side of reporting (the calls it makes, which never raise
nor wait) reads apart from how :class:`~.sender.KubeReporter` delivers them, and so that a
process outside a cluster needs nothing of the Kubernetes client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class Reporter(Protocol):
    """What the supervisor calls; :class:`KubeReporter` and :class:`DisabledReporter` provide it."""

    enabled: bool

    def start(self) -> None: ...
    def close(self, *, flush: bool = True) -> None: ...
    def on_cut(self, epoch: int, samples: int) -> None: ...
    def on_backpressure(self, on: bool, reason: str | None = None) -> None: ...
    def on_publish_paused(self, reason: str | None) -> None: ...
    def on_remote_errors(self, n: int) -> None: ...
    def on_remount(self) -> None: ...
    def update_status(self, stats: Mapping[str, Any]) -> None: ...


class DisabledReporter:
    """Reporting off (outside a cluster, or switched off): every method does nothing."""

    enabled = False

    def __init__(self, *, reason: str) -> None:
        self.reason = reason

    def start(self) -> None:
        pass

    def close(self, *, flush: bool = True) -> None:
        pass

    def on_cut(self, epoch: int, samples: int) -> None:
        pass

    def on_backpressure(self, on: bool, reason: str | None = None) -> None:
        pass

    def on_publish_paused(self, reason: str | None) -> None:
        pass

    def on_remote_errors(self, n: int) -> None:
        pass

    def on_remount(self) -> None:
        pass

    def update_status(self, stats: Mapping[str, Any]) -> None:
        pass


@dataclass(frozen=True)
class PodRef:
    """The pod the sidecar runs in: the object its Events are about and whose annotation it sets."""

    name: str
    namespace: str
    uid: str | None = None
    node: str | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.namespace:
            raise ValueError("a pod needs a name and a namespace")
