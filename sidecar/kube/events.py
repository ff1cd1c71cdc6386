"""Events recorded and aggregated: one per reason, its occurrences counted until they are sent.

Its own module because this is the half of the reporter the supervisor's threads run: the
``on_*`` calls only record under a lock and return at once, folding repeats into one Event per
reason (as client-go's event correlator does), a remote-error window that raises one Warning a
minute at most, and the token bucket that bounds how many requests the sender may make.
:class:`~.sender.KubeReporter` adds the thread that sends.
"""

from __future__ import annotations

import collections
import datetime as dt
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from epochfs.sidecar.kube.reporter import PodRef
from epochfs.sidecar.kube.status import status_summary
from epochfs.sidecar.store.stats import CACHE_FULL, DISK_FULL

COMPONENT = "epochfs-sidecar"
MAX_MESSAGE = 1024  # the API server truncates longer Event messages; keep ours whole

# Event reasons (CamelCase, as Kubernetes components use them).
REASON_CUT = "EpochCut"
REASON_BACKPRESSURE_ON = "BackpressureStarted"
REASON_BACKPRESSURE_OFF = "BackpressureEnded"
REASON_PUBLISH_PAUSED = "PublishPaused"
REASON_PUBLISH_RESUMED = "PublishResumed"
REASON_REMOTE_ERRORS = "RemoteErrors"
REASON_REMOUNT = "Remounted"


@dataclass
class EventState:
    """One aggregated Event: occurrences recorded, sent, and the server-side name once created."""

    reason: str
    type: str
    message: str
    first: dt.datetime
    last: dt.datetime
    name: str | None = None
    sent: int = 0
    pending: int = 0




def utcnow() -> dt.datetime:
    # Whole seconds: core/v1 Event timestamps are RFC 3339 without fractions.
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)



def event_body(k8s: Any, pod: PodRef, st: EventState, name: str, count: int, message: str,
               last: dt.datetime) -> Any:
    """The core/v1 Event ``name`` about ``pod`` (``k8s``: the ``kubernetes.client`` module)."""
    return k8s.CoreV1Event(
        api_version="v1",
        kind="Event",
        metadata=k8s.V1ObjectMeta(name=name, namespace=pod.namespace),
        involved_object=k8s.V1ObjectReference(api_version="v1", kind="Pod", name=pod.name,
                                              namespace=pod.namespace, uid=pod.uid),
        reason=st.reason,
        message=message,
        type=st.type,
        count=count,
        first_timestamp=st.first,
        last_timestamp=last,
        source=k8s.V1EventSource(component=COMPONENT, host=pod.node),
        reporting_component=f"epochfs.io/{COMPONENT}",
        reporting_instance=pod.name,
    )


class EventRecorder:
    """What the ``on_*`` calls record (under :attr:`_lock`, held briefly, never during I/O)."""

    def __init__(
        self,
        *,
        mount: str,
        error_threshold: int,
        error_window: float,
        burst: int,
        refill_seconds: float,
        clock: Callable[[], float],
        wall: Callable[[], dt.datetime],
    ) -> None:
        self.mount = mount
        self.error_threshold = int(error_threshold)
        self.error_window = float(error_window)
        self.burst = int(burst)
        self.refill_seconds = float(refill_seconds)
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()  # guards the recorded state below (held briefly, never during I/O)
        self._wake = threading.Condition(self._lock)
        self._events: dict[tuple[str, str], EventState] = {}  # by (reason, type)
        self._backpressure = False
        self._publish_paused = False
        self._errors: collections.deque[tuple[float, int]] = collections.deque()
        self._errors_reported_at: float | None = None
        self._status: dict[str, Any] | None = None
        self._tokens = float(burst)
        self._tokens_at = clock()

    # ------------------------------------------------------------------ what the supervisor calls
    def on_cut(self, epoch: int, samples: int) -> None:
        """An epoch was cut: a Normal ``EpochCut`` Event (aggregated: count and latest message)."""
        self._record(REASON_CUT, "Normal", f"cut epoch {int(epoch)} with {int(samples)} samples")

    def on_backpressure(self, on: bool, reason: str | None = None) -> None:
        """The sampler's backpressure state (``reason``: the store's, :data:`CACHE_FULL` or
        :data:`DISK_FULL` with what follows them); an Event when it starts and when it ends.

        A plain full cache is the normal snapshot-mode flow (the sampler fills the headroom and
        waits for the next cut, for as long as an epoch takes; before epoch 0 it waits for the
        trainer's first cut): a Normal Event, as docs/metrics.md's "Backpressure alone is normal"
        says: a Warning there would come with every epoch of every healthy pod. A Warning only
        where the store's reason is itself a problem: the filesystem full (``disk full``), or a
        schedule-mode window that can never fit beside the kept epochs (``cache full: <why>``).
        Whether a cut frees nothing for half an hour (EpochfsBackpressure) takes the alert's
        window, which a transition cannot see.
        """
        with self._lock:
            if bool(on) == self._backpressure:
                return
            self._backpressure = bool(on)
        if on and reason is not None and reason.startswith(DISK_FULL):
            # "disk full", or "disk full: <why>" (a filesystem that can hold no sample at all).
            why = reason[len(DISK_FULL):].removeprefix(": ")
            self._record(REASON_BACKPRESSURE_ON, "Warning",
                         f"{why}: sampling paused, keys kept" if why else
                         "the cache's filesystem is full: sampling paused, keys kept, until space returns")
        elif on and reason is not None and reason.startswith(f"{CACHE_FULL}: "):
            self._record(REASON_BACKPRESSURE_ON, "Warning", f"{reason}: sampling paused")
        elif on:
            self._record(REASON_BACKPRESSURE_ON, "Normal",
                         "the cache is full until the next cut frees room: sampling paused (the "
                         "normal wait between cuts; a problem only while cuts free nothing)")
        else:
            self._record(REASON_BACKPRESSURE_OFF, "Normal", "cache space freed: sampling resumed")

    def on_publish_paused(self, reason: str | None) -> None:
        """The folder view's publisher waits for room (``reason``) or publishes again (None); an
        Event when that changes: "disk full" where a cluster's operators look."""
        with self._lock:
            if (reason is not None) == self._publish_paused:
                return
            self._publish_paused = reason is not None
        if reason is not None:
            self._record(REASON_PUBLISH_PAUSED, "Warning",
                         f"disk full: {reason}; publishing paused, what is published stays readable")
        else:
            self._record(REASON_PUBLISH_RESUMED, "Normal",
                         "the folder view's volume has room: publishing resumed")

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

    # ------------------------------------------------------------------ recording
    def _record(self, reason: str, type_: str, message: str) -> None:
        """One occurrence, folded into the Event of its reason and type (client-go's aggregation
        key has both: a Normal and a Warning of one reason are two Events, each keeping its type)."""
        now = self._wall()
        with self._lock:
            st = self._events.get((reason, type_))
            if st is None:
                st = self._events[(reason, type_)] = EventState(reason=reason, type=type_, message=message,
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
