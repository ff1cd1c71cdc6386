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
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("epochfs.kube")

#: (API group, resource, verb) of every call this module makes: the chart's Role grants these.
API_CALLS: frozenset[tuple[str, str, str]] = frozenset(
    {("", "events", "create"), ("", "events", "patch"), ("", "pods", "patch")}
)
STATUS_ANNOTATION = "epochfs.io/status"
COMPONENT = "epochfs-sidecar"
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MERGE_PATCH = "application/merge-patch+json"
MAX_MESSAGE = 1024  # the API server truncates longer Event messages; keep ours whole

# Event reasons (CamelCase, as Kubernetes components use them).
REASON_CUT = "EpochCut"
REASON_BACKPRESSURE_ON = "BackpressureStarted"
REASON_BACKPRESSURE_OFF = "BackpressureEnded"
REASON_REMOTE_ERRORS = "RemoteErrors"
REASON_REMOUNT = "Remounted"


class Reporter(Protocol):
    """What the supervisor calls; :class:`KubeReporter` and :class:`DisabledReporter` provide it."""

    enabled: bool

    def start(self) -> None: ...
    def close(self, *, flush: bool = True) -> None: ...
    def on_cut(self, epoch: int, samples: int) -> None: ...
    def on_backpressure(self, on: bool, reason: str | None = None) -> None: ...
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


@dataclass
class _EventState:
    """One aggregated Event: occurrences recorded, sent, and the server-side name once created."""

    reason: str
    type: str
    message: str
    first: dt.datetime
    last: dt.datetime
    name: str | None = None
    sent: int = 0
    pending: int = 0


@dataclass
class _Stats:
    """Counters for tests and the debug log: requests by outcome."""

    created: int = 0
    patched: int = 0
    annotated: int = 0
    failed: dict[str, int] = field(default_factory=lambda: collections.defaultdict(int))


def _utcnow() -> dt.datetime:
    # Whole seconds: core/v1 Event timestamps are RFC 3339 without fractions.
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


class KubeReporter:
    """Events and a status annotation for the sidecar's own pod, aggregated and rate-limited.

    The supervisor's API (none of these raise or wait for the network)::

        reporter = kube.from_environment()       # KubeReporter, or DisabledReporter outside a cluster
        reporter.start()                         # background sender thread
        reporter.on_cut(epoch, samples)          # an epoch was cut (Normal EpochCut)
        reporter.on_backpressure(on)             # call with the current state; Events on changes only
        reporter.on_remote_errors(n)             # n new remote errors; Warning past the threshold/minute
        reporter.on_remount()                    # the FUSE server died and the view was mounted again
        reporter.update_status(stats.to_json())  # Store.stats() as a dict; annotation, throttled
        reporter.close()                         # at SIGTERM: one last bounded flush, stop the thread

    :meth:`flush` sends what is due now; the thread calls it, tests call it directly with a fake
    ``clock`` to control rate limits and intervals.
    """

    enabled = True

    def __init__(
        self,
        *,
        api_client: Any,
        pod: PodRef,
        mount: str = "",
        status_interval: float = 30.0,
        error_threshold: int = 20,
        error_window: float = 60.0,
        burst: int = 10,
        refill_seconds: float = 30.0,
        request_timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = _utcnow,
    ) -> None:
        from kubernetes import client as k8s

        if status_interval <= 0 or error_window <= 0 or refill_seconds <= 0 or request_timeout <= 0:
            raise ValueError("intervals and timeouts must be positive")
        if error_threshold < 1 or burst < 1:
            raise ValueError("error_threshold and burst must be at least 1")
        self._k8s = k8s
        self._api = k8s.CoreV1Api(api_client)
        self.pod = pod
        self.mount = mount
        self.status_interval = float(status_interval)
        self.error_threshold = int(error_threshold)
        self.error_window = float(error_window)
        self.burst = int(burst)
        self.refill_seconds = float(refill_seconds)
        self.request_timeout = float(request_timeout)
        self._clock = clock
        self._wall = wall

        self._lock = threading.Lock()  # guards the recorded state below (held briefly, never during I/O)
        self._send_lock = threading.Lock()  # one flush at a time
        self._wake = threading.Condition(self._lock)
        self._events: dict[str, _EventState] = {}
        self._backpressure = False
        self._errors: collections.deque[tuple[float, int]] = collections.deque()
        self._errors_reported_at: float | None = None
        self._status: dict[str, Any] | None = None
        self._status_sent: dict[str, Any] | None = None
        self._status_tried_at: float | None = None
        self._tokens = float(burst)
        self._tokens_at = clock()
        self._backoff_until = 0.0
        self._warned: dict[str, float] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.stats = _Stats()

    # ------------------------------------------------------------------ what the supervisor calls
    def on_cut(self, epoch: int, samples: int) -> None:
        """An epoch was cut: a Normal ``EpochCut`` Event (aggregated: count and latest message)."""
        self._record(REASON_CUT, "Normal", f"cut epoch {int(epoch)} with {int(samples)} samples")

    def on_backpressure(self, on: bool, reason: str | None = None) -> None:
        """The sampler's backpressure state; an Event when it starts and when it ends."""
        with self._lock:
            if bool(on) == self._backpressure:
                return
            self._backpressure = bool(on)
        if on and reason == "disk full":
            self._record(REASON_BACKPRESSURE_ON, "Warning",
                         "the cache's filesystem is full: sampling paused, keys kept, until space returns")
        elif on:
            self._record(REASON_BACKPRESSURE_ON, "Warning",
                         "cache full and nothing evictable (live epochs pin it): sampling paused "
                         "until an epoch retires")
        else:
            self._record(REASON_BACKPRESSURE_OFF, "Normal", "cache space freed: sampling resumed")

    def on_remote_errors(self, n: int) -> None:
        """``n`` new remote errors; a Warning when a window holds at least the threshold.

        At most one occurrence per window is recorded, so a failing remote costs one Event patch
        a minute, not one per error.
        """
        if n <= 0:
            return
        now = self._clock()
        with self._lock:
            self._errors.append((now, int(n)))
            while self._errors and self._errors[0][0] <= now - self.error_window:
                self._errors.popleft()
            total = sum(k for _, k in self._errors)
            due = self._errors_reported_at is None or now - self._errors_reported_at >= self.error_window
            if total < self.error_threshold or not due:
                return
            self._errors_reported_at = now
        self._record(REASON_REMOTE_ERRORS, "Warning",
                     f"{total} remote errors in the last {self.error_window:.0f}s (threshold "
                     f"{self.error_threshold}); failing objects are retried, then skipped")

    def on_remount(self) -> None:
        """The FUSE server died; its dead mount was lazily unmounted and mounted again."""
        where = f" at {self.mount}" if self.mount else ""
        self._record(REASON_REMOUNT, "Warning",
                     f"the FUSE server stopped; the epoch view{where} was unmounted and mounted again")

    def update_status(self, stats: Mapping[str, Any]) -> None:
        """Record the latest ``Store.stats().to_json()``; the annotation follows, throttled."""
        summary = status_summary(stats)
        with self._lock:
            self._status = summary
            self._wake.notify()

    # ------------------------------------------------------------------ thread
    def start(self) -> None:
        """Send in a daemon thread from now on (idempotent)."""
        with self._lock:
            if self._thread is not None:
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="epochfs-kube", daemon=True)
            self._thread.start()

    def close(self, *, flush: bool = True) -> None:
        """Stop the thread; with ``flush``, one last bounded attempt to deliver what is pending."""
        with self._lock:
            self._stopping = True
            self._wake.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=2 * self.request_timeout + 1)
        if flush:
            self.flush(force_status=True)

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                self._wake.wait(timeout=self._next_wait())
                if self._stopping:
                    return
            try:
                self.flush()
            except Exception:  # never let the reporter thread die: it only reports
                log.exception("kubernetes reporting: unexpected error (reporting continues)")

    def _next_wait(self) -> float:
        """Seconds until something may be due: a token refill, the status interval, a back-off."""
        now = self._clock()
        waits = [self.refill_seconds]
        if self._backoff_until > now:
            waits.append(self._backoff_until - now)
        if self._status is not None and self._status != self._status_sent and self._status_tried_at:
            waits.append(self._status_tried_at + self.status_interval - now)
        if any(st.pending for st in self._events.values()) and self._tokens >= 1:
            waits.append(0.0)
        return max(0.05, min(waits))

    # ------------------------------------------------------------------ recording
    def _record(self, reason: str, type_: str, message: str) -> None:
        now = self._wall()
        with self._lock:
            st = self._events.get(reason)
            if st is None:
                st = self._events[reason] = _EventState(reason=reason, type=type_, message=message,
                                                        first=now, last=now)
            st.pending += 1
            st.message = message[:MAX_MESSAGE]
            st.last = now
            self._wake.notify()

    def _take_token(self, now: float) -> bool:
        self._tokens = min(float(self.burst), self._tokens + (now - self._tokens_at) / self.refill_seconds)
        self._tokens_at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    # ------------------------------------------------------------------ sending
    def flush(self, *, force_status: bool = False) -> None:
        """Send what is due now: pending Events within the rate limit, and the annotation if its
        interval has passed (``force_status``: regardless of the interval). Never raises."""
        with self._send_lock:
            try:
                self._flush_events()
                self._flush_status(force=force_status)
            except Exception:  # the contract: reporting never breaks the caller
                log.exception("kubernetes reporting: unexpected error (reporting continues)")

    def _flush_events(self) -> None:
        while True:
            now = self._clock()
            with self._lock:
                if now < self._backoff_until:
                    return
                st = next((s for s in self._events.values() if s.pending), None)
                if st is None or not self._take_token(now):
                    return
                name, pending, message, last = st.name, st.pending, st.message, st.last
            ok = self._patch_event(st, name, pending, message, last) if name else self._create_event(
                st, pending, message, last)
            if not ok:
                return

    def _event_body(self, st: _EventState, name: str, count: int, message: str,
                    last: dt.datetime) -> Any:
        k8s = self._k8s
        return k8s.CoreV1Event(
            api_version="v1",
            kind="Event",
            metadata=k8s.V1ObjectMeta(name=name, namespace=self.pod.namespace),
            involved_object=k8s.V1ObjectReference(api_version="v1", kind="Pod", name=self.pod.name,
                                                  namespace=self.pod.namespace, uid=self.pod.uid),
            reason=st.reason,
            message=message,
            type=st.type,
            count=count,
            first_timestamp=st.first,
            last_timestamp=last,
            source=k8s.V1EventSource(component=COMPONENT, host=self.pod.node),
            reporting_component=f"epochfs.io/{COMPONENT}",
            reporting_instance=self.pod.name,
        )

    def _create_event(self, st: _EventState, pending: int, message: str, last: dt.datetime) -> bool:
        # client-go names Events <object>.<hex nanoseconds>; a random suffix avoids clashes between
        # restarts of the sidecar in the same pod.
        name = f"{self.pod.name}.{time.time_ns():x}{uuid.uuid4().hex[:4]}"
        body = self._event_body(st, name, pending, message, last)
        try:
            # The generated client sends no Content-Type for creates (and ignores _content_type
            # there); the API server would assume JSON, but say so.
            self._api.create_namespaced_event(self.pod.namespace, body,
                                              _request_timeout=self.request_timeout,
                                              _headers={"Content-Type": "application/json"})
        except Exception as e:
            # 409: that name exists (a clock step, a restart): a new name next time.
            return self._failed("create event", e)
        with self._lock:
            st.name = name
            st.sent += pending
            st.pending -= pending
        self.stats.created += 1
        return True

    def _patch_event(self, st: _EventState, name: str, pending: int, message: str,
                     last: dt.datetime) -> bool:
        patch = {
            "count": st.sent + pending,
            "message": message,
            "lastTimestamp": last.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        try:
            self._api.patch_namespaced_event(name, self.pod.namespace, patch,
                                             _request_timeout=self.request_timeout,
                                             _content_type=MERGE_PATCH)
        except Exception as e:
            if getattr(e, "status", None) == 404:
                # Events expire (an hour by default): start a new one with the whole count.
                with self._lock:
                    st.name = None
                    st.pending += st.sent
                    st.sent = 0
            return self._failed("patch event", e)
        with self._lock:
            st.sent += pending
            st.pending -= pending
        self.stats.patched += 1
        return True

    def _flush_status(self, *, force: bool) -> None:
        now = self._clock()
        with self._lock:
            summary = self._status
            if summary is None or summary == self._status_sent:
                return
            if not force and now < self._backoff_until:
                return
            if (not force and self._status_tried_at is not None
                    and now - self._status_tried_at < self.status_interval):
                return
            self._status_tried_at = now
        value = json.dumps({**summary, "updated": self._wall().strftime("%Y-%m-%dT%H:%M:%SZ")},
                           sort_keys=True, separators=(",", ":"))
        patch = {"metadata": {"annotations": {STATUS_ANNOTATION: value}}}
        try:
            self._api.patch_namespaced_pod(self.pod.name, self.pod.namespace, patch,
                                           _request_timeout=self.request_timeout,
                                           _content_type=MERGE_PATCH)
        except Exception as e:
            self._failed("patch pod annotation", e)
            return
        with self._lock:
            self._status_sent = summary
        self.stats.annotated += 1

    def _failed(self, what: str, e: Exception) -> bool:
        """Log (rate-limited) and back off; always returns False (stop this flush)."""
        status = getattr(e, "status", None)
        kind = str(status) if status else type(e).__name__
        self.stats.failed[kind] += 1
        now = self._clock()
        if status == 429:
            retry = _retry_after(e)
            delay = retry if retry is not None else 10.0
        elif status in (403, 404, 409):
            delay = 0.0  # not the server's load: the next occurrence or flush tries again
        else:
            delay = 5.0  # 5xx, timeouts, refused connections
        with self._lock:
            self._backoff_until = max(self._backoff_until, now + delay)
        key = f"{what}:{kind}"
        if now - self._warned.get(key, -1e18) >= 300.0:
            self._warned[key] = now
            hint = ""
            if status == 403:
                hint = " (check the Role: the chart grants events create/patch and pods patch)"
            log.warning("kubernetes reporting: %s failed: %s%s; sampling and serving continue",
                        what, _describe(e), hint)
        return False


def _retry_after(e: Exception) -> float | None:
    headers = getattr(e, "headers", None) or {}
    try:
        value = headers.get("Retry-After")
        return max(0.0, min(300.0, float(value))) if value is not None else None
    except (TypeError, ValueError):
        return None


def _describe(e: Exception) -> str:
    status = getattr(e, "status", None)
    if status:
        return f"HTTP {status} {getattr(e, 'reason', '') or ''}".strip()
    return f"{type(e).__name__}: {str(e)[:200]}"


def status_summary(stats: Mapping[str, Any]) -> dict[str, Any]:
    """The annotation's content from ``Store.stats().to_json()``: small, stable keys, no timestamps
    (so an unchanged cache costs no API call)."""
    cap = int(stats.get("capacity_bytes") or 0)
    used = int(stats.get("cache_bytes") or 0)
    return {
        "latestEpoch": stats.get("latest_epoch"),
        "samples": int(stats.get("samples") or 0),
        "cacheBytes": used,
        "capacityBytes": cap,
        "occupancy": round(used / cap, 3) if cap else 0.0,
        "backpressure": bool(stats.get("backpressure")),
        "backpressureReason": stats.get("backpressure_reason"),
    }


def from_environment(
    environ: Mapping[str, str] | None = None,
    *,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    mount: str = "",
    reporting: bool = True,
    status_interval: float = 30.0,
    error_threshold: int = 20,
    **kwargs: Any,
) -> KubeReporter | DisabledReporter:
    """A reporter for this process: a :class:`KubeReporter` inside a cluster with reporting on,
    else a :class:`DisabledReporter` after one log line that says why.

    ``reporting``, ``status_interval`` and ``error_threshold`` are the sidecar's settings
    (``--kube-*``, validated by :mod:`epochfs.sidecar.config`); ``environ`` gives what the cluster
    and the downward API set (KUBERNETES_SERVICE_HOST, POD_NAME...). ``kwargs`` go to the constructor.
    """
    env = os.environ if environ is None else environ
    if not reporting:
        log.info("kubernetes reporting off (--kube-reporting / EPOCHFS_KUBE_REPORTING)")
        return DisabledReporter(reason="switched off")
    if status_interval <= 0 or error_threshold < 1:
        raise ValueError("status_interval must be positive and error_threshold at least 1")
    token = service_account_dir / "token"
    if not env.get("KUBERNETES_SERVICE_HOST") or not token.is_file():
        log.info("kubernetes reporting off: not running in a cluster (no KUBERNETES_SERVICE_HOST or no "
                 "service account token at %s)", token)
        return DisabledReporter(reason="not in a cluster")
    namespace = env.get("POD_NAMESPACE") or _read(service_account_dir / "namespace")
    name = env.get("POD_NAME", "")
    if not name or not namespace:
        log.warning("kubernetes reporting off: POD_NAME and POD_NAMESPACE must come from the downward "
                    "API (the Helm chart sets them)")
        return DisabledReporter(reason="pod unknown")
    from kubernetes import client as k8s
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.incluster_config import InClusterConfigLoader

    configuration = k8s.Configuration()
    try:
        InClusterConfigLoader(token_filename=str(token), cert_filename=str(service_account_dir / "ca.crt"),
                              environ=env).load_and_set(configuration)
    except ConfigException as e:
        log.warning("kubernetes reporting off: in-cluster configuration failed: %s", e)
        return DisabledReporter(reason=f"configuration: {e}")
    configuration.retries = 0  # our own back-off and aggregation replace urllib3's retries
    pod = PodRef(name=name, namespace=namespace, uid=env.get("POD_UID") or None,
                 node=env.get("NODE_NAME") or None)
    log.info("kubernetes reporting on: Events and the %s annotation of pod %s/%s",
             STATUS_ANNOTATION, namespace, name)
    return KubeReporter(api_client=k8s.ApiClient(configuration), pod=pod, mount=mount,
                        status_interval=status_interval, error_threshold=error_threshold, **kwargs)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


__all__ = [
    "API_CALLS",
    "STATUS_ANNOTATION",
    "DisabledReporter",
    "KubeReporter",
    "PodRef",
    "Reporter",
    "from_environment",
    "status_summary",
]
