"""The webhook's HTTPS server and, with :mod:`.serving` (how both listen, serve and stop; the
metrics server), ``run_webhook``, both on ``aiohttp.web``.

Why aiohttp.web: it is a maintained HTTP/1.1 server already in the sidecar's image (the HTTP
remote uses its client), where the standard library's ``http.server`` is, in its own words, not
for production. It parses requests, keeps connections alive, closes idle ones
(``keepalive_timeout``, from the first byte on) and drains unread bodies; asyncio's TLS gives
the handshake a timeout and logs a failed one at DEBUG only.

Why not kopf's admission server (a library in place of this module): kopf serves admission webhooks
from inside an operator, whose loop first discovers the cluster's resources through the API
(``insights.ready_resources``) and wants RBAC for it, peering between replicas, and optionally
registers the webhook configuration itself; its handlers return merge patches it diffs into a
JSONPatch. This server needs no API access at all (its pods hold no token), two replicas serve
alike with no coordination, and the chart owns the configuration. What is written here is small:
the certificate renewal (:mod:`.tls`), the limits and the routes; :mod:`.review` and :mod:`.mutate`
do the rest.

* ``POST /mutate`` and ``POST /mutate/pss-enforced`` (namespaces that enforce Pod Security baseline
  or restricted): an AdmissionReview v1 in, an AdmissionReview v1 out. A body that is not one is
  answered 400 (413 above the size limit, 415 when not JSON); an unexpected failure 500, which
  the API server treats according to the configuration's failurePolicy. Beyond ``MAX_IN_FLIGHT``
  reviews at once a review waits briefly for a slot (:mod:`.slots`), then is answered 429 with
  ``Retry-After: 1``, counted as ``busy``.
* ``GET /healthz``, ``GET /readyz`` on the HTTPS port; ``/metrics`` and ``/healthz`` on the plain
  metrics port (the metrics themselves are :class:`epochfs.sidecar.metrics.WebhookMetrics`, with
  every other metric of epochfs).
* The certificate and key are read again when their files change (cert-manager renews them in
  the mounted Secret), for the next handshakes; a pair caught mid-update is retried later while
  the previous one keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import ClientError, web

from epochfs.sidecar.config import ConfigError
from epochfs.sidecar.confparse import bind_failure
from epochfs.sidecar.metrics import WebhookMetrics
from epochfs.sidecar.webhook import review
from epochfs.sidecar.webhook.mutate import decide
from epochfs.sidecar.webhook.profiles import Profile, load_profiles
from epochfs.sidecar.webhook.serving import MetricsServer, Served, quiet_gone_clients, text_response
from epochfs.sidecar.webhook.slots import (
    MAX_IN_FLIGHT,
    MAX_WAITING,
    QUEUE_SECONDS,
    RETRY_AFTER,
    Slots,
    queue_wait,
)
from epochfs.sidecar.webhook.tls import TLSFiles

__all__ = ["AdmissionServer", "MetricsServer", "TLSFiles", "quiet_gone_clients", "run_webhook"]

log = logging.getLogger("epochfs.webhook")

MAX_BODY_BYTES = 2 * 1024 * 1024
"""Bodies above this are refused (413): a pod is at most ~1.5 MiB (etcd's limit), and its
AdmissionReview adds little else for a CREATE (no oldObject)."""
MAX_READING_BYTES = 16 * MAX_BODY_BYTES
"""The announced bytes of the bodies being read, or waiting for a review slot, at once; a request
beyond is answered 429 before its body is read. Bodies are read before a review slot is taken (a
client that stalls in its body holds no slot), so without this clients that stall near the largest
body each held ~3.5 MiB of the webhook's memory (256 MiB in the chart: about 50 of them killed it)."""
IDLE_TIMEOUT = 30.0
"""Seconds an HTTPS connection may sit idle between requests."""
BODY_TIMEOUT = 10.0
"""Seconds a request's body may take to arrive once its headers have: the API server sends it at
once and gives up on the webhook after its ``timeoutSeconds`` (10 s by default, at most 30)."""
PATHS = {"/mutate": False, "/mutate/pss-enforced": True}


class AdmissionServer(Served):
    """HTTPS: the admission reviews, ``/healthz`` and ``/readyz``."""

    def __init__(
        self,
        address: tuple[str, int],
        profiles: Mapping[str, Profile],
        tls: TLSFiles,
        metrics: WebhookMetrics | None = None,
        max_body: int = MAX_BODY_BYTES,
        max_in_flight: int = MAX_IN_FLIGHT,
        queue_seconds: float = QUEUE_SECONDS,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self.profiles = dict(profiles)
        self.max_in_flight = max_in_flight
        self.queue_seconds = queue_seconds
        self.in_flight = Slots(max_in_flight, max_waiting)
        self.tls = tls
        self.metrics = metrics or WebhookMetrics()
        self.metrics.profiles.set(len(self.profiles))
        self.max_body = max_body
        self._reading = 0
        """Announced bytes of the bodies being read or waiting for a slot (:data:`MAX_READING_BYTES`)."""
        # client_max_size: the limit aiohttp itself enforces on a body it reads (chunked too).
        app = web.Application(client_max_size=max_body)
        app.router.add_route("*", "/{path:.*}", self._handle)
        super().__init__(
            address, app, keepalive_timeout=IDLE_TIMEOUT, ssl_context=tls.server_context()
        )

    def _error(self, status: int, message: str, close: bool = False) -> web.Response:
        self.metrics.requests.labels("error").inc()
        log.warning("webhook: %d %s", status, message)
        response = web.json_response({"error": message}, status=status)
        if close:  # the body is not read: the connection ends after the answer
            response.force_close()
        return response

    def _busy(self, message: str, close: bool = False) -> web.Response:
        """A 429 with ``Retry-After``, which the API server's client needs to retry it; counted as
        ``busy``, not ``error``: the review is retried, and no pod was refused."""
        self.metrics.requests.labels("busy").inc()
        log.warning("webhook: 429 %s", message)
        response = web.json_response({"error": message}, status=429, headers={"Retry-After": RETRY_AFTER})
        if close:
            response.force_close()
        return response

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET":
            if request.path in ("/healthz", "/readyz"):
                return text_response(200, "ok\n")
            return text_response(404, "not found\n")
        if request.method != "POST":
            return text_response(405, "method not allowed\n")
        started = time.monotonic()
        try:
            body = await self._body(request)
            if isinstance(body, web.Response):
                return body
            # The slot is taken once the body is here: it bounds the reviews being decided, and a
            # client that sends headers and then stalls holds a coroutine, never a slot. While it
            # waits for one, its body counts among the bytes held (MAX_READING_BYTES).
            self._reading += len(body)
            try:
                wait = queue_wait(self.queue_seconds, request.query.get("timeout"))
                taken = await self.in_flight.take(wait)
            finally:
                self._reading -= len(body)
            if not taken:
                return self._busy(
                    f"busy: {self.max_in_flight} reviews in flight, {self.in_flight.waiting} waiting; retry"
                )
            try:
                return await self._admit(request, body)
            finally:
                self.in_flight.release()
        finally:
            self.metrics.duration.observe(time.monotonic() - started)

    async def _body(self, request: web.Request) -> bytes | web.Response:
        """The request's body, or the error answer for one refused or not sent in time."""
        length = request.content_length
        if length is None or "chunked" in request.headers.get("Transfer-Encoding", "").lower():
            return self._error(411, "a Content-Length is required", close=True)
        if length > self.max_body:
            return self._error(413, f"the body is {length} bytes, more than {self.max_body}", close=True)
        if self._reading + length > MAX_READING_BYTES:  # the loop's thread only: no lock
            return self._busy(
                f"busy: {self._reading} bytes of request bodies being read or waiting; retry", close=True
            )
        self._reading += length
        try:
            return await asyncio.wait_for(request.read(), BODY_TIMEOUT)
        except web.HTTPRequestEntityTooLarge:
            return self._error(413, f"the body is more than {self.max_body} bytes", close=True)
        except asyncio.TimeoutError:
            return self._error(408, f"the body did not arrive within {BODY_TIMEOUT:g} s", close=True)
        except (OSError, ClientError) as e:
            return self._error(400, f"the body ended early ({e or type(e).__name__})", close=True)
        finally:
            self._reading -= length

    async def _admit(self, request: web.Request, body: bytes) -> web.Response:
        # Answered after the body is read, so the connection stays usable.
        if request.path not in PATHS:
            return self._error(404, f"no such path {request.path!r} (POST /mutate)")
        content_type = request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        if content_type != "application/json":
            return self._error(415, f"Content-Type {content_type!r} is not application/json")
        try:
            parsed = review.parse(body)
        except review.ReviewError as e:
            return self._error(400, str(e))
        try:
            # In a worker thread: the loop keeps accepting and handshaking while a pod is decided.
            answer, result = await asyncio.to_thread(self._review, parsed, PATHS[request.path])
        except Exception:
            log.exception("webhook: failed on request %s", parsed.uid)
            return self._error(500, "internal error (the webhook's log has it)")
        self.metrics.requests.labels(result).inc()
        return web.Response(
            body=json.dumps(answer, separators=(",", ":")).encode(), content_type="application/json"
        )

    def _review(self, request: review.Request, pss_enforced: bool) -> tuple[dict[str, Any], str]:
        if not request.is_pod_creation:
            return review.response(request.uid), "skipped"
        decision = decide(request.obj, self.profiles, pss_enforced=pss_enforced)
        who = request.who
        if decision.result == "refused":
            log.info("webhook: refused pod %s: %s", who, decision.message)
            return review.response(request.uid, allowed=False, message=decision.message), "refused"
        for warning in decision.warnings:
            log.info("webhook: pod %s: %s", who, warning)
        log.log(
            logging.INFO if decision.result == "mutated" else logging.DEBUG,
            "webhook: %s pod %s: %s",
            decision.result,
            who,
            decision.message,
        )
        return review.response(request.uid, patch=decision.patch, warnings=decision.warnings), decision.result


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
    if port == metrics_port and port != 0:  # else the second bind says "address already in use"
        raise ConfigError(f"--metrics-port {metrics_port}: the same port as --port; give each its own")
    profiles = load_profiles(profiles_dir)
    tls = TLSFiles(cert, key)
    metrics = WebhookMetrics()
    try:
        server = AdmissionServer((host, port), profiles, tls, metrics, max_body)
    except OSError as e:
        raise ConfigError(f"--port {port}: {bind_failure(e)}") from None
    try:
        metrics_server = MetricsServer((host, metrics_port), metrics.registry)
    except OSError as e:
        server.server_close()
        raise ConfigError(f"--metrics-port {metrics_port}: {bind_failure(e)}") from None

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(quiet_gone_clients)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await server.start()
            await metrics_server.start()
            log.info(
                "webhook: serving profiles %s on https port %d (metrics on %d)",
                ", ".join(sorted(profiles)),
                server.server_address[1],
                metrics_server.server_address[1],
            )
            if ready is not None:
                ready(server, metrics_server)
            await stop.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await server.stop()
            await metrics_server.stop()

    try:
        asyncio.run(serve())
    finally:
        server.server_close()
        metrics_server.server_close()
    log.info("webhook: stopped")
    return 0
