"""The two servers' common part: one ``aiohttp.web`` application on a socket bound at construction,
its timeouts, and the metrics port's server.

Apart from :mod:`.server` (the admission reviews) so each module reads as one thing: this one is
how a server listens, serves and stops; that one what the webhook answers.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from epochfs.sidecar.listen import ALL_ADDRESSES, listen

log = logging.getLogger("epochfs.webhook")

HANDSHAKE_TIMEOUT = 10.0
"""Seconds a TLS handshake may take: a client that connects and stalls frees its connection."""
METRICS_TIMEOUT = 10.0
"""Seconds a metrics-port connection may sit idle before it is closed."""
SHUTDOWN_TIMEOUT = 10.0
"""Seconds the reviews in flight get to finish after SIGTERM."""
LINGER_SECONDS = 1.0
"""Seconds an answered connection whose body is unread (a 408, 413 or 429 before it came) is read
on before it is closed, so the client sees the answer and not a reset: aiohttp's default, 10 s,
held a stalled client's connection that long after its 408."""
_TEXT = "text/plain"
_GONE = (ConnectionError, TimeoutError, ssl.SSLError)
"""A client that went away (the API server's timeout, a probe that closed without reading, a
reset keep-alive connection): worth a DEBUG line, not a traceback."""


def quiet_gone_clients(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's exception handler: a client gone mid-connection is one DEBUG line; any
    other error keeps the loop's default report, traceback included."""
    error = context.get("exception")
    if isinstance(error, _GONE):
        log.debug("webhook: a connection ended: %s (%s)", context.get("message"), error)
        return
    loop.default_exception_handler(context)


class Served:
    """One aiohttp application on a socket bound at construction (so port 0 is known at once).

    :func:`.server.run_webhook` starts both servers on one event loop (:meth:`start`, :meth:`stop`);
    :meth:`serve_forever`, :meth:`shutdown` and :meth:`server_close` run one on its own loop in a
    thread the caller starts, as tests and embedders do."""

    def __init__(
        self,
        address: tuple[str, int],
        app: web.Application,
        *,
        keepalive_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        # "" (the --host default): every address of both families, as the sidecar's endpoints.
        self.listener = listen(address[0] or ALL_ADDRESSES, address[1], 128)
        self.socket = self.listener.sock
        self.server_address: tuple[Any, ...] = self.socket.getsockname()
        self.app = app
        self.keepalive_timeout = keepalive_timeout
        self.ssl_context = ssl_context
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._stopped = threading.Event()

    async def start(self) -> None:
        """Listen on the running loop."""
        runner = web.AppRunner(
            self.app,
            handle_signals=False,
            access_log=None,
            keepalive_timeout=self.keepalive_timeout,
            shutdown_timeout=SHUTDOWN_TIMEOUT,
            lingering_time=LINGER_SECONDS,
        )
        await runner.setup()
        self._runner = runner
        assert runner.server is not None
        self._listener = await asyncio.get_running_loop().create_server(
            runner.server,
            sock=self.socket,
            ssl=self.ssl_context,
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT if self.ssl_context else None,
            backlog=128,
        )

    async def stop(self) -> None:
        """Stop accepting, let the requests in flight finish (SHUTDOWN_TIMEOUT), close the rest."""
        if self._listener is not None:
            self._listener.close()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._listener is not None:
            await self._listener.wait_closed()

    def serve_forever(self) -> None:
        """Serve on a new event loop in the calling thread until :meth:`shutdown`."""

        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._loop.set_exception_handler(quiet_gone_clients)
            self._stop = asyncio.Event()
            try:
                await self.start()
            finally:
                self._started.set()
            try:
                await self._stop.wait()
            finally:
                await self.stop()

        try:
            asyncio.run(serve())
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` (called from another thread after it began) and wait for it."""
        self._started.wait()
        if self._loop is not None and self._stop is not None and not self._stopped.is_set():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._stopped.wait()

    def server_close(self) -> None:
        self.socket.close()


def text_response(status: int, text: str, close: bool = False) -> web.Response:
    response = web.Response(status=status, text=text, content_type=_TEXT)
    if close:
        response.force_close()
    return response


class MetricsServer(Served):
    """Plain HTTP: ``/metrics`` of ``registry`` and ``/healthz``."""

    def __init__(
        self, address: tuple[str, int], registry: CollectorRegistry, timeout: float = METRICS_TIMEOUT
    ) -> None:
        self.registry = registry
        app = web.Application()
        app.router.add_get("/{path:.*}", self._handle)
        super().__init__(address, app, keepalive_timeout=timeout)

    async def _handle(self, request: web.Request) -> web.Response:
        if request.path == "/metrics":
            return web.Response(
                body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
            )
        if request.path == "/healthz":
            return text_response(200, "ok\n")
        return text_response(404, "not found\n")
