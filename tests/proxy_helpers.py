"""Helpers for the proxy tests: a forward proxy, a reverse front for moto and a static server.

- :class:`ForwardProxy`: an HTTP forward proxy on 127.0.0.1 (optionally reached over TLS, an
  ``https://`` proxy) that relays absolute-form requests (``GET http://host/path``) and ``CONNECT``
  tunnels, records what it relayed and the local ports of its own upstream sockets (so a server
  can tell which of its clients came through the proxy), and optionally requires
  ``Proxy-Authorization: Basic``.
- :class:`ReverseFront`: a server in front of another one (moto), optionally speaking TLS, that
  records the client port, method and path of every request it passes on.
- :class:`StaticServer`: answers every GET with :data:`BODY` (optionally over TLS).

Every server runs on its own threads; nothing here sleeps to synchronize.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import select
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

BODY = bytes(range(256)) * 2048  # 512 KiB

_HOP = frozenset({"connection", "keep-alive", "proxy-authorization", "proxy-authenticate",
                  "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"})
_OWN = frozenset({"server", "date", "content-length"})


@dataclass
class TLSFiles:
    """A self-signed certificate for 127.0.0.1 (also the CA bundle that trusts it)."""

    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context


def make_tls(folder: Path) -> TLSFiles:
    """A certificate for ``127.0.0.1`` made with openssl (as tests/remote/test_httpget.py does)."""
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return TLSFiles(cert, key)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)


class _Base:
    """A server on its own thread; :meth:`close` ends it and every connection it holds."""

    def _serve(self, handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None) -> None:
        self.lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self.httpd = _Server(handler, tls)
        self.port = int(self.httpd.server_address[1])
        self.scheme = "https" if tls is not None else "http"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def track(self, sock: socket.socket) -> None:
        with self.lock:
            self._sockets.add(sock)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        with self.lock:
            socks = list(self._sockets)
        for sock in socks:  # shutdown wakes the threads blocked on them (select, recv)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=10)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: Any

    def log_message(self, format: str, *args: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.owner.track(self.connection)
        self.upstreams: dict[tuple[str, int], http.client.HTTPConnection] = {}

    def finish(self) -> None:
        for conn in self.upstreams.values():
            conn.close()
        super().finish()

    def pass_on(self, host: str, port: int, path: str, record: Any = None) -> None:
        """Send this request to ``host:port`` (origin form ``path``) and its answer back;
        ``record(local port of the upstream connection)`` is called before the answer goes back
        (so a client that has its answer finds the request recorded)."""
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        conn = self.upstreams.get((host, port))
        if conn is None:
            conn = self.upstreams[(host, port)] = http.client.HTTPConnection(host, port, timeout=30)
        for attempt in (1, 2):
            try:
                conn.request(self.command, path, body=body, headers=headers)
                local_port = int(conn.sock.getsockname()[1])
                resp = conn.getresponse()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()  # the upstream closed a kept-alive connection: once more, anew
                if attempt == 2:
                    raise
        data = resp.read()
        if record is not None:
            record(local_port)
        self.send_response(resp.status, resp.reason)
        for name, value in resp.getheaders():
            if name.lower() not in _HOP and name.lower() not in _OWN:
                self.send_header(name, value)
        if self.command == "HEAD":
            self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def _relay(a: socket.socket, b: socket.socket, count: Any) -> None:
    """Copy bytes both ways until either side closes; ``count(n)`` is told of the bytes from
    ``b`` before they are passed on.

    One thread for both directions: an ``ssl.SSLSocket`` (the client side of an ``https://``
    proxy) must not be read and written by two threads at once.
    """
    other = {a: b, b: a}
    while True:
        ready = [s for s in (a, b) if isinstance(s, ssl.SSLSocket) and s.pending()]
        if not ready:
            try:
                ready, _, _ = select.select([a, b], [], [])
            except (OSError, ValueError):
                return
        for sock in ready:
            try:
                data = sock.recv(1 << 16)
                if not data:
                    return
                if sock is b:
                    count(len(data))
                other[sock].sendall(data)
            except OSError:
                return


@dataclass
class ForwardProxy(_Base):
    """An HTTP forward proxy; ``auth=(user, password)`` requires those credentials."""

    auth: tuple[str, str] | None = None
    tls: ssl.SSLContext | None = None
    relayed: list[tuple[str, str]] = field(default_factory=list)
    """(method, target) of each request relayed or tunnel opened (absolute URL, ``host:port``)."""
    refused: int = 0
    """Requests answered 407 (missing or wrong credentials)."""
    upstream_ports: set[int] = field(default_factory=set)
    """Local ports of the proxy's connections to targets (what a target sees as client port)."""
    tunnel_bytes: list[int] = field(default_factory=lambda: [0])
    """Bytes the targets sent through CONNECT tunnels."""

    def __post_init__(self) -> None:
        owner = self

        class Handler(_ProxyHandler):
            pass

        Handler.owner = owner
        self._serve(Handler, self.tls)

    def proxy_url(self, user: str | None = None, password: str | None = None) -> str:
        """The proxy's URL, with ``user:password@`` (percent-encoded) when given."""
        auth = f"{quote(user, safe='')}:{quote(password or '', safe='')}@" if user else ""
        return f"{self.scheme}://{auth}127.0.0.1:{self.port}"

    def presigned_gets(self) -> list[str]:
        """Absolute URLs of the presigned GETs relayed (the S3 fast path's requests)."""
        with self.lock:
            return [t for m, t in self.relayed if m == "GET" and "X-Amz-Signature=" in t]


class _ProxyHandler(_Handler):
    owner: ForwardProxy

    def _authorized(self) -> bool:
        auth = self.owner.auth
        if auth is None:
            return True
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        if self.headers.get("Proxy-Authorization") == f"Basic {token}":
            return True
        with self.owner.lock:
            self.owner.refused += 1
        self.send_response(407, "Proxy Authentication Required")
        self.send_header("Proxy-Authenticate", 'Basic realm="test"')
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        return False

    def _forward(self) -> None:
        if not self._authorized():
            return
        parts = urlsplit(self.path)
        if parts.scheme != "http" or not parts.hostname:
            self.send_error(400, "absolute-form http:// request expected")
            return
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.pass_on(parts.hostname, parts.port or 80, path, self._record)

    def _record(self, local_port: int) -> None:
        with self.owner.lock:
            self.owner.relayed.append((self.command, self.path))
            self.owner.upstream_ports.add(local_port)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

    def do_CONNECT(self) -> None:
        if not self._authorized():
            return
        host, _, port = self.path.rpartition(":")
        try:
            upstream = socket.create_connection((host, int(port)), timeout=10)
        except (OSError, ValueError):
            self.send_error(502, "cannot reach the target")
            return
        upstream.settimeout(None)
        self.owner.track(upstream)
        with self.owner.lock:
            self.owner.relayed.append(("CONNECT", self.path))
            self.owner.upstream_ports.add(int(upstream.getsockname()[1]))
        self.send_response(200, "Connection established")
        self.end_headers()
        self.close_connection = True
        try:
            _relay(self.connection, upstream, self._count)
        finally:
            upstream.close()

    def _count(self, n: int) -> None:
        with self.owner.lock:
            self.owner.tunnel_bytes[0] += n


@dataclass
class ReverseFront(_Base):
    """Passes every request on to ``upstream`` (``http://host:port``), over TLS with ``tls``."""

    upstream: str
    tls: ssl.SSLContext | None = None
    requests: list[tuple[int, str, str]] = field(default_factory=list)
    """(client port, method, path) of each request passed on."""

    def __post_init__(self) -> None:
        owner = self
        up = urlsplit(self.upstream)
        target = (up.hostname or "127.0.0.1", up.port or 80)

        class Handler(_Handler):
            def _front(self) -> None:
                with owner.lock:
                    owner.requests.append((int(self.client_address[1]), self.command, self.path))
                self.pass_on(target[0], target[1], self.path)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _front

        Handler.owner = owner
        self._serve(Handler, self.tls)

    def presigned_gets(self) -> list[tuple[int, str]]:
        """(client port, path) of the presigned GETs passed on (the S3 fast path's requests)."""
        with self.lock:
            return [(p, path) for p, m, path in self.requests if m == "GET" and "X-Amz-Signature=" in path]


@dataclass
class StaticServer(_Base):
    """Answers every GET with :data:`BODY`; records (client port, path, headers) of each.

    A path starting with ``/stall`` gets the headers and 1,000 bytes, then nothing until
    :meth:`close` (``stalled`` is set once those bytes are sent)."""

    tls: ssl.SSLContext | None = None
    requests: list[tuple[int, str, dict[str, str]]] = field(default_factory=list)
    stalled: threading.Event = field(default_factory=threading.Event)
    _release: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        owner = self

        class Handler(_Handler):
            def do_GET(self) -> None:
                with owner.lock:
                    owner.requests.append((int(self.client_address[1]), self.path, dict(self.headers)))
                self.send_response(200)
                self.send_header("Content-Length", str(len(BODY)))
                self.send_header("ETag", '"static"')
                self.end_headers()
                if self.path.startswith("/stall"):
                    self.wfile.write(BODY[:1000])
                    owner.stalled.set()
                    owner._release.wait(30)
                    self.close_connection = True
                    return
                self.wfile.write(BODY)

        Handler.owner = owner
        self._serve(Handler, self.tls)

    def close(self) -> None:
        self._release.set()
        super().close()

    def client_ports(self) -> set[int]:
        with self.lock:
            return {port for port, _path, _headers in self.requests}


PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy")
"""The variables that send Python's ``urlopen`` (and curl) through a proxy."""


@contextlib.contextmanager
def refusing_proxy() -> Iterator[ForwardProxy]:
    """A proxy that answers 407 to any request without its credentials (none is sent), counting
    each: a request to the pod's own sidecar must never reach it."""
    forward = ForwardProxy(auth=("corp", "not-sent"))
    try:
        yield forward
    finally:
        forward.close()


def proxied(env: Mapping[str, str], proxy: ForwardProxy) -> dict[str, str]:
    """``env`` with every proxy variable naming ``proxy`` and no NO_PROXY."""
    out = {k: v for k, v in env.items() if k.lower() not in ("no_proxy", "http_proxy", "https_proxy")}
    return {**out, **dict.fromkeys(PROXY_VARIABLES, proxy.url)}
