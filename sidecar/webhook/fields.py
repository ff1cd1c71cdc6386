"""The names the webhook reads on a pod and writes into the sidecar's environment.

One home for them because three modules use them: :mod:`.mutate` (the decision and its patch),
:mod:`.podchecks` (the refusals) and :mod:`.overrides` (the annotations' values put into the
sidecar's environment); :mod:`.mutate`'s docstring says what each annotation means.
"""

from __future__ import annotations

import re
from typing import Any

INJECT = "epochfs.io/inject"
PROFILE = "epochfs.io/profile"
REMOTE = "epochfs.io/remote"
CAPACITY = "epochfs.io/capacity"
SHARD_INDEX = "epochfs.io/shard-index"
CONTAINERS = "epochfs.io/containers"
INJECTED = "epochfs.io/injected"
ANNOTATIONS = (INJECT, PROFILE, REMOTE, CAPACITY, SHARD_INDEX, CONTAINERS)

SHARD_ENV = "EPOCHFS_SHARD_INDEX"
CAPACITY_SHARE_TENTHS = 9
"""The share of the cache volume a capacity may take: the chart's (epochfs.capacity, _helpers.tpl)."""
KUBE_API_VOLUME = "epochfs-kube-api-access"
KUBE_REPORTING_ENV = "EPOCHFS_KUBE_REPORTING"
KUBE_REPORTING_DETAIL_ENV = ("EPOCHFS_KUBE_STATUS_INTERVAL", "EPOCHFS_KUBE_ERROR_THRESHOLD")
TEMPLATE_METRICS_PORT = "metrics"
"""The sidecar's port name in the chart's templates (epochfs.sidecarContainer): the chart's own Job,
Service and monitors select it on the release's own pods."""
METRICS_PORT = "epochfs-metrics"
"""The injected sidecar's port name instead: the chart's PodMonitor of injected pods scrapes this name
in every container of the users' pods, which may name a port of their own ``metrics`` (KubeRay's
workers do). A container port name: at most 15 characters, lowercase letters, digits and '-'."""
FIELD_PATH_RE = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")
"""A downward-API field path of the pod's own labels or annotations (a shard read from them)."""

JSON = dict[str, Any]
