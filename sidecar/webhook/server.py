"""The webhook's HTTPS server: the standard library's ``http.server`` over ``ssl``.

Why not kopf's admission server (issue 23 suggested a library): kopf serves admission webhooks
from inside an operator, whose loop first discovers the cluster's resources through the API
(``insights.ready_resources``) and wants RBAC for it, peering between replicas, and optionally
registers the webhook configuration itself; its handlers return merge patches it diffs into a
JSONPatch. This server needs no API access at all (its pods hold no token), two replicas serve
alike with no coordination, and the chart owns the configuration. What is written here is small:
the TLS socket per connection (in the connection's thread, so a slow handshake never blocks
accepting), a body size limit, and JSON checks; :mod:`.review` and :mod:`.mutate` do the rest.

* ``POST /mutate`` and ``POST /mutate/pss-enforced`` (namespaces that enforce Pod Security baseline
  or restricted): an AdmissionReview v1 in, an AdmissionReview v1 out. A body that is not one is
  answered 400 (413 above the size limit, 415 when not JSON); an unexpected failure 500, which
  the API server treats according to the configuration's failurePolicy.
* ``GET /healthz``, ``GET /readyz`` on the HTTPS port; ``/metrics`` and ``/healthz`` on the plain
  metrics port (the metrics themselves are :class:`epochfs.sidecar.metrics.WebhookMetrics`, with
  every other metric of epochfs).
* The certificate and key are read again when their files change (cert-manager renews them in
  the mounted Secret), for the next connections; a pair caught mid-update is retried later while
  the previous one keeps serving.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from epochfs.sidecar.metrics import WebhookMetrics
from epochfs.sidecar.webhook import review
from epochfs.sidecar.webhook.mutate import decide
from epochfs.sidecar.webhook.profiles import Profile, load_profiles

log = logging.getLogger("epochfs.webhook")

MAX_BODY_BYTES = 2 * 1024 * 1024
"""Bodies above this are refused (413): a pod is at most ~1.5 MiB (etcd's limit), and its
AdmissionReview adds little else for a CREATE (no oldObject)."""
MAX_IN_FLIGHT = 16
"""Admission requests processed at once; more are answered 429 (the API server retries or applies
the failurePolicy) instead of piling up threads and memory."""
METRICS_TIMEOUT = 10
"""Seconds a metrics-port connection may sit idle or take to send its request."""
PATHS = {"/mutate": False, "/mutate/pss-enforced": True}


class TLSFiles:
    """The server's SSLContext, built again when the certificate or key file changes."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert, self.key = Path(cert), Path(key)
        self._lock = threading.Lock()
        self._stamp: tuple[tuple[int, int, int], ...] | None = None
        self._context: ssl.SSLContext | None = None
        self.context()  # a missing or bad pair stops the server at start

    def _stamp_now(self) -> tuple[tuple[int, int, int], ...]:
        return tuple(
            (st.st_mtime_ns, st.st_size, st.st_ino) for st in (os.stat(self.cert), os.stat(self.key))
        )

    def context(self) -> ssl.SSLContext:
        with self._lock:
            try:
                stamp = self._stamp_now()
                if stamp != self._stamp:
                    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
                    ctx.load_cert_chain(self.cert, self.key)
                    if self._context is not None:
                        log.info("webhook: serving the renewed certificate %s", self.cert)
                    self._context, self._stamp = ctx, stamp
            except (OSError, ssl.SSLError) as e:
                if self._context is None:
                    raise
                log.warning(
                    "webhook: cannot load %s / %s (%s); the previous certificate keeps serving",
                    self.cert,
                    self.key,
                    e,
                )
            assert self._context is not None
            return self._context


class _AdmissionHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # the API server keeps connections open
    server: AdmissionServer
    timeout = 30  # seconds a connection may sit idle or a body take to arrive

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("webhook %s: " + format, self.client_address[0], *args)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self.server.metrics.requests.labels("error").inc()
        log.warning("webhook: %d %s", status, message)
        self._send(status, json.dumps({"error": message}).encode(), "application/json")

    def do_GET(self) -> None:
        if self.path in ("/healthz", "/readyz"):
            self._send(200, b"ok\n", "text/plain; charset=utf-8")
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    def do_POST(self) -> None:
        started = time.monotonic()
        if not self.server.in_flight.acquire(blocking=False):
            # The body (within the limit) is read and dropped: closing with unread bytes would
            # reset the connection and could lose the answer.
            self.close_connection = True
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = 0
            if 0 < length <= self.server.max_body:
                self.rfile.read(length)
            self._error(429, f"busy: {self.server.max_in_flight} requests in flight; retry")
            return
        try:
            self._admit()
        finally:
            self.server.in_flight.release()
            self.server.metrics.duration.observe(time.monotonic() - started)

    def _admit(self) -> None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            self._error(411, "a Content-Length is required")
            return
        length_text = self.headers.get("Content-Length")
        try:
            length = int(length_text) if length_text is not None else -1
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            self._error(411, "a Content-Length is required")
            return
        if length > self.server.max_body:
            self.close_connection = True  # the body is not read: the connection ends after the answer
            self._error(413, f"the body is {length} bytes, more than {self.server.max_body}")
            return
        body = self.rfile.read(length)
        if len(body) != length:
            self.close_connection = True
            self._error(400, "the body ended early")
            return
        # Answered after the body is read: closing with unread bytes would reset the connection
        # and could lose the answer.
        path = self.path.split("?", 1)[0]
        if path not in PATHS:
            self._error(404, f"no such path {path!r} (POST /mutate)")
            return
        content_type = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        if content_type != "application/json":
            self._error(415, f"Content-Type {content_type!r} is not application/json")
            return
        try:
            request = review.parse(body)
        except review.ReviewError as e:
            self._error(400, str(e))
            return
        try:
            answer, result = self._review(request, PATHS[path])
        except Exception:
            log.exception("webhook: failed on request %s", request.uid)
            self._error(500, "internal error (the webhook's log has it)")
            return
        self.server.metrics.requests.labels(result).inc()
        self._send(200, json.dumps(answer, separators=(",", ":")).encode())

    def _review(self, request: review.Request, pss_enforced: bool) -> tuple[dict[str, Any], str]:
        if not request.is_pod_creation:
            return review.response(request.uid), "skipped"
        decision = decide(request.obj, self.server.profiles, pss_enforced=pss_enforced)
        pod = request.obj if isinstance(request.obj, dict) else {}
        meta = pod.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
        who = f"{request.namespace}/{meta.get('name') or str(meta.get('generateName', '')) + '*'}"
        if decision.result == "refused":
            log.info("webhook: refused pod %s: %s", who, decision.message)
            return review.response(request.uid, allowed=False, message=decision.message), "refused"
        log.log(
            logging.INFO if decision.result == "mutated" else logging.DEBUG,
            "webhook: %s pod %s: %s",
            decision.result,
            who,
            decision.message,
        )
        return review.response(request.uid, patch=decision.patch), decision.result


class AdmissionServer(ThreadingHTTPServer):
    """HTTPS: each accepted connection is wrapped in TLS in its own thread."""

    daemon_threads = True
    handshake_timeout = 10.0

    def __init__(
        self,
        address: tuple[str, int],
        profiles: Mapping[str, Profile],
        tls: TLSFiles,
        metrics: WebhookMetrics | None = None,
        max_body: int = MAX_BODY_BYTES,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.profiles = dict(profiles)
        self.max_in_flight = max_in_flight
        self.in_flight = threading.BoundedSemaphore(max_in_flight)
        self.tls = tls
        self.metrics = metrics or WebhookMetrics()
        self.metrics.profiles.set(len(self.profiles))
        self.max_body = max_body
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _AdmissionHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-connection (the API server's timeout, a probe that closed
        without reading, a reset keep-alive connection) is a DEBUG line, not the traceback
        socketserver prints for any error in a request's thread; other errors keep it."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError, ssl.SSLError)):
            log.debug("webhook: the connection from %s ended: %s", client_address[0], error)
            return
        super().handle_error(request, client_address)

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(self.handshake_timeout)
        try:
            conn = self.tls.context().wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError) as e:
            log.debug("webhook: TLS handshake with %s failed: %s", client_address[0], e)
            return
        try:
            handler: Any = self.RequestHandlerClass
            handler(conn, client_address, self)
        finally:
            conn.close()


class _MetricsHandler(BaseHTTPRequestHandler):
    server: MetricsServer
    timeout = METRICS_TIMEOUT  # a client that connects and sends nothing frees its thread

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("webhook metrics %s: " + format, self.client_address[0], *args)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            body, ctype, status = generate_latest(self.server.registry), CONTENT_TYPE_LATEST, 200
        elif path == "/healthz":
            body, ctype, status = b"ok\n", "text/plain; charset=utf-8", 200
        else:
            body, ctype, status = b"not found\n", "text/plain; charset=utf-8", 404
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry) -> None:
        self.registry = registry
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _MetricsHandler)


def run_webhook(
    *,
    profiles_dir: Path,
    cert: Path,
    key: Path,
    host: str = "",
    port: int = 8443,
    metrics_port: int = 9090,
    max_body: int = MAX_BODY_BYTES,
    ready: Callable[[AdmissionServer, MetricsServer], None] | None = None,
) -> int:
    """Serve until SIGTERM or SIGINT; 0 then. ``ready`` is called once both servers listen."""
    profiles = load_profiles(profiles_dir)
    tls = TLSFiles(cert, key)
    metrics = WebhookMetrics()
    server = AdmissionServer((host, port), profiles, tls, metrics, max_body)
    metrics_server = MetricsServer((host, metrics_port), metrics.registry)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    threads = [
        threading.Thread(target=s.serve_forever, name=name, daemon=True)
        for s, name in ((server, "webhook-https"), (metrics_server, "webhook-metrics"))
    ]
    for t in threads:
        t.start()
    log.info(
        "webhook: serving profiles %s on https port %d (metrics on %d)",
        ", ".join(sorted(profiles)),
        server.server_address[1],
        metrics_server.server_address[1],
    )
    if ready is not None:
        ready(server, metrics_server)
    try:
        stop.wait()
    finally:
        for s in (server, metrics_server):
            s.shutdown()
            s.server_close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("webhook: stopped")
    return 0
