"""The sidecar's HTTP endpoints: ``/healthz``, ``/readyz``, ``/metrics`` and the client report.

``POST /v1/client-report`` takes a JSON body ``{"samples": int, "bytes": int, "wait_seconds": float}``
(increments since the client's previous report) from the torch client on the pod's loopback; other
addresses get 403, so nothing outside the pod can inflate the numbers. Its query may name the
epochs the client reads (``?epoch=N``, repeated): the folder view's only sign that they are in use
(a query, so that older sidecars, which refuse unknown body fields, still take the report).
``POST /v1/cut?epoch=N[&jump=1]`` (loopback only, no body) asks for a cut as a lookup of
``epoch-N`` does on the FUSE view (:mod:`epochfs.sidecar.cutrequest`), on a worker of its own.

Anyone who reaches the port can connect, so the server's cost is bounded whatever they send
(docs/sidecar.md, "HTTP endpoints under load"):

* **One I/O thread** (a ``selectors`` loop) accepts, reads and writes every connection without
  blocking; no thread per connection. Requests are parsed there with fixed limits on the head
  (:class:`Limits`), the body and, for reports, the JSON nesting.
* **A fixed set of worker threads** runs what may block: one per check (``/healthz``,
  ``/readyz``), one for ``/metrics``, one for client reports and one for cut requests (bounded
  queues; full: 503 with ``Retry-After``). Checks and ``/metrics`` are *single-flight*: requests
  that arrive while one runs wait for its answer, so a flood of probes costs one check at a time
  and can never queue behind reports, cuts or scrapes. A check that has not answered within
  ``check_timeout`` gets 503.
* **A cap on open connections.** At the cap a new connection closes the oldest connection that
  has no request in progress (one that finished and is lingering first, then the one that has
  waited longest for its request); when every connection has a request in progress, the new one is
  closed. A probe, which sends its request at once, is never the oldest: it always gets in.
* **Deadlines, never per-byte timeouts**: a request (head and body) must arrive within
  ``request_timeout`` of the connection (or of the previous response on a keep-alive connection),
  so a client trickling a byte a second is closed as one that sends nothing; a response must be
  read within the same time.
* :meth:`Endpoints.stop` wakes the loop, closes every socket and returns within about a second
  whatever the load; worker threads are daemons and never delay the process's exit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import ipaddress
import json
import logging
import queue
import re
import resource
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, NamedTuple

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from epochfs.sidecar.cutrequest import CUT_PATH, CutRequest
from epochfs.sidecar.metrics import EndpointMetrics, endpoint_metrics
from epochfs.torchclient.layout import parse_epoch_name

log = logging.getLogger("epochfs.endpoints")

CLIENT_REPORT_PATH = "/v1/client-report"
MAX_REPORT_BYTES = 4096
MAX_JSON_DEPTH = 4
"""A report is one flat object (depth 1); deeper JSON is refused before it is parsed."""
MAX_REPORT_EPOCHS = 8
"""Epochs one report may name as in use (a rank reads one; a few more for a pipeline)."""

Check = Callable[[], tuple[bool, dict[str, Any]]]


def _default_max_connections() -> int:
    """1,024, or a quarter of the soft descriptor limit when that is lower (at least 32)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1024
    return max(32, min(1024, soft // 4))


@dataclass(frozen=True)
class Limits:
    """What one listener accepts; the defaults are the sidecar's (docs/sidecar.md)."""

    max_connections: int = field(default_factory=_default_max_connections)
    """Open connections at most; at the cap the oldest idle one is closed for a new one."""
    request_timeout: float = 10.0
    """Seconds from the connection (or the previous response) to a complete request, and to read
    a response; also how long a closing connection waits for the client's FIN."""
    check_timeout: float = 10.0
    """Seconds a check or a metrics collection may run before its waiters get 503."""
    max_head_bytes: int = 8192
    """Request line and headers (414 when the request line alone is longer, else 431)."""
    max_headers: int = 64
    max_body_bytes: int = MAX_REPORT_BYTES
    """A client report's body (413 above)."""
    max_requests_per_connection: int = 100
    report_queue: int = 1024
    """Reports waiting for the report thread; more get 503 with Retry-After."""
    backlog: int = 1024
    """The listen queue (the kernel caps it at net.core.somaxconn)."""


@dataclass(frozen=True)
class ClientReport:
    """One validated report from the torch client (all increments, never negative)."""

    samples: int
    nbytes: int
    wait_seconds: float
    epochs: tuple[int, ...] = ()
    """Epochs the client reads now (from the query), which the folder view keeps as in use."""

    @staticmethod
    def parse_epochs(query: str) -> tuple[int, ...]:
        """``epoch=3&epoch=4`` -> (3, 4); ValueError for anything else."""
        if not query:
            return ()
        found: list[int] = []
        for item in query.split("&"):
            name, sep, value = item.partition("=")
            n = parse_epoch_name("epoch-" + value) if name == "epoch" and sep else None
            if n is None:
                raise ValueError(f"the query may only name epochs (epoch=N), got {item[:40]!r}")
            found.append(n)
        if len(found) > MAX_REPORT_EPOCHS:
            raise ValueError(f"at most {MAX_REPORT_EPOCHS} epochs per report")
        return tuple(sorted(set(found)))

    @classmethod
    def parse(cls, body: bytes) -> ClientReport:
        """Validate a JSON report; ValueError says what is wrong."""
        if json_depth(body, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        try:
            doc = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"not JSON: {e}") from None
        except RecursionError:  # json_depth missed it (an exotic encoding): still a clean refusal
            raise ValueError("JSON nested too deeply") from None
        if not isinstance(doc, dict):
            raise ValueError("expected a JSON object")
        unknown = set(doc) - {"samples", "bytes", "wait_seconds"}
        if unknown:
            raise ValueError(f"unknown field(s): {', '.join(sorted(unknown))}")
        samples, nbytes, wait = doc.get("samples", 0), doc.get("bytes", 0), doc.get("wait_seconds", 0.0)
        for name, value, kinds in (("samples", samples, (int,)), ("bytes", nbytes, (int,)),
                                   ("wait_seconds", wait, (int, float))):
            if isinstance(value, bool) or not isinstance(value, kinds) or value < 0:
                raise ValueError(f"{name}: must be a non-negative number")
            if value != value or value > 1e15:  # NaN or absurd
                raise ValueError(f"{name}: out of range")
        return cls(samples=int(samples), nbytes=int(nbytes), wait_seconds=float(wait))


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"?', re.DOTALL)  # an unterminated one runs to the end
_JSON_BRACKET = re.compile(rb"[\[\]{}]")


def json_depth(body: bytes, limit: int) -> int:
    """The nesting depth of the JSON text ``body`` (brackets outside strings), counted no further
    than ``limit + 1``: cheap and never recursive, so a hostile body cannot exhaust the stack."""
    depth = peak = 0
    for m in _JSON_BRACKET.finditer(_JSON_STRING.sub(b"", body)):
        if m.group() in (b"[", b"{"):
            depth += 1
            if depth > peak:
                peak = depth
                if peak > limit:
                    break
        else:
            depth -= 1
    return peak


class Reply(NamedTuple):
    code: int
    body: bytes = b""
    ctype: str = "text/plain"
    headers: tuple[tuple[str, str], ...] = ()


def _text(code: int, message: str, *headers: tuple[str, str]) -> Reply:
    return Reply(code, message.encode() + b"\n", "text/plain", headers)


def check_reply(check: Check) -> Reply:
    """Run a check: 200 with its JSON when ok, 503 otherwise (also when it raises)."""
    try:
        ok, details = check()
        body = json.dumps({"ok": ok, **details}, sort_keys=True, default=str).encode() + b"\n"
    except Exception as e:  # a probe must answer, never hang up
        ok, body = False, json.dumps({"ok": False, "error": repr(e)}).encode() + b"\n"
    return Reply(200 if ok else 503, body, "application/json")


def metrics_reply(registry: CollectorRegistry) -> Reply:
    try:
        return Reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
    except Exception as e:
        log.exception("metrics collection failed")
        return _text(500, f"metrics collection failed: {e!r}")


# Connection states. WAITING: for (the rest of) a request; BODY: for the rest of a report's body;
# BUSY: a worker has the request; WRITING: the response is being sent; LINGER: the last response
# was sent and our side shut down, waiting for the client's FIN; CLOSED.
WAITING, BODY, BUSY, WRITING, LINGER, CLOSED = range(6)
_INTEREST = {
    WAITING: selectors.EVENT_READ, BODY: selectors.EVENT_READ, LINGER: selectors.EVENT_READ,
    BUSY: 0, WRITING: selectors.EVENT_WRITE, CLOSED: 0,
}
RECV_BYTES = 16384
ACCEPT_BATCH = 64  # accepts per loop turn; well below any cap, so a new probe is never the oldest
LINGER_DISCARD = 1 << 20  # bytes read and dropped after a closing response (an unread body)
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_LINE = re.compile(rb"\r?\n")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION = re.compile(rb"HTTP/(\d)\.(\d)")
_RST = struct.pack("ii", 1, 0)


class _Conn:
    __slots__ = (
        "body_wanted",
        "buf",
        "deadline",
        "events",
        "host",
        "keep_alive",
        "out",
        "query",
        "seq",
        "served",
        "sock",
        "state",
        "timeout_reply",
        "waited",
    )

    def __init__(self, sock: socket.socket, host: str) -> None:
        self.sock = sock
        self.host = host
        self.state = CLOSED
        self.events = 0
        self.buf = bytearray()
        self.out = b""
        self.deadline = 0.0
        self.keep_alive = True
        self.served = 0
        self.seq = 0
        self.body_wanted = 0
        self.query = ""
        self.timeout_reply: Reply | None = None
        self.waited = 0  # bytes dropped while lingering


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.removeprefix("::ffff:")).is_loopback
    except ValueError:
        return False


class _Worker:
    """One daemon thread running jobs from a bounded queue (it never delays the process's exit)."""

    def __init__(self, name: str, size: int) -> None:
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=max(1, size))
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> bool:
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            return False
        return True

    def stop(self) -> None:
        """Drop queued jobs and ask the thread to end (after the job it runs, if one hangs)."""
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        with contextlib.suppress(queue.Full):
            self._jobs.put_nowait(None)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception:
                log.exception("endpoint worker %s", self._thread.name)


class _Flight:
    """One computation (a check, a metrics collection) shared by every request that arrives while it
    runs."""

    def __init__(self, name: str, compute: Callable[[], Reply], timeout_reply: Reply) -> None:
        self.name = name
        self.compute = compute
        self.timeout_reply = timeout_reply
        self.worker = _Worker(f"epochfs-http-{name}", 1)
        self.running = False
        self.started = 0.0
        self.waiters: list[tuple[_Conn, int]] = []


class Endpoints:
    """Serves the endpoints on ``host:port`` (port 0 picks a free one; see :attr:`port`).

    The socket is bound here (a port in use raises ``OSError`` at once); :meth:`start` starts the
    I/O thread and the workers, :meth:`stop` ends them promptly under any load.
    """

    def __init__(
        self,
        *,
        host: str,
        port: int,
        health: Check,
        ready: Check,
        registry: CollectorRegistry | None,
        on_client_report: Callable[[ClientReport], None] | None,
        limits: Limits | None = None,
        metrics: EndpointMetrics | None = None,
        on_cut: Callable[[CutRequest], tuple[int, dict[str, Any]]] | None = None,
    ) -> None:
        self.limits = limits if limits is not None else Limits()
        self._metrics = metrics if metrics is not None else endpoint_metrics()
        self._on_report = on_client_report
        self._on_cut = on_cut
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family, backlog=self.limits.backlog)
        self._listener.setblocking(False)
        self._flights: dict[str, _Flight] = {
            "/healthz": _Flight("healthz", lambda: check_reply(health), self._check_timeout_reply()),
            "/readyz": _Flight("readyz", lambda: check_reply(ready), self._check_timeout_reply()),
        }
        if registry is not None:
            self._flights["/metrics"] = _Flight(
                "metrics", lambda: metrics_reply(registry),
                _text(503, f"metrics collection did not finish within {self.limits.check_timeout:g}s"),
            )
        self._reports = _Worker("epochfs-http-report", self.limits.report_queue)
        self._cuts = _Worker("epochfs-http-cut", 64)
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._done: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]]] = queue.SimpleQueue()
        self._conns: set[_Conn] = set()
        # Connections without a request in progress, oldest first: the ones closed at the cap.
        self._waiting: dict[_Conn, None] = {}
        self._lingering: dict[_Conn, None] = {}
        self._stopping = False
        self._stopped = False
        self._accept_paused_until = 0.0
        self._thread: threading.Thread | None = None
        self._date = (0, "")

    def _check_timeout_reply(self) -> Reply:
        body = {"ok": False, "error": f"check did not answer within {self.limits.check_timeout:g}s"}
        return Reply(503, json.dumps(body).encode() + b"\n", "application/json")

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def connections(self) -> int:
        """Connections open now (read from any thread; for tests and logs)."""
        return len(self._conns)

    def start(self) -> None:
        for flight in self._flights.values():
            flight.worker.start()
        self._reports.start()
        self._cuts.start()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, self._wake_r)
        self._thread = threading.Thread(target=self._serve, name=f"epochfs-http-{self.port}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Close the listener and every connection; returns within ``timeout`` seconds."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping = True
        if self._thread is None:
            self._close_all()
        else:
            self._wake()
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("HTTP endpoint thread did not stop within %.1fs", timeout)
        for flight in self._flights.values():
            flight.worker.stop()
        self._reports.stop()
        self._cuts.stop()

    # ------------------------------------------------------------------ the loop
    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full (a wake-up is pending anyway) or closed (stopped)
            self._wake_w.send(b"\0")

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        """From a worker thread: run ``fn(*args)`` on the I/O thread."""
        self._done.put((fn, args))
        self._wake()

    def _serve(self) -> None:
        tick = max(0.01, min(0.25, self.limits.request_timeout / 4, self.limits.check_timeout / 4))
        next_sweep = time.monotonic() + tick
        try:
            while not self._stopping:
                for key, events in self._selector.select(max(0.0, next_sweep - time.monotonic())):
                    try:
                        self._dispatch(key.data, events)
                    except Exception:
                        log.exception("HTTP endpoint")
                        if isinstance(key.data, _Conn):
                            self._close(key.data, reset=True)
                now = time.monotonic()
                if now >= next_sweep:
                    next_sweep = now + tick
                    self._sweep(now)
        except Exception:
            log.exception("HTTP endpoint loop failed")
        finally:
            self._close_all()

    def _dispatch(self, data: Any, events: int) -> None:
        if data is None:
            self._accept()
        elif data is self._wake_r:
            self._completions()
        else:
            conn: _Conn = data
            if events & selectors.EVENT_WRITE and conn.state == WRITING:
                self._flush(conn)
                self._resume(conn)
            if events & selectors.EVENT_READ and conn.state in (WAITING, BODY, LINGER):
                self._readable(conn)

    def _completions(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass
        while True:
            try:
                fn, args = self._done.get_nowait()
            except queue.Empty:
                return
            try:
                fn(*args)
            except Exception:
                log.exception("HTTP endpoint completion")

    def _sweep(self, now: float) -> None:
        if self._accept_paused_until and now >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self._selector.register(self._listener, selectors.EVENT_READ, None)
        for conn in [c for c in self._conns if c.deadline <= now]:
            if conn.state == BUSY:  # a check or a report that did not answer in time
                assert conn.timeout_reply is not None
                self._respond(conn, conn.timeout_reply)
                self._resume(conn)
            elif conn.state in (WAITING, BODY):
                if conn.buf or conn.state == BODY or conn.served == 0:
                    self._metrics.reject("timeout")  # an idle keep-alive connection is not counted
                self._close(conn)
            elif conn.state == WRITING:
                self._metrics.reject("timeout")  # the client does not read its response
                self._close(conn, reset=True)
            elif conn.state == LINGER:
                self._close(conn, reset=True)

    def _close_all(self) -> None:
        for conn in list(self._conns):
            self._close(conn, reset=True)
        for sock in (self._listener, self._wake_r, self._wake_w):
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            sock.close()
        self._selector.close()

    # ------------------------------------------------------------------ connections
    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors: free the oldest idle connection, or stop accepting for a
                    # moment (the pending connection stays queued in the kernel).
                    victim = self._victim()
                    if victim is not None:
                        self._metrics.reject("capacity")
                        self._close(victim, reset=True)
                    else:
                        self._selector.unregister(self._listener)
                        self._accept_paused_until = time.monotonic() + 0.1
                    log.warning("HTTP endpoint: accept failed: %s", e.strerror)
                    return
                if e.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue
                raise
            self._open(sock, str(addr[0]))

    def _open(self, sock: socket.socket, host: str) -> None:
        if len(self._conns) >= self.limits.max_connections:
            victim = self._victim()
            if victim is None:  # every connection has a request in progress: refuse the new one
                self._metrics.reject("capacity")
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RST)
                sock.close()
                return
            self._metrics.reject("evicted")
            self._close(victim, reset=True)
        sock.setblocking(False)
        conn = _Conn(sock, host)
        self._conns.add(conn)
        self._metrics.connections.inc()
        self._wait_for_request(conn, time.monotonic())
        self._readable(conn)  # the request often arrives with the handshake

    def _victim(self) -> _Conn | None:
        """The connection to close for a new one: done and lingering, else waiting the longest."""
        for idle in (self._lingering, self._waiting):
            if idle:
                return next(iter(idle))
        return None

    def _set_state(self, conn: _Conn, state: int, deadline: float) -> None:
        if state in (WAITING, BODY):
            if conn.state not in (WAITING, BODY):
                self._waiting[conn] = None
        else:
            self._waiting.pop(conn, None)
        if state == LINGER:
            self._lingering[conn] = None
        else:
            self._lingering.pop(conn, None)
        conn.state = state
        conn.deadline = deadline
        events = _INTEREST[state]
        if events != conn.events:
            if conn.events == 0:
                self._selector.register(conn.sock, events, conn)
            elif events == 0:
                self._selector.unregister(conn.sock)
            else:
                self._selector.modify(conn.sock, events, conn)
            conn.events = events

    def _wait_for_request(self, conn: _Conn, now: float) -> None:
        self._set_state(conn, WAITING, now + self.limits.request_timeout)

    def _close(self, conn: _Conn, *, reset: bool = False) -> None:
        if conn.state == CLOSED and conn not in self._conns:
            return
        self._set_state(conn, CLOSED, 0.0)
        self._conns.discard(conn)
        self._metrics.connections.dec()
        try:
            if reset:  # RST: the descriptor and the kernel's buffers are freed at once
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RST)
        except OSError:
            pass
        conn.sock.close()
        conn.buf = bytearray()
        conn.out = b""

    def _readable(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn, reset=True)
            return
        if not data:  # the client closed (or half-closed) its side: nothing more will come
            self._close(conn)
            return
        if conn.state == LINGER:
            conn.waited += len(data)
            if conn.waited > LINGER_DISCARD:
                self._close(conn, reset=True)
            return
        conn.buf += data
        self._advance(conn)

    def _resume(self, conn: _Conn) -> None:
        """After a response: parse a request the client already sent (pipelining)."""
        if conn.state == WAITING and conn.buf:
            self._advance(conn)

    # ------------------------------------------------------------------ requests
    def _advance(self, conn: _Conn) -> None:
        """Parse what ``conn.buf`` holds: at most one request per response, a loop, no recursion."""
        while conn.state in (WAITING, BODY) and conn.buf:
            if conn.state == BODY:
                if len(conn.buf) < conn.body_wanted:
                    return
                body = bytes(conn.buf[: conn.body_wanted])
                del conn.buf[: conn.body_wanted]
                self._report(conn, body)
                continue
            if conn.buf[:1] in (b"\r", b"\n"):  # empty lines before a request line are allowed
                del conn.buf[: len(conn.buf) - len(conn.buf.lstrip(b"\r\n"))]
                continue
            limit = self.limits.max_head_bytes
            end = _HEAD_END.search(conn.buf, 0, limit + 4)
            if end is None:
                if len(conn.buf) > limit:
                    line_ends = conn.buf.find(b"\n", 0, limit) >= 0
                    what = "request headers" if line_ends else "request line"
                    self._refuse(conn, "too_large", _text(431 if line_ends else 414,
                                                          f"{what} over {limit} bytes"))
                return
            head = bytes(conn.buf[: end.start()])
            del conn.buf[: end.end()]
            self._request(conn, head)

    def _refuse(self, conn: _Conn, reason: str, reply: Reply) -> None:
        self._metrics.reject(reason)
        self._respond(conn, reply, close=True)

    def _request(self, conn: _Conn, head: bytes) -> None:
        lines = _LINE.split(head)
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]):
            self._refuse(conn, "bad_request", _text(400, "malformed request line"))
            return
        method, target, version = parts
        v = _VERSION.fullmatch(version)
        if v is None:
            self._refuse(conn, "bad_request", _text(400, "malformed request line"))
            return
        if v.group(1) != b"1":
            self._refuse(conn, "bad_request", _text(505, "HTTP/1.x only"))
            return
        if len(lines) - 1 > self.limits.max_headers:
            self._refuse(conn, "too_large", _text(431, f"more than {self.limits.max_headers} headers"))
            return
        headers: dict[bytes, list[bytes]] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not _TOKEN.fullmatch(name):  # also obsolete line folding
                self._refuse(conn, "bad_request", _text(400, "malformed header"))
                return
            headers.setdefault(name.lower(), []).append(value.strip(b" \t"))
        if b"transfer-encoding" in headers:
            self._refuse(conn, "bad_request", _text(501, "transfer encodings are not supported"))
            return
        lengths = set(headers.get(b"content-length", []))
        length = 0
        if lengths:
            value = lengths.pop()
            if lengths or not value.isdigit():
                self._refuse(conn, "bad_request", _text(400, "invalid Content-Length"))
                return
            length = int(value) if len(value) <= 18 else 1 << 62
        tokens = {t.strip().lower() for v in headers.get(b"connection", []) for t in v.split(b",")}
        conn.keep_alive = v.group(2) != b"0" and b"close" not in tokens
        path, _, query = target.decode("latin-1").partition("?")
        if method == b"GET":
            if length:
                conn.keep_alive = False  # the body is not read: close after the response
            flight = self._flights.get(path)
            if flight is None:
                self._respond(conn, _text(404, "not found"))
            else:
                self._join(conn, flight)
        elif method == b"POST" and path == CUT_PATH:
            self._post_cut(conn, query, length)
        elif method == b"POST":
            conn.query = query
            self._post_report(conn, path, length, headers.get(b"expect", []))
        else:
            self._refuse(conn, "bad_request", _text(501, f"unsupported method {method.decode('latin-1')!r}"))

    def _post_report(self, conn: _Conn, path: str, length: int, expect: list[bytes]) -> None:
        limit = self.limits.max_body_bytes
        if path != CLIENT_REPORT_PATH or self._on_report is None:
            self._respond(conn, _text(404, "not found"), close=True)
        elif not _is_loopback(conn.host):
            self._respond(conn, _text(403, "client reports are accepted on loopback only"), close=True)
        elif length == 0:
            self._refuse(conn, "bad_request", _text(400, f"a JSON body of at most {limit} bytes is required"))
        elif length > limit:
            self._refuse(conn, "too_large", _text(413, f"a report body is at most {limit} bytes"))
        elif expect and expect != [b"100-continue"]:
            self._refuse(conn, "bad_request", _text(417, "only Expect: 100-continue is supported"))
        else:
            if expect:
                with contextlib.suppress(OSError):  # a fresh send buffer: 25 bytes always fit
                    conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
            conn.body_wanted = length
            self._set_state(conn, BODY, conn.deadline)

    def _post_cut(self, conn: _Conn, query: str, length: int) -> None:
        """A cut request: loopback only, no body; answered by a worker (the store may block)."""
        if self._on_cut is None:
            self._respond(conn, _text(404, "not found"), close=True)
            return
        if not _is_loopback(conn.host):
            self._respond(conn, _text(403, "cut requests are accepted on loopback only"), close=True)
            return
        if length:
            self._refuse(conn, "bad_request", _text(400, "a cut request has no body"))
            return
        try:
            request = CutRequest.parse(query)
        except ValueError as e:
            self._refuse(conn, "bad_request", _text(400, str(e)))
            return
        on_cut = self._on_cut
        conn.seq += 1
        seq = conn.seq

        def job() -> None:
            try:
                code, doc = on_cut(request)
                reply = Reply(code, json.dumps(doc, sort_keys=True).encode() + b"\n", "application/json")
            except Exception:
                log.exception("cut request %s", request)
                reply = _text(500, "cut request failed")
            self._post(self._answer, conn, seq, reply)

        busy = _text(503, "busy, retry later", ("Retry-After", "1"))
        conn.timeout_reply = busy
        self._set_state(conn, BUSY, time.monotonic() + self.limits.check_timeout)
        if not self._cuts.submit(job):
            self._metrics.reject("busy")
            self._respond(conn, busy)

    def _report(self, conn: _Conn, body: bytes) -> None:
        try:
            report = ClientReport.parse(body)
            report = dataclasses.replace(report, epochs=ClientReport.parse_epochs(conn.query))
        except ValueError as e:
            self._metrics.reject("bad_request")
            self._respond(conn, _text(400, str(e)))
            return
        on_report = self._on_report
        assert on_report is not None
        conn.seq += 1
        seq = conn.seq

        def job() -> None:
            try:
                on_report(report)
                reply = Reply(204)
            except Exception:
                log.exception("client report")
                reply = _text(500, "report not recorded")
            self._post(self._answer, conn, seq, reply)

        busy = _text(503, "busy, retry later", ("Retry-After", "1"))
        conn.timeout_reply = busy
        self._set_state(conn, BUSY, time.monotonic() + self.limits.check_timeout)
        if not self._reports.submit(job):
            self._metrics.reject("busy")
            self._respond(conn, busy)

    def _join(self, conn: _Conn, flight: _Flight) -> None:
        now = time.monotonic()
        if flight.running and now - flight.started > self.limits.check_timeout:
            self._respond(conn, flight.timeout_reply)  # still stuck: answer at once
            return
        conn.seq += 1
        conn.timeout_reply = flight.timeout_reply
        self._set_state(conn, BUSY, now + self.limits.check_timeout)
        flight.waiters.append((conn, conn.seq))
        if not flight.running:
            flight.running, flight.started = True, now
            flight.worker.submit(lambda: self._post(self._landed, flight, flight.compute()))

    def _landed(self, flight: _Flight, reply: Reply) -> None:
        flight.running = False
        waiters, flight.waiters = flight.waiters, []
        for conn, seq in waiters:
            self._answer(conn, seq, reply)

    def _answer(self, conn: _Conn, seq: int, reply: Reply) -> None:
        if conn.state == BUSY and conn.seq == seq:  # not timed out (nor closed) meanwhile
            self._respond(conn, reply)
            self._resume(conn)

    # ------------------------------------------------------------------ responses
    def _http_date(self) -> str:
        now = int(time.time())
        if self._date[0] != now:
            self._date = (now, formatdate(now, usegmt=True))
        return self._date[1]

    def _respond(self, conn: _Conn, reply: Reply, *, close: bool = False) -> None:
        conn.served += 1
        if close or conn.served >= self.limits.max_requests_per_connection:
            conn.keep_alive = False
        try:
            phrase = HTTPStatus(reply.code).phrase
        except ValueError:
            phrase = ""
        lines = [f"HTTP/1.1 {reply.code} {phrase}", "Server: epochfs", f"Date: {self._http_date()}"]
        if reply.code != 204:
            lines += [f"Content-Type: {reply.ctype}", f"Content-Length: {len(reply.body)}"]
        if not conn.keep_alive:
            lines.append("Connection: close")
        lines += [f"{k}: {v}" for k, v in reply.headers]
        conn.out = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + reply.body
        self._set_state(conn, WRITING, time.monotonic() + self.limits.request_timeout)
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(conn, reset=True)
            return
        conn.out = conn.out[sent:]
        if conn.out:
            return  # WRITING: the loop sends the rest when the socket takes it
        now = time.monotonic()
        if conn.keep_alive:
            self._wait_for_request(conn, now)
            return
        try:  # half-close, then read what the client still sends until its FIN (no RST on its data)
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.buf = bytearray()
        self._set_state(conn, LINGER, now + self.limits.request_timeout)
