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
sent at least every ``HEARTBEAT`` seconds even without deliveries (a pause for a checkpoint). The
sidecar records a read of each named epoch, which keeps it pinned: on the folder view
(``--view folder``) this is the only sign that a reader uses an epoch. So the first report naming
an epoch goes at once (the thread is woken), not after ``interval``: until it arrives the epoch is
held only by the publisher's grace, which lasts ``--in-use-seconds`` from its showing, and a window
of a second or two could end before a report ``interval`` later (a slow worker start-up delays it
further). That is one report more per epoch begun; the others go every ``interval``. The epochs
go in the query rather than a body field, so that an older sidecar (which refuses unknown fields)
still takes the report.

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
import threading
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from urllib.parse import quote, urlparse

from .layout import REPORT_URL_KEY, SHARD_KEY, read_status
from .sidecarhttp import open_sidecar

log = logging.getLogger("epochfs.torchclient.report")

ENV = "EPOCHFS_REPORT_URL"
DEFAULT_URL = "http://127.0.0.1:8080/v1/client-report"
MAX_BACKOFF = 60.0
HEARTBEAT = 30.0
"""Seconds between reports while an epoch is read and nothing is delivered. The sidecar dates a
reported read this far ahead (and a debounce more), so a paused reader keeps its epoch whatever the
sidecar's in-use window, one shorter than this included."""
EXIT_SECONDS = 1.0
"""The most the interpreter's exit waits for the reporters' last posts (a report's own timeout):
a sidecar that does not answer costs the trainer's exit this, never a hang."""


def report_url_from_env() -> str | None:
    """The report URL from ``EPOCHFS_REPORT_URL``, :data:`DEFAULT_URL` when it is unset (None when
    reporting is off)."""
    url = os.environ.get(ENV, DEFAULT_URL).strip()
    if url.lower() in ("", "off", "none", "0", "false"):
        return None
    if urlparse(url).scheme not in ("http", "https"):
        raise ValueError(f"EPOCHFS_REPORT_URL must be an http(s) URL or 'off', got {url!r}")
    return url


def report_url_from_status(root: str | os.PathLike[str]) -> str | None:
    """The report URL ``root/.epochfs/status.json`` names (``report_url``), or None: no status file
    (a plain folder, the mount not there), an older sidecar's without the field, or a value that is
    not an http(s) URL (then the caller's fallback is tried, not a broken URL)."""
    return _url_of(read_status(root))


def sidecar_of_status(root: str | os.PathLike[str]) -> tuple[str | None, str | None]:
    """(:func:`report_url_from_status`, :func:`cache_of_status`) from one reading of status.json."""
    return _url_of(doc := read_status(root)), _cache_of(doc)


def _url_of(doc: dict[str, object] | None) -> str | None:
    url = doc.get(REPORT_URL_KEY) if doc is not None else None
    if not isinstance(url, str) or urlparse(url).scheme not in ("http", "https"):
        return None
    return url


CACHE_HEADER = "X-Epochfs-Cache"
"""The request header naming the cache a report or cut request is about (``<host>:<cache>``,
percent-encoded); the sidecar answers 409 when it serves another cache."""


def cache_of_status(root: str | os.PathLike[str] | None) -> str | None:
    """The cache behind ``root`` as its status.json names it (``shard.node``), percent-encoded for
    :data:`CACHE_HEADER`; None where it names none (a plain folder, an older sidecar's document)."""
    return _cache_of(read_status(root) if root is not None else None)


def _cache_of(doc: dict[str, object] | None) -> str | None:
    shard = doc.get(SHARD_KEY) if doc is not None else None
    node = shard.get("node") if isinstance(shard, dict) else None
    if not isinstance(node, str) or not node:
        return None
    try:
        return quote(node, safe="/:@+-._~", errors="surrogateescape")  # a non-UTF-8 path as its bytes
    except UnicodeEncodeError:  # not a name any path has: no header, as for a mount naming none
        return None


def other_cache_reason(status: int, doc: object) -> str | None:
    """The sidecar's reason when its answer (``status``, the parsed JSON ``doc``) is the 409 for
    another cache's request, else None."""
    if status != 409 or not isinstance(doc, dict) or doc.get("state") != "other_cache":
        return None
    return str(doc.get("message", "the sidecar serves another cache"))


def other_cache(error: BaseException) -> str | None:
    """:func:`other_cache_reason` of a failed request's ``error`` (reads its body)."""
    if not isinstance(error, urllib.error.HTTPError) or error.code != 409:
        return None
    try:
        doc = json.loads(error.read())
    except (OSError, ValueError):
        return None
    return other_cache_reason(error.code, doc)


def report_url(root: str | os.PathLike[str] | None) -> str | None:
    """Where a reader of ``root`` reports, first found: ``EPOCHFS_REPORT_URL`` when set (None when
    it says off), the URL ``root``'s status.json names, :data:`DEFAULT_URL`."""
    if root is None or ENV in os.environ:
        return report_url_from_env()
    return report_url_from_status(root) or DEFAULT_URL


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
            self._ended = False
            heartbeat = bool(self._epochs) and (
                bool(self._unnamed) or time.monotonic() - self._last_sent >= HEARTBEAT)
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
        if epochs:
            url += ("&" if "?" in url else "?") + "&".join(f"epoch={n}" for n in epochs)
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
