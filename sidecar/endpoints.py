"""The sidecar's HTTP endpoints: ``/healthz``, ``/readyz``, ``/metrics`` and the client report.

A standard-library threading HTTP server: the probes are tiny and must answer even while the
supervisor's main loop is busy restarting a child, so each request runs in its own thread and only
calls the cheap checks it is given.

``POST /v1/client-report`` takes a JSON body ``{"samples": int, "bytes": int, "wait_seconds": float}``
(increments since the client's previous report) from the torch client on the pod's loopback; other
addresses get 403, so nothing outside the pod can inflate the numbers.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger("epochfs.endpoints")

CLIENT_REPORT_PATH = "/v1/client-report"
MAX_REPORT_BYTES = 4096

Check = Callable[[], tuple[bool, dict[str, Any]]]


@dataclass(frozen=True)
class ClientReport:
    """One validated report from the torch client (all increments, never negative)."""

    samples: int
    nbytes: int
    wait_seconds: float

    @classmethod
    def parse(cls, body: bytes) -> ClientReport:
        """Validate a JSON report; ValueError says what is wrong."""
        try:
            doc = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"not JSON: {e}") from None
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


class Endpoints:
    """Serves the endpoints on ``host:port`` (port 0 picks a free one; see :attr:`port`)."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        health: Check,
        ready: Check,
        registry: CollectorRegistry | None,
        on_client_report: Callable[[ClientReport], None] | None,
    ) -> None:
        self._health = health
        self._ready = ready
        self._registry = registry
        self._on_report = on_client_report
        owner = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "epochfs"

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("%s " + fmt, self.client_address[0], *args)

            def do_GET(self) -> None:
                owner._get(self)

            def do_POST(self) -> None:
                owner._post(self)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"epochfs-http-{self.port}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------ handlers
    @staticmethod
    def _send(h: BaseHTTPRequestHandler, code: int, body: bytes, ctype: str) -> None:
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _check(self, h: BaseHTTPRequestHandler, check: Check) -> None:
        try:
            ok, details = check()
        except Exception as e:  # a probe must answer, never hang up
            ok, details = False, {"error": repr(e)}
        body = json.dumps({"ok": ok, **details}, sort_keys=True).encode() + b"\n"
        self._send(h, 200 if ok else 503, body, "application/json")

    def _get(self, h: BaseHTTPRequestHandler) -> None:
        path = h.path.split("?", 1)[0]
        if path == "/healthz":
            self._check(h, self._health)
        elif path == "/readyz":
            self._check(h, self._ready)
        elif path == "/metrics" and self._registry is not None:
            try:
                body = generate_latest(self._registry)
            except Exception as e:
                log.exception("metrics collection failed")
                self._send(h, 500, f"metrics collection failed: {e!r}\n".encode(), "text/plain")
                return
            self._send(h, 200, body, CONTENT_TYPE_LATEST)
        else:
            self._send(h, 404, b"not found\n", "text/plain")

    def _post(self, h: BaseHTTPRequestHandler) -> None:
        if h.path.split("?", 1)[0] != CLIENT_REPORT_PATH or self._on_report is None:
            self._send(h, 404, b"not found\n", "text/plain")
            return
        if not ipaddress.ip_address(h.client_address[0].removeprefix("::ffff:")).is_loopback:
            self._send(h, 403, b"client reports are accepted on loopback only\n", "text/plain")
            return
        try:
            length = int(h.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 < length <= MAX_REPORT_BYTES:
            self._send(h, 400, b"a JSON body of at most 4096 bytes is required\n", "text/plain")
            return
        try:
            report = ClientReport.parse(h.rfile.read(length))
        except ValueError as e:
            self._send(h, 400, f"{e}\n".encode(), "text/plain")
            return
        self._on_report(report)
        h.send_response(204)
        h.end_headers()
