"""Blocking HTTP GETs on the calling thread, over a pool of keep-alive connections.

Why not the event loop: a download's bytes are hashed and written on a worker thread anyway, and
when the body also comes in through one asyncio loop every socket chunk (64-256 KiB) costs a loop
iteration, a parser callback, a future wake-up and a join on that one thread, under the GIL. For
4 MiB objects that was as much CPU as the md5 itself (about 6 ms per object). Here each worker
thread reads the body straight into its own buffer (``readinto``: one copy, from the kernel), and
the GIL is released for every ``recv``, every md5 update and every write, so the worker threads
spread over all cores with little Python per megabyte.

The HTTP client is the standard library's :mod:`http.client`. Connections are kept alive and
reused; an idle connection that the server has closed meanwhile is noticed before it is reused
(readable while idle means EOF or junk) and replaced, so a stale connection does not cost a
failed attempt. :meth:`GetPool.close` shuts every connection down, which wakes threads blocked in
a read of a stalled body so that a stop never waits for the read timeout.

Proxies are used as botocore uses them (the caller passes botocore's ``{scheme: proxy URL}``, so
listing and downloads take the same route): an ``http://`` target through a proxy is one
absolute-form request (``GET http://host/path``) to the proxy; an ``https://`` target is a
``CONNECT`` tunnel (:meth:`http.client.HTTPConnection.set_tunnel`) and then TLS to the target,
checked against the same CA bundle as a direct connection. An ``https://`` proxy is reached over
TLS too (TLS inside TLS for an ``https://`` target, with urllib3's ``SSLTransport``, as botocore
does). Credentials in the proxy URL become ``Proxy-Authorization: Basic``, sent to the proxy only
(in the ``CONNECT`` or the absolute-form request, never inside a tunnel), and never appear in a
message: a proxy is always shown as ``http://***:***@host:port``.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import re
import select
import socket
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

DEFAULT_RECV_BUFFER = 4 << 20
"""Socket receive buffer asked for on each connection (bytes; the kernel doubles it)."""


def usable_recv_buffer(wanted: int) -> int:
    """``wanted`` when the kernel grants that much (``net.core.rmem_max``), else 0.

    A fixed receive buffer turns TCP's receive-buffer autotuning off, so a smaller one than asked
    for could be slower on long round trips than leaving the kernel to it.
    """
    if wanted <= 0:
        return 0
    try:
        with open("/proc/sys/net/core/rmem_max") as f:
            granted = int(f.read().strip())
    except (OSError, ValueError):
        return 0
    return wanted if granted >= wanted else 0


@dataclass(frozen=True)
class Proxy:
    """A forward proxy, read from its URL the way botocore reads one
    (``botocore.httpsession.ProxyConfiguration``): ``host:port`` alone means ``http://host:port``;
    ``user:password@`` (percent-encoded) becomes ``Proxy-Authorization: Basic``. ``str()`` masks
    the credentials; ``repr()`` leaves them out."""

    scheme: str
    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)

    @classmethod
    def from_url(cls, url: str) -> Proxy:
        if not url.startswith(("http:", "https:")):
            if "://" in url:  # botocore would glue http:// in front and fail later
                raise ValueError(f"unsupported proxy URL scheme {url.split('://', 1)[0]!r} "
                                 "(http:// and https:// proxies are supported)")
            url = ("http:" if url.startswith("//") else "http://") + url
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            raise ValueError("the proxy URL has an invalid port") from None
        if not parts.hostname:
            raise ValueError("the proxy URL has no host")
        authorization = None
        if parts.username is not None and parts.password is not None:
            user, password = unquote(parts.username), unquote(parts.password)
            if user and password:
                token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
                authorization = f"Basic {token}"
        default = 443 if parts.scheme == "https" else 80
        return cls(parts.scheme, parts.hostname, port or default, authorization)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        auth = "***:***@" if self.authorization else ""
        return f"{self.scheme}://{auth}{host}:{self.port}"


class ProxyError(Exception):
    """The proxy refused a request or a tunnel (407: its credentials are missing or wrong);
    ``status`` is the proxy's HTTP status."""

    def __init__(self, proxy: Proxy, status: int, reason: str) -> None:
        hint = " (check the credentials in the proxy URL)" if status == 407 else ""
        super().__init__(f"the proxy {proxy} answered {status} {reason}{hint}".strip())
        self.proxy = str(proxy)
        self.status = status
        self.reason = reason


class ProxyConnectError(ConnectionError):
    """The proxy could not be reached (refused, reset, timed out): retried like any connection
    error, and said to be the proxy's."""


_TUNNEL_FAILED = re.compile(r"Tunnel connection failed: (\d{3})\s*(.*)")
"""How http.client (3.11 to 3.13) reports a CONNECT answered with a status other than 200; an
``OSError`` of another wording passes through unchanged."""


class _ConnMixin:
    """A connection with separate connect and read timeouts (http.client has only one) and,
    optionally, a large receive buffer set before the first request (see :class:`GetPool`).

    Through a proxy, ``host``/``port`` are the proxy's; ``proxy_tls`` is set for an ``https://``
    proxy, and ``tunnel`` when the target is reached through ``CONNECT``."""

    sock: Any
    timeout: Any
    read_timeout: float
    recv_buffer: int = 0
    proxy: Proxy | None = None
    proxy_tls: ssl.SSLContext | None = None
    tunnel: bool = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = self._open

    def _open(self, address: tuple[str, int], timeout: Any, source_address: Any = None) -> Any:
        """The socket under the HTTP connection (to the proxy when there is one)."""
        try:
            sock = socket.create_connection(address, timeout, source_address)
        except OSError as e:
            if self.proxy is None:
                raise
            raise ProxyConnectError(f"cannot connect to the proxy {self.proxy}: {e}") from e
        try:
            if self.recv_buffer:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.recv_buffer)
            if self.proxy_tls is not None:
                sock = self.proxy_tls.wrap_socket(sock, server_hostname=address[0])
        except BaseException:
            sock.close()
            raise
        return sock

    def connect(self) -> None:
        try:
            self._establish()
        except OSError as e:
            failed = _TUNNEL_FAILED.match(str(e)) if self.tunnel and self.proxy is not None else None
            if failed is None or self.proxy is None:
                raise
            raise ProxyError(self.proxy, int(failed[1]), failed[2]) from None
        self.sock.settimeout(self.read_timeout)

    def _establish(self) -> None:
        super().connect()  # type: ignore[misc]


class _HTTPConn(_ConnMixin, http.client.HTTPConnection):
    pass


class _HTTPSConn(_ConnMixin, http.client.HTTPSConnection):
    pass


class _TLSInTLSConn(_HTTPSConn):
    """An ``https://`` target through an ``https://`` proxy: TLS to the proxy, ``CONNECT``
    over it, then TLS to the target inside that TLS (an ``ssl.SSLSocket`` cannot be wrapped
    again, so the inner layer is urllib3's ``SSLTransport``, as in botocore)."""

    target_tls: ssl.SSLContext
    target_host: str

    def _establish(self) -> None:
        from urllib3.util.ssltransport import SSLTransport

        http.client.HTTPConnection.connect(self)  # TCP, TLS to the proxy (_open), CONNECT
        self.sock = SSLTransport(self.sock, self.target_tls, server_hostname=self.target_host)


def _socket_of(sock: Any) -> Any:
    """The OS-level socket under a connection's socket (the outer one for TLS inside TLS)."""
    return getattr(sock, "socket", None) or sock


_Key = tuple[str, str, Proxy | None]
"""A pool of idle connections: scheme, host:port of the target, the proxy (None: direct), so that
proxied and direct connections never mix."""


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """True when an idle connection cannot be reused (closed by the server, or not connected)."""
    sock = conn.sock
    if sock is None:
        return False  # http.client connects it on the next request
    try:
        poller = select.poll()  # not select(): file descriptors may be above FD_SETSIZE
        poller.register(sock, select.POLLIN)
        events = poller.poll(0)
    except (OSError, ValueError):
        return True
    return bool(events)  # idle and readable: EOF (the server closed it) or unexpected bytes


class Response:
    """A response whose status is 200; the body is read with :meth:`readinto` or :meth:`read`."""

    def __init__(self, pool: GetPool, key: _Key, conn: http.client.HTTPConnection,
                 resp: http.client.HTTPResponse) -> None:
        self._pool = pool
        self._key = key
        self._conn: http.client.HTTPConnection | None = conn
        self._resp = resp
        self.size: int | None = resp.length
        self.etag: str | None = resp.getheader("ETag")

    def readinto(self, buf: memoryview) -> int:
        """Fill ``buf`` (fewer bytes only at the end of the body, 0 at the end)."""
        return self._resp.readinto(buf)

    def read(self, n: int) -> bytes:
        return self._resp.read(n)

    def close(self) -> None:
        """Give the connection back when the body was read to its end, else close it."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._resp.isclosed() and not self._resp.will_close:
            self._pool._put(self._key, conn)
        else:
            self._resp.close()
            self._pool._discard(conn)


class HTTPStatusError(Exception):
    """A status other than 200; ``body`` holds the start of the error document (S3's XML)."""

    def __init__(self, status: int, reason: str, body: bytes) -> None:
        super().__init__(f"HTTP {status} {reason}")
        self.status = status
        self.reason = reason
        self.body = body


class GetPool:
    """Keep-alive HTTP(S) connections shared by the worker threads; safe to use from many.

    ``recv_buffer`` (bytes, 0 for the kernel's autotuning) fixes each socket's receive buffer
    when the kernel grants that much. Autotuning starts every connection with a small window
    (``tcp_rmem``, 128 KiB) and grows it as data flows, so a connection that fetches one large
    object (a server that closes after each response, a fresh pool) spends its transfer in many
    small reads; a 4 MiB buffer measured 10-20% less client CPU per 4 MiB object against moto.
    """

    def __init__(self, *, connect_timeout: float, read_timeout: float, cafile: str | None = None,
                 max_idle: int = 64, recv_buffer: int = 0,
                 proxies: Mapping[str, str] | None = None) -> None:
        """``proxies`` maps a target's URL scheme (``http``, ``https``) to a proxy URL, as in
        botocore's ``Config(proxies=...)`` and ``botocore.utils.get_environ_proxies``; other keys
        (``no``, ``ftp``...) are ignored, as botocore ignores them. A proxy URL that cannot be
        used raises ``ValueError`` (its message holds no credentials)."""
        if connect_timeout <= 0 or read_timeout <= 0:
            raise ValueError("timeouts must be positive")
        if max_idle < 1:
            raise ValueError("max_idle must be at least 1")
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_idle = max_idle
        self.recv_buffer = usable_recv_buffer(recv_buffer)
        self._proxies = {scheme: Proxy.from_url(proxy) for scheme, proxy in (proxies or {}).items()
                         if scheme in ("http", "https") and proxy}
        self._cafile = cafile
        self._ssl: ssl.SSLContext | None = None
        self._lock = threading.Lock()
        self._idle: dict[_Key, list[http.client.HTTPConnection]] = {}
        self._all: set[http.client.HTTPConnection] = set()
        self._closed = False

    def proxy_for(self, url: str) -> Proxy | None:
        """The proxy that GETs of ``url`` go through (None: direct)."""
        return self._proxies.get(urlsplit(url).scheme)

    def get(self, url: str) -> Response:
        """Send ``GET url``; a 200 answer comes back as a :class:`Response` to read.

        Raises :class:`HTTPStatusError` for any other status (its connection is closed),
        :class:`ProxyError` when the proxy refuses (407, a tunnel refused),
        :class:`ProxyConnectError` when it cannot be reached, and the socket's errors
        (``ConnectionError``, ``TimeoutError``, ``http.client.HTTPException``).
        """
        parts = urlsplit(url)
        proxy = self._proxies.get(parts.scheme)
        key = (parts.scheme, parts.netloc, proxy)
        headers: dict[str, str] = {}
        if proxy is not None and parts.scheme == "http":
            # Absolute form: the proxy reads the target from the request line (Host as well).
            target = urlunsplit((parts.scheme, parts.netloc, parts.path or "/", parts.query, ""))
            if proxy.authorization:
                headers["Proxy-Authorization"] = proxy.authorization
        else:
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn = self._take(key, parts, proxy)
        try:
            conn.request("GET", target, headers=headers)
            resp = conn.getresponse()
        except BaseException:
            self._discard(conn)
            raise
        if resp.status != 200:
            try:
                body = resp.read(64 * 1024)
            except Exception:
                body = b""
            self._discard(conn)
            if resp.status == 407 and proxy is not None:
                raise ProxyError(proxy, resp.status, resp.reason)
            raise HTTPStatusError(resp.status, resp.reason, body)
        return Response(self, key, conn, resp)

    def _take(self, key: _Key, parts: Any, proxy: Proxy | None) -> http.client.HTTPConnection:
        while True:
            with self._lock:
                if self._closed:
                    raise ConnectionAbortedError("the connection pool is closed")
                idle = self._idle.get(key)
                conn = idle.pop() if idle else None
            if conn is None:
                break
            if not _dropped(conn):
                return conn
            self._discard(conn)
        fresh = self._connection(parts, proxy)
        fresh.read_timeout = self.read_timeout
        fresh.recv_buffer = self.recv_buffer
        with self._lock:
            self._all.add(fresh)
        return fresh

    def _connection(self, parts: Any, proxy: Proxy | None) -> _HTTPConn | _HTTPSConn:
        """A new, not yet connected connection to the target of ``parts`` (through ``proxy``)."""
        host = parts.hostname or ""
        timeout = self.connect_timeout
        fresh: _HTTPConn | _HTTPSConn
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"not an http(s) URL scheme: {parts.scheme!r}")
        if proxy is None:
            if parts.scheme == "https":
                fresh = _HTTPSConn(host, parts.port, timeout=timeout, context=self._ssl_context())
            else:
                fresh = _HTTPConn(host, parts.port, timeout=timeout)
            return fresh
        if parts.scheme == "http":
            fresh = _HTTPConn(proxy.host, proxy.port, timeout=timeout)
        else:
            auth = {"Proxy-Authorization": proxy.authorization} if proxy.authorization else None
            if proxy.scheme == "https":
                inner = _TLSInTLSConn(proxy.host, proxy.port, timeout=timeout,
                                      context=self._ssl_context())
                inner.target_tls = self._ssl_context()
                inner.target_host = host
                fresh = inner
            else:
                fresh = _HTTPSConn(proxy.host, proxy.port, timeout=timeout,
                                   context=self._ssl_context())
            fresh.set_tunnel(host, parts.port or 443, headers=auth)
            fresh.tunnel = True
        fresh.proxy = proxy
        if proxy.scheme == "https":
            # The proxy's certificate is checked like a target's (botocore: the same CA bundle).
            fresh.proxy_tls = self._ssl_context()
        return fresh

    def _ssl_context(self) -> ssl.SSLContext:
        # One context for every connection: loading the CA certificates takes tens of ms.
        with self._lock:
            if self._ssl is None:
                self._ssl = ssl.create_default_context(cafile=self._cafile)
            return self._ssl

    def _put(self, key: _Key, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if not self._closed and len(idle) < self.max_idle:
                idle.append(conn)
                return
        self._discard(conn)

    def _discard(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._all.discard(conn)
        with contextlib.suppress(Exception):
            conn.close()

    def close(self) -> None:
        """Close every connection; reads blocked on one of them (a stalled body) end at once."""
        with self._lock:
            self._closed = True
            idle = {c for conns in self._idle.values() for c in conns}
            busy = self._all - idle
            self._all.clear()
            self._idle.clear()
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.close()
        for conn in busy:
            sock = _socket_of(conn.sock) if conn.sock is not None else None
            if sock is not None:
                # shutdown, not close: another thread may be inside recv() on this socket.
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


__all__ = [
    "DEFAULT_RECV_BUFFER",
    "GetPool",
    "HTTPStatusError",
    "Proxy",
    "ProxyConnectError",
    "ProxyError",
    "Response",
    "usable_recv_buffer",
]
