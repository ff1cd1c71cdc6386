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
listing and downloads take the same route): the proxy itself is :mod:`.httpproxy`,
the connections and the routes through it :mod:`.httpconn`; this module is the
pool and the request. A proxy is always shown as ``http://***:***@host:port``.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from epochfs.sidecar.remote.httpconn import (
    DEFAULT_RECV_BUFFER,
    dropped,
    new_connection,
    socket_of,
    usable_recv_buffer,
)
from epochfs.sidecar.remote.httpproxy import Proxy, ProxyConnectError, ProxyError

_Key = tuple[str, str, Proxy | None]
"""A pool of idle connections: scheme, host:port of the target, the proxy (None: direct), so that
proxied and direct connections never mix."""


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

    def header(self, name: str) -> str | None:
        """A header of the response (case-insensitive), None when absent."""
        return self._resp.getheader(name)

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
        reusable = self._resp.isclosed() and not self._resp.will_close
        if not reusable:
            self._resp.close()
        self._pool.release(self._key, conn, reusable=reusable)


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
                 proxies: Mapping[str, str] | None = None,
                 tls: Callable[[], ssl.SSLContext] | None = None) -> None:
        """``tls`` gives the TLS context of every connection (an ``s3://`` remote's one CA bundle,
        :mod:`.trust`, which botocore's client verifies against too); without it, OpenSSL's
        defaults, or ``cafile``'s certificates alone when given.

        ``proxies`` maps a target's URL scheme (``http``, ``https``) to a proxy URL, as in
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
        self._tls = tls
        self._ssl: ssl.SSLContext | None = None
        self._lock = threading.Lock()
        self._idle: dict[_Key, list[http.client.HTTPConnection]] = {}
        self._all: set[http.client.HTTPConnection] = set()
        self._closed = False
        self.on_sent: Callable[[], None] | None = None
        """Called once, after the next request is written and before its answer is waited for:
        work that can overlap that wait (the sampler's imports it needs after its first LIST)."""

    def proxy_for(self, url: str) -> Proxy | None:
        """The proxy that GETs of ``url`` go through (None: direct)."""
        return self._proxies.get(urlsplit(url).scheme)

    def get(self, url: str, headers: Mapping[str, str] | None = None) -> Response:
        """Send ``GET url`` with ``headers`` (those a presigned URL was signed with); a 200 answer
        comes back as a :class:`Response` to read.

        Raises :class:`HTTPStatusError` for any other status (its connection is closed),
        :class:`ProxyError` when the proxy refuses (407, a tunnel refused),
        :class:`ProxyConnectError` when it cannot be reached, and the socket's errors
        (``ConnectionError``, ``TimeoutError``, ``http.client.HTTPException``).
        """
        key, conn, resp, proxy = self._send("GET", url, headers)
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

    def head(self, url: str) -> tuple[int, dict[str, str]]:
        """Send ``HEAD url``: its status and headers (lower-case names), whatever the status (a
        bucket's region comes in a header of a refusal too). Raises as :meth:`get` for a proxy
        that refuses or cannot be reached and for the socket's errors."""
        key, conn, resp, proxy = self._send("HEAD", url, None)
        try:
            resp.read()
        except BaseException:
            self._discard(conn)
            raise
        if resp.status == 407 and proxy is not None:
            self._discard(conn)
            raise ProxyError(proxy, resp.status, resp.reason)
        self.release(key, conn, reusable=not resp.will_close)
        return resp.status, {name.lower(): value for name, value in resp.getheaders()}

    def _send(self, method: str, url: str, headers: Mapping[str, str] | None,
              ) -> tuple[_Key, http.client.HTTPConnection, http.client.HTTPResponse, Proxy | None]:
        """``method url`` sent over a pooled connection, its response's status line and headers
        read; the connection is closed when that fails."""
        parts = urlsplit(url)
        proxy = self._proxies.get(parts.scheme)
        key = (parts.scheme, parts.netloc, proxy)
        sent = dict(headers or {})
        if proxy is not None and parts.scheme == "http":
            # Absolute form: the proxy reads the target from the request line (Host as well).
            target = urlunsplit((parts.scheme, parts.netloc, parts.path or "/", parts.query, ""))
            if proxy.authorization:
                sent["Proxy-Authorization"] = proxy.authorization
        else:
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn = self._take(key, parts, proxy)
        try:
            if conn.sock is None:  # a fresh connection: connected here, then checked, then sent on
                conn.connect()
                self._check_open()  # a close() that ran while it was made missed its socket
            conn.request(method, target, headers=sent)
            hook, self.on_sent = self.on_sent, None
            if hook is not None:
                hook()
            resp = conn.getresponse()
        except BaseException:
            self._discard(conn)
            raise
        return key, conn, resp, proxy

    def _take(self, key: _Key, parts: Any, proxy: Proxy | None) -> http.client.HTTPConnection:
        while True:
            with self._lock:
                if self._closed:
                    raise ConnectionAbortedError("the connection pool is closed")
                idle = self._idle.get(key)
                conn = idle.pop() if idle else None
            if conn is None:
                break
            if not dropped(conn):
                return conn
            self._discard(conn)
        fresh = new_connection(parts, proxy, timeout=self.connect_timeout, tls=self._ssl_context)
        fresh.read_timeout = self.read_timeout
        fresh.recv_buffer = self.recv_buffer
        with self._lock:
            if not self._closed:  # else close() ran meanwhile and would never shut this one down
                self._all.add(fresh)
                return fresh
        raise ConnectionAbortedError("the connection pool is closed")

    def _check_open(self) -> None:
        """Raise when :meth:`close` has run: a connection made while it ran (not yet connected,
        so it had no socket to shut down) must not go on to wait for an answer."""
        with self._lock:
            if self._closed:
                raise ConnectionAbortedError("the connection pool is closed")

    def _ssl_context(self) -> ssl.SSLContext:
        # One context for every connection: loading the CA certificates takes tens of ms.
        with self._lock:
            if self._ssl is None:
                tls = self._tls or (lambda: ssl.create_default_context(cafile=self._cafile))
                self._ssl = tls()
            return self._ssl

    def release(self, key: _Key, conn: http.client.HTTPConnection, *, reusable: bool) -> None:
        """Take back ``conn`` (of pool ``key``) when its response is done with: kept for the next
        request to the same target when ``reusable`` (its body read to the end, no
        ``Connection: close``) and the pool has room, else closed. What a :class:`Response` calls
        when it is closed."""
        if reusable:
            self._put(key, conn)
        else:
            self._discard(conn)

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
        """Close every connection; reads blocked on one of them (a stalled body) end at once. A
        connect in progress (no socket yet to shut down) is not cut short: it ends within the
        connect timeout, and its request is then refused, never sent."""
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
            sock = socket_of(conn.sock) if conn.sock is not None else None
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
