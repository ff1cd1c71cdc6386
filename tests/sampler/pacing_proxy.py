"""A proxy in front of the moto S3 server whose object GETs misbehave by a marker in the key:

- ``TRICKLE``: the headers, then the body one byte every 0.2 s (a server that paces, far below
  any useful rate, never silent long enough for a read timeout);
- ``DRIP``: the headers, then the body 64 KiB a second (slow but above the sampler's floor), so
  its download stays in flight for as long as the object is large;
- ``SLOWD``: S3's ``503 SlowDown``, every time;
- ``HANG``: the request read, then no answer at all until the proxy stops.

Everything else (listings, HEADs, other keys) is forwarded untouched. ``gets`` counts the object
GETs of each key."""

from __future__ import annotations

import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from faultproxy import ServedProxy, forward, send_head

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message></Error>")


class PacingProxy(ServedProxy):
    def __init__(self, upstream: str, port: int) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.gets: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        owner = self

        class Handler(_Handler):
            proxy = owner

        self._serve(Handler, "127.0.0.1", port)

    def count(self, marker: str) -> int:
        with self.lock:
            return sum(n for key, n in self.gets.items() if marker in key)



class _Handler(BaseHTTPRequestHandler):
    proxy: PacingProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _forward(self) -> tuple[int, list[tuple[str, str]], bytes]:
        return forward(self, self.proxy.upstream)

    def _send(self, status: int, headers: list[tuple[str, str]], body: bytes, *,
              piece: int = 0, every: float = 0.0) -> None:
        send_head(self, status, headers, len(body))
        if not piece:
            self.wfile.write(body)
            return
        for at in range(0, len(body), piece):
            if self.proxy.stopping.wait(every):
                break
            try:
                self.wfile.write(body[at:at + piece])
                self.wfile.flush()
            except OSError:  # the sampler gave up on it
                break
        self.close_connection = True

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if self.command != "GET" or len(path.strip("/").split("/", 1)) != 2:
            self._send(*self._forward())
            return
        with self.proxy.lock:
            self.proxy.gets[path] += 1
        if "SLOWD" in path:
            self._send(503, [("Content-Type", "application/xml")], SLOWDOWN)
        elif "HANG" in path:
            self.proxy.stopping.wait(120)
            self.close_connection = True
        elif "TRICKLE" in path:
            self._send(*self._forward(), piece=1, every=0.2)
        elif "DRIP" in path:
            self._send(*self._forward(), piece=6554, every=0.1)
        else:
            self._send(*self._forward())

    def do_HEAD(self) -> None:
        status, headers, _ = self._forward()
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
