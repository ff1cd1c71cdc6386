"""A small HTTP proxy in front of the moto S3 server that injects faults into object GETs.

Faults are planned per object path, one per attempt, so a test knows exactly what the sampler saw:

- ``reset``: the connection is reset (RST) before any response byte;
- ``reset-body``: headers and half the body are sent, then the connection is reset;
- ``truncate``: headers with the full Content-Length, half the body, then a clean close;
- ``stall``: headers and half the body, then silence until the proxy stops (or 60 s);
- ``garbage``: bytes that are not an HTTP response, then a clean close;
- ``503``: an S3 ``SlowDown`` error with status 503;
- ``500``: an S3 ``InternalError`` with status 500;
- ``429``: a ``TooManyRequests`` error with status 429 (throttling as some S3-compatible stores say it);
- ``404``: an S3 ``NoSuchKey`` error (the object vanished after the listing);
- ``403``: an S3 ``AccessDenied`` error (on a presigned GET the sampler then tries botocore, which
  takes the next fault of the plan);
- ``corrupt``: the full body with one byte flipped (same length, so only a checksum catches it);
- ``ok``: forwarded untouched.

Anything without a plan (listings, HEADs, planned paths after their plan runs out) is forwarded.
"""

from __future__ import annotations

import http.client
import socket
import struct
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar
from urllib.parse import urlsplit

FAULTS = ("reset", "reset-body", "truncate", "stall", "garbage", "503", "500", "429", "404", "403",
          "corrupt", "ok")

_ERRORS = {
    "503": (503, "SlowDown", "Please reduce your request rate."),
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "429": (429, "TooManyRequests", "Please reduce your request rate."),
    "404": (404, "NoSuchKey", "The specified key does not exist."),
    "403": (403, "AccessDenied", "Access Denied"),
}


P = TypeVar("P", bound="ServedProxy")


class ServedProxy:
    """A proxy's server on its own thread: started by ``with``, stopped (``stopping`` set for the
    handlers that wait) when the block ends."""

    stopping: threading.Event
    server: ThreadingHTTPServer
    endpoint: str

    def _serve(self, handler: type[BaseHTTPRequestHandler], host: str, port: int) -> None:
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://{host}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self: P) -> P:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


class FaultProxy(ServedProxy):
    """The proxy server; ``plan[path]`` lists the faults of successive GETs of that path."""

    def __init__(self, *, upstream: str, host: str = "127.0.0.1", port: int = 0) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.upstream = (parts.hostname, parts.port)
        self.plan: dict[str, list[str]] = {}
        self.gets: dict[str, int] = defaultdict(int)
        self.injected: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.down: str | None = None
        """When set, the fault every object GET gets (an outage), before any plan."""
        self.head_zero_length = False
        """Answer every HEAD with ``Content-Length: 0`` (as a proxy that drops HEAD lengths does)."""
        self.refuse_presigned = False
        """Answer 403 to every presigned URL (as a store that does not accept them would)."""
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._serve(Handler, host, port)

    def set_plan(self, path: str, faults: list[str]) -> None:
        unknown = [f for f in faults if f not in FAULTS]
        if unknown:
            raise ValueError(f"unknown fault(s): {unknown}")
        with self.lock:
            self.plan[path] = list(faults)

    def next_fault(self, path: str) -> str:
        with self.lock:
            self.gets[path] += 1
            faults = self.plan.get(path) or ["ok"]
            fault = self.down or (faults.pop(0) if len(faults) else "ok")
            if fault != "ok":
                self.injected[fault] += 1
            return fault


def forward(request: BaseHTTPRequestHandler,
            upstream: tuple[str, int]) -> tuple[int, list[tuple[str, str]], bytes]:
    """``request`` sent on to ``upstream`` as it came (its body read); the answer's status,
    headers (less the hop-by-hop ones) and whole body."""
    length = int(request.headers.get("Content-Length") or 0)
    body = request.rfile.read(length) if length else None
    conn = http.client.HTTPConnection(*upstream, timeout=30)
    try:
        headers = {k: v for k, v in request.headers.items() if k.lower() != "connection"}
        conn.request(request.command, request.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, [(k, v) for k, v in resp.getheaders()
                             if k.lower() not in ("connection", "transfer-encoding")], data
    finally:
        conn.close()


def send_head(request: BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]],
              length: int) -> None:
    """The status line and ``headers`` of an answer to ``request``, its Content-Length ``length``."""
    request.send_response(status)
    for k, v in headers:
        if k.lower() != "content-length":
            request.send_header(k, v)
    request.send_header("Content-Length", str(length))
    request.end_headers()


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _forward(self) -> tuple[int, list[tuple[str, str]], bytes]:
        return forward(self, self.owner.upstream)

    def _send(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        send_head(self, status, headers, len(body))
        self.wfile.write(body)
        self.wfile.flush()

    def _reset(self) -> None:
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def _is_object_get(self) -> bool:
        # /bucket/key (query strings, such as presigned signatures, do not matter); listings
        # are /bucket?list-type=2.
        path = urlsplit(self.path).path
        return self.command == "GET" and len(path.strip("/").split("/", 1)) == 2

    def do_GET(self) -> None:
        if not self._is_object_get():
            self._send(*self._forward())
            return
        path = urlsplit(self.path).path
        if self.owner.refuse_presigned and "X-Amz-Signature=" in self.path:
            body = b"<Error><Code>AccessDenied</Code><Message>no presigned URLs here</Message></Error>"
            self._send(403, [("Content-Type", "application/xml")], body)
            return
        fault = self.owner.next_fault(path)
        if fault == "reset":
            self._reset()
            return
        if fault == "garbage":
            self.wfile.write(b"\x16\x03\x01 this is not HTTP\r\n\r\n")
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if fault in _ERRORS:
            status, code, message = _ERRORS[fault]
            body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                    f"<Message>{message}</Message><Resource>{path}</Resource></Error>").encode()
            self._send(status, [("Content-Type", "application/xml")], body)
            return
        status, headers, data = self._forward()
        if status != 200 or fault == "ok":
            self._send(status, headers, data)
            return
        if fault == "corrupt":
            flipped = bytearray(data)
            if flipped:
                flipped[len(flipped) // 2] ^= 0xFF
            self._send(status, headers, bytes(flipped))
            return
        # reset-body, truncate, stall: full headers, half the body.
        self.send_response(status)
        for k, v in headers:
            if k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        if fault == "reset-body":
            self._reset()
        elif fault == "truncate":
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
        else:  # stall
            self.owner.stopping.wait(60)
            self.close_connection = True

    def do_HEAD(self) -> None:
        status, headers, _ = self._forward()
        self.send_response(status)
        for k, v in headers:
            if self.owner.head_zero_length and k.lower() == "content-length":
                v = "0"
            self.send_header(k, v)
        self.end_headers()

    def do_PUT(self) -> None:
        self._send(*self._forward())

    def do_POST(self) -> None:
        self._send(*self._forward())

    def do_DELETE(self) -> None:
        self._send(*self._forward())
