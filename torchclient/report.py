"""Reports from the training loop to the sidecar on the pod's loopback: is the GPU starved?

The loader counts what it delivered (samples, bytes) and how long the training loop waited for the
next batch; a daemon thread posts the increments every ``interval`` seconds as JSON to the
sidecar's ``/v1/client-report`` endpoint, which exports them as ``epochfs_client_*_total``.

Reporting must never slow or break training: :meth:`ClientReporter.add` only adds to counters under
a lock held for nanoseconds; the HTTP call happens on the thread, with a short timeout; failures are
counted and logged once, and after repeated failures the reporter backs off (a pod without a sidecar
costs one failed connection per minute at most).

**Where to report**, first found: ``EPOCHFS_REPORT_URL`` (the Helm chart sets it;
``EPOCHFS_REPORT_URL=off``, or an empty value, disables reporting); else the URL the mount's
``.epochfs/status.json`` names (``report_url``: the sidecar records its ``--health-port`` there at
its start, so a sidecar on any port is found through the mount the trainer reads; the reporter is
given the mount as ``root``); else ``http://127.0.0.1:8080/v1/client-report``. The status file is
read at the first report and again only after a report fails (a sidecar restarted on another port:
the next report goes to the new one), never per sample. Reports go direct, never through the
environment's proxies (:mod:`.sidecarhttp`).

**Which cache.** Each report names the mount's cache (status.json's ``shard.node``, header
``X-Epochfs-Cache``); a sidecar of another cache (on the port of a stopped sidecar's ``report_url``)
answers 409: the report is dropped, logged once, and status.json read again after a back-off.

**Epochs in use.** While a loader reads an epoch (:meth:`ClientReporter.reading` to
:meth:`ClientReporter.done`), every report names it in its query (``?epoch=N``), and a report is
sent at least every ``HEARTBEAT`` seconds even without deliveries (a pause for a checkpoint). Each
report also names the reporter (``client=<id>``, random per reporter), so the sidecar keeps the
epochs this client names pinned until a report of the same client no longer names them (or it is
silent for a heartbeat and more): the report after :meth:`ClientReporter.done` goes at once and
names what is read then, so an epoch the loop moved on from is released within seconds, whatever
``--in-use-seconds`` (:mod:`epochfs.sidecar.served_pins`). On the folder view (``--view folder``)
this is the only sign that a reader uses an epoch. So the first report naming an epoch goes at once
too (the thread is woken), not after ``interval``: until it arrives the epoch is held only by the
publisher's grace, which lasts ``--in-use-seconds`` from its showing, and a window of a second or
two could end before a report ``interval`` later. The epochs and the client go in the query rather
than a body field, and a sidecar that refuses the ``client`` parameter (400: one older than it)
gets reports without it from then on: it then dates each named epoch a heartbeat ahead instead.

**The last deliveries.** A training script need not call ``close()`` for its counts to arrive
(the README's loop does not): the end of an epoch (:meth:`ClientReporter.done`) wakes the thread
to post at once, and the interpreter's exit posts what is left, from the process that made the
reporter only (a forked child, a DataLoader worker among them, inherits a copy of the counts the
parent reports itself). The exit waits for that post :data:`EXIT_SECONDS` at most, all reporters
together."""

from __future__ import annotations

import atexit
import json
import logging
import os
import secrets
import threading
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path

from .reporturl import CACHE_HEADER as CACHE_HEADER
from .reporturl import DEFAULT_URL as DEFAULT_URL
from .reporturl import ENV as ENV
from .reporturl import cache_of_status as cache_of_status
from .reporturl import other_cache as other_cache
from .reporturl import other_cache_reason as other_cache_reason
from .reporturl import report_url as report_url
from .reporturl import report_url_from_env as report_url_from_env
from .reporturl import report_url_from_status as report_url_from_status
from .reporturl import sidecar_of_status as sidecar_of_status
from .sidecarhttp import open_sidecar

log = logging.getLogger("epochfs.torchclient.report")

MAX_BACKOFF = 60.0
HEARTBEAT = 30.0
"""Seconds between reports while an epoch is read and nothing is delivered. The sidecar keeps a
client's epochs pinned while it hears from the client at least this often (and a debounce more),
so a paused reader keeps its epoch whatever the sidecar's in-use window."""
EXIT_SECONDS = 1.0
"""The most the interpreter's exit waits for the reporters' last posts (a report's own timeout):
a sidecar that does not answer costs the trainer's exit this, never a hang."""


class ClientReporter:
    """Counts deliveries and posts increments to the sidecar from a daemon thread."""

    def __init__(self, *, url: str | None, interval: float = 2.0, timeout: float = 1.0,
                 root: str | os.PathLike[str] | None = None) -> None:
        """``url``: where to report (None: not at all). ``root``: the mount read; while
        ``EPOCHFS_REPORT_URL`` is unset, reports go where its status.json names (read at the first
        report, again after one fails), ``url`` where it names none."""
        if interval <= 0 or timeout <= 0:
            raise ValueError("interval and timeout must be positive")
        self.url = url
        self._fallback = url
        self._root = Path(root) if root is not None and url is not None and ENV not in os.environ else None
        self._mount = Path(root) if root is not None else None  # its status.json names the cache
        self._cache: str | None = None  # CACHE_HEADER's value, read with the URL
        self._told_other = False  # another cache's sidecar refused a report: said once
        self._looked = False  # status.json read for the URL since the last failed report
        self.interval = interval
        self.timeout = timeout
        self.sent_reports = 0
        self.failed_reports = 0
        self._lock = threading.Lock()
        self._posting = threading.Lock()  # one flush at a time: the thread's and a caller's never overlap
        self._samples = 0
        self._bytes = 0
        self._wait = 0.0
        self._epochs: dict[int, int] = {}
        self._unnamed: set[int] = set()  # epochs begun that no sent report has named yet
        self._last_sent = 0.0
        self._stop = threading.Event()
        self._wake = threading.Event()  # an epoch begun or ended: post now, not at the next interval
        self._thread: threading.Thread | None = None
        self._ended = False  # an epoch ended since the last report: the thread posts now
        self._pid = os.getpid()  # the process whose deliveries these counts are
        self.client = secrets.token_hex(8)  # names this reporter's reads to the sidecar
        self._plain = False  # the sidecar refused the client parameter (an older one): not sent
        _LIVE.add(self)

    def reading(self, epoch: int) -> None:
        """An epoch is being read: name it in every report until :meth:`done` (cheap). An epoch no
        one here reads yet is named at once: the thread is woken to post (the caller never waits
        for the post)."""
        if self.url is None:
            return
        with self._lock:
            new = epoch not in self._epochs
            self._epochs[epoch] = self._epochs.get(epoch, 0) + 1
            if new:
                self._unnamed.add(epoch)
        self._start()
        if new:
            self._wake.set()

    def done(self, epoch: int) -> None:
        """The epoch :meth:`reading` named is no longer read (by this caller). Its last deliveries
        are posted now (the thread is woken; the caller never waits): a script may end here."""
        with self._lock:
            left = self._epochs.get(epoch, 0) - 1
            ended = left <= 0 and epoch in self._epochs
            if left > 0:
                self._epochs[epoch] = left
            else:
                self._epochs.pop(epoch, None)
                self._unnamed.discard(epoch)
            self._ended = self._ended or ended
        if ended:
            self._wake.set()

    def _start(self) -> None:
        """Start the posting thread unless it runs. After :meth:`close` (a loader closed on a dead
        worker goes on training) the next thread gets a fresh stop event: the closed one stays set,
        so a thread still stopping (its join timed out in a slow post) exits instead of running
        beside the new one."""
        if self._thread is None:
            if self._stop.is_set():
                self._stop = threading.Event()
                self._wake.clear()  # close's wake-up was for the stopped thread
            self._thread = threading.Thread(target=self._run, args=(self._stop,), name="epochfs-report",
                                            daemon=True)
            self._thread.start()

    def add(self, *, samples: int, nbytes: int, wait_seconds: float) -> None:
        """Count one delivered batch (cheap; called from the training loop)."""
        if self.url is None:
            return
        with self._lock:
            self._samples += samples
            self._bytes += nbytes
            self._wait += max(0.0, wait_seconds)
        self._start()

    def _take(self, *, naming: bool = False) -> dict[str, float | int] | None:
        """What the next report says, taken from the counts; None when nothing is due (with
        ``naming``: unless an epoch begun is not named yet or one ended, whatever else is counted)."""
        with self._lock:
            if naming and not (self._unnamed or self._ended):
                return None
            # An epoch ended: the report says what is read now, which releases the ended one.
            ended, self._ended = self._ended, False
            heartbeat = ended or (bool(self._epochs) and (
                bool(self._unnamed) or time.monotonic() - self._last_sent >= HEARTBEAT))
            if not (self._samples or self._bytes or self._wait or heartbeat):
                return None
            body: dict[str, float | int] = {
                "samples": self._samples, "bytes": self._bytes, "wait_seconds": round(self._wait, 6)
            }
            self._samples, self._bytes, self._wait = 0, 0, 0.0
            return body

    def _give_back(self, body: dict[str, float | int]) -> None:
        with self._lock:
            self._samples += int(body["samples"])
            self._bytes += int(body["bytes"])
            self._wait += float(body["wait_seconds"])

    def flush(self) -> bool:
        """Post what was counted since the last report; False (and kept for later) on failure."""
        with self._posting:
            return self._post()

    def _look(self) -> bool:
        """Take the URL the mount's status.json names (the fallback where it names none); True
        when that changed where reports go (the URL only with ``EPOCHFS_REPORT_URL`` unset); the
        cache it names is read with it."""
        self._looked = True
        if self._root is None:
            self._cache = cache_of_status(self._mount)
            return False
        named, self._cache = sidecar_of_status(self._root)
        url = named or self._fallback
        changed, self.url = url != self.url, url
        return changed

    def _post(self, *, naming: bool = False) -> bool:
        body = self._take(naming=naming)
        if body is None or self.url is None:
            return True
        with self._lock:
            epochs = sorted(self._epochs)[-8:]  # the sidecar takes at most 8
            unnamed = set(self._unnamed)
        cached = self._looked
        if not cached:
            self._look()
        error = self._send(body, epochs)
        if not self._plain and isinstance(error, urllib.error.HTTPError) and error.code == 400:
            self._plain = True  # a sidecar that takes no client parameter: it dates reads ahead itself
            error = self._send(body, epochs)
        if error is not None and cached and self._look():  # the sidecar named another URL since: try it
            error = self._send(body, epochs)
        if error is not None:
            self._looked = False  # read status.json again before the next try
            self.failed_reports += 1
            refused = other_cache(error)
            if refused is not None:  # dropped: these reads are not that sidecar's
                if not self._told_other:
                    self._told_other = True
                    log.warning("epochfs: reports to %s are refused: %s", self.url, refused)
                return False
            self._give_back(body)
            if self.failed_reports == 1:
                log.info("epochfs: cannot report to the sidecar at %s (%s); will retry quietly",
                         self.url, error)
            return False
        self.sent_reports += 1
        with self._lock:
            self._last_sent = time.monotonic()
            self._unnamed -= unnamed  # named (or beyond the 8 a report names: not posted for again)
        return True

    def _send(self, body: dict[str, float | int], epochs: list[int]) -> OSError | None:
        """POST ``body`` to :attr:`url`, naming ``epochs``; the error, None when it was taken."""
        assert self.url is not None
        url = self.url
        query = [f"epoch={n}" for n in epochs] + ([] if self._plain else [f"client={self.client}"])
        if query:
            url += ("&" if "?" in url else "?") + "&".join(query)
        headers = {"Content-Type": "application/json"}
        if self._cache is not None:
            headers[CACHE_HEADER] = self._cache
        request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers)
        try:
            with open_sidecar(request, self.timeout) as response:
                response.read()
        except OSError as e:
            return e
        return None

    def _run(self, stop: threading.Event) -> None:
        """Post every ``interval`` (backing off after failures), and at once when :meth:`reading`
        wakes it for a new epoch, unless backing off: a sidecar that does not answer costs no more
        connections for a new epoch than it did."""
        delay = self.interval
        due = time.monotonic() + delay
        while not stop.is_set():
            woken = self._wake.wait(max(0.0, due - time.monotonic()))
            self._wake.clear()
            if stop.is_set():
                return
            early = woken and time.monotonic() < due
            if early and delay > self.interval:
                continue  # backing off: the new epoch is named at the next try
            with self._posting:  # early: to name a new epoch or end one (a caller's flush may have)
                ok = self._post(naming=early)
            if early and ok:
                continue  # the next report is due on time, not an interval from now
            delay = self.interval if ok else min(MAX_BACKOFF, delay * 2)
            due = time.monotonic() + delay

    def close(self) -> None:
        """Post the last increments (best effort) and stop the thread; a later :meth:`reading` or
        :meth:`add` starts a new one (the loaders close on a dead worker and go on)."""
        self._stop.set()
        self._wake.set()  # the thread's wait ends now, not at its next interval
        if self._thread is not None:
            self._thread.join(timeout=self.timeout + 1)
            self._thread = None
        self.flush()

    def flush_within(self, seconds: float) -> None:
        """Post what is left, and let a post in flight (the reporting thread's, woken by an epoch's
        end just before) finish: the interpreter's exit stops a daemon thread mid-post. Waits
        ``seconds`` at most: the post runs on a thread of its own, so neither a sidecar that does
        not answer nor a mount that hangs the status.json read holds the caller longer. Nothing
        from a process other than the reporter's (a fork holds a copy of the parent's counts)."""
        if self.url is None or os.getpid() != self._pid or seconds <= 0:
            return
        with self._lock:
            idle = not (self._samples or self._bytes or self._wait)
        if idle and not self._posting.locked():  # counts taken by a post hold _posting until it ends
            return
        poster = threading.Thread(target=self.flush, name="epochfs-report-exit", daemon=True)
        try:
            poster.start()
        except RuntimeError:  # no new thread at this point of the interpreter's exit: post here
            self.flush()
            return
        poster.join(timeout=seconds)


_LIVE: weakref.WeakSet[ClientReporter] = weakref.WeakSet()
"""The reporters of this process, for the post at exit (held weakly: a reporter never used goes)."""


def _flush_all_at_exit() -> None:
    """Post every reporter's last counts, :data:`EXIT_SECONDS` at most for all of them together."""
    deadline = time.monotonic() + EXIT_SECONDS
    for reporter in list(_LIVE):
        try:
            reporter.flush_within(deadline - time.monotonic())
        except Exception:  # the exit goes on whatever a report does
            log.debug("epochfs: the last report failed at exit", exc_info=True)


atexit.register(_flush_all_at_exit)
