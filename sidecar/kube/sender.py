"""The :class:`KubeReporter`: a background thread that sends what was recorded, and the API calls.

Its own module because this is where the API server is met: the three calls in :data:`API_CALLS`
(which the chart's Role grants, no more), every error caught, logged at most once per kind every
few minutes and answered with a back-off, what was not delivered kept for the next try. The
recording it sends is :class:`~.events.EventRecorder`'s.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from epochfs.sidecar.kube.events import EventRecorder, EventState, event_body, utcnow
from epochfs.sidecar.kube.reporter import PodRef
from epochfs.sidecar.kube.status import annotation_patch

log = logging.getLogger("epochfs.kube")

#: (API group, resource, verb) of every call this module makes: the chart's Role grants these.
API_CALLS: frozenset[tuple[str, str, str]] = frozenset(
    {("", "events", "create"), ("", "events", "patch"), ("", "pods", "patch")}
)
MERGE_PATCH = "application/merge-patch+json"


@dataclass
class _Stats:
    """Counters for tests and the debug log: requests by outcome."""

    created: int = 0
    patched: int = 0
    annotated: int = 0
    failed: dict[str, int] = field(default_factory=lambda: collections.defaultdict(int))



class KubeReporter(EventRecorder):
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
        wall: Callable[[], dt.datetime] = utcnow,
    ) -> None:
        from kubernetes import client as k8s

        if status_interval <= 0 or error_window <= 0 or refill_seconds <= 0 or request_timeout <= 0:
            raise ValueError("intervals and timeouts must be positive")
        if error_threshold < 1 or burst < 1:
            raise ValueError("error_threshold and burst must be at least 1")
        super().__init__(mount=mount, error_threshold=error_threshold, error_window=error_window,
                         burst=burst, refill_seconds=refill_seconds, clock=clock, wall=wall)
        self._k8s = k8s
        self._api = k8s.CoreV1Api(api_client)
        self.pod = pod
        self.status_interval = float(status_interval)
        self.request_timeout = float(request_timeout)

        self._send_lock = threading.Lock()  # one flush at a time
        self._status_sent: dict[str, Any] | None = None
        self._status_tried_at: float | None = None
        self._backoff_until = 0.0
        self._warned: dict[str, float] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.stats = _Stats()


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

    def _create_event(self, st: EventState, pending: int, message: str, last: dt.datetime) -> bool:
        # client-go names Events <object>.<hex nanoseconds>; a random suffix avoids clashes between
        # restarts of the sidecar in the same pod.
        name = f"{self.pod.name}.{time.time_ns():x}{uuid.uuid4().hex[:4]}"
        body = event_body(self._k8s, self.pod, st, name, pending, message, last)
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

    def _patch_event(self, st: EventState, name: str, pending: int, message: str,
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
        patch = annotation_patch(summary, self._wall())
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
