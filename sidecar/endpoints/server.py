"""The :class:`Endpoints` server: the routes, and who answers each (the loop, a flight, a worker).

Its own module because it is the one place that wires the parts together: it is the
:class:`~.connections.ConnectionLoop` subclass that routes each parsed request to a single-flight
check or ``/metrics``, to the report worker or to the cut worker, and posts their answers back
to the I/O thread. What a route does is read here; how bytes move is read in the loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from epochfs.sidecar.cutrequest import CutRequest
from epochfs.sidecar.endpoints.cacheid import CacheIdentity, header_value, identity
from epochfs.sidecar.endpoints.conn import BODY, BUSY, Conn
from epochfs.sidecar.endpoints.connections import ConnectionLoop
from epochfs.sidecar.endpoints.http11 import Limits, Refusal, Reply, parse_head, text_reply
from epochfs.sidecar.endpoints.report import CLIENT_REPORT_PATH, ClientReport
from epochfs.sidecar.endpoints.workers import Check, Flight, Worker, check_reply, metrics_reply
from epochfs.sidecar.metrics import EndpointMetrics, endpoint_metrics
from epochfs.torchclient.layout import CUT_PATH

log = logging.getLogger("epochfs.endpoints")


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.removeprefix("::ffff:")).is_loopback
    except ValueError:
        return False


class Endpoints(ConnectionLoop):
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
        cache: str | os.PathLike[str] | None = None,
    ) -> None:
        """``cache``: the cache this sidecar serves; a cut request or report naming another one
        (``X-Epochfs-Cache``) gets 409 (:mod:`.cacheid`). None: every request is taken."""
        self._on_report = on_client_report
        self._identity: CacheIdentity | None = identity(cache)
        self._refused_caches: set[str] = set()  # logged once each (a bounded set: stray headers)
        self._on_cut = on_cut
        super().__init__(host=host, port=port, limits=limits if limits is not None else Limits(),
                         metrics=metrics if metrics is not None else endpoint_metrics())
        self._flights: dict[str, Flight] = {
            "/healthz": Flight("healthz", lambda: check_reply(health), self._check_timeout_reply()),
            "/readyz": Flight("readyz", lambda: check_reply(ready), self._check_timeout_reply()),
        }
        if registry is not None:
            self._flights["/metrics"] = Flight(
                "metrics", lambda: metrics_reply(registry),
                text_reply(503, f"metrics collection did not finish within {self.limits.check_timeout:g}s"),
            )
        self._reports = Worker("epochfs-http-report", self.limits.report_queue)
        self._cuts = Worker("epochfs-http-cut", 64)

    def _check_timeout_reply(self) -> Reply:
        body = {"ok": False, "error": f"check did not answer within {self.limits.check_timeout:g}s"}
        return Reply(503, json.dumps(body).encode() + b"\n", "application/json")

    def start(self) -> None:
        for flight in self._flights.values():
            flight.worker.start()
        self._reports.start()
        self._cuts.start()
        self._start_loop()

    def stop(self, timeout: float = 2.0) -> None:
        """Close the listener and every connection; returns within ``timeout`` seconds."""
        if not self._stop_loop(timeout):
            return
        for flight in self._flights.values():
            flight.worker.stop()
        self._reports.stop()
        self._cuts.stop()

    # ------------------------------------------------------------------ requests
    def _request(self, conn: Conn, head: bytes) -> None:
        request = parse_head(head, self.limits.max_headers)
        if isinstance(request, Refusal):
            self._refuse(conn, request)
            return
        method, path, length = request.method, request.path, request.length
        conn.keep_alive = request.keep_alive
        allowed = self._allowed(path)
        if allowed is not None and method != allowed.encode():
            # A route that takes another method: 405 naming it, so a client's author sees the mistake
            # (not a 404 for a path that exists). The body, if any, is not read: close after.
            self._metrics.reject("bad_request")  # counted as the 501 and 400 are
            self._respond(conn, text_reply(405, f"{path} takes {allowed}", ("Allow", allowed)),
                          close=bool(length) or method != b"GET")
        elif method == b"GET":
            if length:
                conn.keep_alive = False  # the body is not read: close after the response
            flight = self._flights.get(path)
            if flight is None:
                self._respond(conn, text_reply(404, "not found"))
            else:
                self._join(conn, flight)
        elif method == b"POST" and path == CUT_PATH:
            self._post_cut(conn, request.query, length, request.cache)
        elif method == b"POST":
            conn.query = request.query
            conn.cache = None if request.cache is None else header_value(request.cache)
            self._post_report(conn, path, length, request.expect)
        else:
            self._refuse(conn, Refusal("bad_request", text_reply(
                501, f"unsupported method {method.decode('latin-1')!r}")))

    def _allowed(self, path: str) -> str | None:
        """The method the route ``path`` takes (GET for the probes and /metrics, POST for cut
        requests and client reports), None for a path that is no route."""
        if path in self._flights:
            return "GET"
        if (path == CUT_PATH and self._on_cut is not None) or \
                (path == CLIENT_REPORT_PATH and self._on_report is not None):
            return "POST"
        return None

    def _post_report(self, conn: Conn, path: str, length: int, expect: list[bytes]) -> None:
        limit = self.limits.max_body_bytes
        if path != CLIENT_REPORT_PATH or self._on_report is None:
            self._respond(conn, text_reply(404, "not found"), close=True)
        elif not _is_loopback(conn.host):
            self._respond(conn, text_reply(403, "client reports are accepted on loopback only"), close=True)
        elif length == 0:
            self._refuse(conn, Refusal("bad_request", text_reply(
                400, f"a JSON body of at most {limit} bytes is required")))
        elif length > limit:
            self._refuse(conn, Refusal("too_large", text_reply(
                413, f"a report body is at most {limit} bytes")))
        elif expect and [e.strip().lower() for e in expect] != [b"100-continue"]:  # (case-insensitive)
            self._refuse(conn, Refusal("bad_request", text_reply(
                417, "only Expect: 100-continue is supported")))
        else:
            if expect:
                with contextlib.suppress(OSError):  # a fresh send buffer: 25 bytes always fit
                    conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
            conn.body_wanted = length
            self._set_state(conn, BODY, conn.deadline)

    def _post_cut(self, conn: Conn, query: str, length: int, cache: bytes | None) -> None:
        """A cut request: loopback only, no body; answered by a worker (the store may block), 409
        when ``cache`` (its ``X-Epochfs-Cache``) names another cache than this sidecar's."""
        if self._on_cut is None:
            self._respond(conn, text_reply(404, "not found"), close=True)
            return
        if not _is_loopback(conn.host):
            self._respond(conn, text_reply(403, "cut requests are accepted on loopback only"), close=True)
            return
        if length:
            self._refuse(conn, Refusal("bad_request", text_reply(400, "a cut request has no body")))
            return
        try:
            request = CutRequest.parse(query)
        except ValueError as e:
            self._refuse(conn, Refusal("bad_request", text_reply(400, str(e))))
            return
        on_cut = self._on_cut
        asked = None if cache is None else header_value(cache)

        def job() -> Reply:
            refused = self._other_cache(asked, "cut request")
            if refused is not None:
                return refused
            try:
                code, doc = on_cut(request)
                return Reply(code, json.dumps(doc, sort_keys=True).encode() + b"\n", "application/json")
            except Exception:
                log.exception("cut request %s", request)
                return text_reply(500, "cut request failed")

        self._queue(conn, self._cuts, job)

    def _body(self, conn: Conn, body: bytes) -> None:
        """A client report's body arrived."""
        try:
            report = ClientReport.parse(body)
            epochs, client = ClientReport.parse_query(conn.query)
            report = dataclasses.replace(report, epochs=epochs, client=client)
        except ValueError as e:
            self._metrics.reject("bad_request")
            self._respond(conn, text_reply(400, str(e)))
            return
        on_report = self._on_report
        assert on_report is not None
        asked = conn.cache

        def job() -> Reply:
            refused = self._other_cache(asked, "report")
            if refused is not None:
                return refused
            try:
                on_report(report)
                return Reply(204)
            except Exception:
                log.exception("client report")
                return text_reply(500, "report not recorded")

        self._queue(conn, self._reports, job)

    def _other_cache(self, asked: str | None, what: str) -> Reply | None:
        """The 409 for a request whose ``X-Epochfs-Cache`` names another cache (logged once per
        cache named); None when it names this one, or none. On a worker: the check may stat."""
        if asked is None or self._identity is None or self._identity.serves(asked):
            return None
        if asked not in self._refused_caches and len(self._refused_caches) < 64:
            self._refused_caches.add(asked)
            # %r: the header is the client's, percent-decoded; a newline in it would forge a log line.
            log.warning("refused a %s from a reader of another cache (%r; this sidecar serves %s): "
                        "answered 409", what, asked, self._identity.name)
        return self._identity.refusal(asked, what)

    def _queue(self, conn: Conn, worker: Worker, job: Callable[[], Reply]) -> None:
        """Run ``job`` on ``worker`` and answer with its reply; 503 when the queue is full or the job
        has not answered within ``check_timeout``."""
        conn.seq += 1
        seq = conn.seq
        busy = text_reply(503, "busy, retry later", ("Retry-After", "1"))
        conn.timeout_reply = busy
        self._set_state(conn, BUSY, time.monotonic() + self.limits.check_timeout)
        if not worker.submit(lambda: self._post(self._answer, conn, seq, job())):
            self._metrics.reject("busy")
            self._respond(conn, busy)

    def _join(self, conn: Conn, flight: Flight) -> None:
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

    def _landed(self, flight: Flight, reply: Reply) -> None:
        flight.running = False
        waiters, flight.waiters = flight.waiters, []
        for conn, seq in waiters:
            self._answer(conn, seq, reply)

    def _answer(self, conn: Conn, seq: int, reply: Reply) -> None:
        if conn.state == BUSY and conn.seq == seq:  # not timed out (nor closed) meanwhile
            self._respond(conn, reply)
            self._resume(conn)
