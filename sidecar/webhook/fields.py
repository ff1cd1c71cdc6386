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
PREFIX = "epochfs.io/"
WRITTEN = (INJECTED, "epochfs.io/status")
"""The ``epochfs.io/*`` annotations epochfs writes itself: the webhook's marker and the sidecar's
status (``epochfs.sidecar.kube.status``), which a pod copied from a running one carries."""
ANNOTATION_ONLY = (PROFILE, REMOTE, CAPACITY, SHARD_INDEX, CONTAINERS)
"""The options read from annotations only: as labels they are refused, not ignored (only
``epochfs.io/inject`` works as a label too, for the objectSelector and the matchCondition)."""

SHARD_ENV = "EPOCHFS_SHARD_INDEX"
REMOTE_ENV = "EPOCHFS_REMOTE"
INDEX_ENV = "EPOCHFS_INDEX"
"""The profile's ``remote.indexUrl``: the keys of the profile's remote, which another remote lacks."""
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

SHOWN_CHARS = 200
"""The characters of a pod's value that a message quotes: the API server shows the message to the
user and the webhook logs it, so a value as long as the request (megabytes) must not travel whole."""
MAX_VALUE_CHARS = 2048
"""The longest value of an ``epochfs.io/*`` annotation the webhook reads (a URL up to the common
2,048-character limit); longer ones are refused before any parser sees them, so no parser's cost
on a hostile value (an annotation may hold 256 KiB) holds up the other reviews."""


def cut(text: str) -> str:
    """``text``, or its first :data:`SHOWN_CHARS` characters and how long it was."""
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}… ({len(text)} characters)"


MAX_MESSAGE_CHARS = 1000
"""The longest refusal message: past it, a message (a parser's words quoting a value of the pod)
is cut in its middle, so it keeps its start (what was refused) and its end (why)."""


def cut_message(text: str) -> str:
    """``text``, or its start and its end around how long it was."""
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    keep = (MAX_MESSAGE_CHARS - 40) // 2
    return f"{text[:keep]} … ({len(text)} characters) … {text[-keep:]}"


def quoted(value: Any) -> str:
    """A pod's ``value`` as a message quotes it: its ``repr``, cut as :func:`cut` cuts."""
    if isinstance(value, str) and len(value) > SHOWN_CHARS:
        return f"{value[:SHOWN_CHARS]!r}… ({len(value)} characters)"
    return cut(repr(value))
