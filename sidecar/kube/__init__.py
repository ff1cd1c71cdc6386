"""Reporting to the Kubernetes API: Events on the sidecar's own pod and a status annotation.

Operators look at ``kubectl describe pod`` and ``kubectl get events`` before they look at a
dashboard, so the sidecar tells the cluster what it is doing: epoch cuts, backpressure starting
and ending, remote errors over a threshold, and remounts of the FUSE view, as Events on its own
pod; and a small JSON summary (latest epoch, samples, occupancy) in the pod annotation
``epochfs.io/status``. All of it with the official ``kubernetes`` client.

A busy sidecar must not flood the API server, and the API server must never stop sampling or
serving. So:

* The ``on_*`` methods only record, under a lock, and return at once; a background thread
  (:meth:`KubeReporter.start`) sends. They never raise and never block on the network.
* Events are aggregated the way client-go's event correlator does it: one Event per reason,
  created once and then patched (``count``, ``message``, ``lastTimestamp``) when it recurs.
  Requests draw from a token bucket (``burst`` at once, then one per ``refill_seconds``);
  occurrences that arrive while the bucket is empty are folded into the next patch's count.
* The status annotation is merge-patched at most once every ``status_interval`` seconds, and
  only when the summary changed.
* Every API error (403 forbidden, 404 expired event, 409 name conflict, 429 throttled, 5xx,
  timeouts, refused connections) is caught, logged at most once per kind every few minutes,
  and answered with a back-off; what was not delivered stays aggregated for the next try.

Outside a cluster (no ``KUBERNETES_SERVICE_HOST`` or no service account token), or with
``EPOCHFS_KUBE_REPORTING=0``, :func:`from_environment` returns a :class:`DisabledReporter` whose
methods do nothing, after one log line that says why.

Environment read by :func:`from_environment` (the Helm chart sets all of it):

* ``EPOCHFS_KUBE_REPORTING``: ``1`` (default) or ``0``.
* ``POD_NAME``, ``POD_NAMESPACE``, ``POD_UID``, ``NODE_NAME``: the downward API; the namespace
  falls back to the service account's ``namespace`` file.
* ``EPOCHFS_KUBE_STATUS_INTERVAL`` (seconds, default 30) and ``EPOCHFS_KUBE_ERROR_THRESHOLD``
  (remote errors per minute that raise a warning, default 20).

The API calls made are exactly :data:`API_CALLS`; the chart's Role grants those and no more (a
test keeps the two equal).

A package along its concerns: :mod:`.reporter` (the :class:`Reporter` protocol, the
:class:`DisabledReporter`, the pod), :mod:`.events` (recording and aggregating Events, the token
bucket), :mod:`.status` (the status annotation's content), :mod:`.sender` (:class:`KubeReporter`:
the sending thread and the API calls, :data:`API_CALLS`) and :mod:`.environment`
(:func:`from_environment`). This module re-exports their public names.
"""

from epochfs.sidecar.kube.environment import SERVICE_ACCOUNT_DIR, from_environment
from epochfs.sidecar.kube.events import (
    COMPONENT,
    MAX_MESSAGE,
    REASON_BACKPRESSURE_OFF,
    REASON_BACKPRESSURE_ON,
    REASON_CUT,
    REASON_REMOTE_ERRORS,
    REASON_REMOUNT,
)
from epochfs.sidecar.kube.reporter import DisabledReporter, PodRef, Reporter
from epochfs.sidecar.kube.sender import API_CALLS, MERGE_PATCH, KubeReporter
from epochfs.sidecar.kube.status import STATUS_ANNOTATION, status_summary

__all__ = [
    "API_CALLS",
    "COMPONENT",
    "MAX_MESSAGE",
    "MERGE_PATCH",
    "REASON_BACKPRESSURE_OFF",
    "REASON_BACKPRESSURE_ON",
    "REASON_CUT",
    "REASON_REMOTE_ERRORS",
    "REASON_REMOUNT",
    "SERVICE_ACCOUNT_DIR",
    "STATUS_ANNOTATION",
    "DisabledReporter",
    "KubeReporter",
    "PodRef",
    "Reporter",
    "from_environment",
    "status_summary",
]
