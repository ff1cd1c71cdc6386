"""The connections under the presigned GETs (:mod:`.httpget`): http.client
connections with a connect timeout apart from the read timeout, an optional large receive buffer,
and the routes through a forward proxy.

Proxies are used as botocore uses them: an ``http://`` target through a proxy is one
absolute-form request (``GET http://host/path``, written by the pool) to the proxy; an
``https://`` target is a ``CONNECT`` tunnel (:meth:`http.client.HTTPConnection.set_tunnel`) and
then TLS to the target, checked against the same CA bundle as a direct connection. An
``https://`` proxy is reached over TLS too (TLS inside TLS for an ``https://`` target, with
urllib3's ``SSLTransport``, as botocore does).

Every response is read under a floor on its rate (:mod:`.ratefloor`, the window: the socket's
read timeout), checked where the socket's reads return, below ``http.client``'s buffer (whose
``readinto`` fills the whole block before it returns: a check above it would see a trickle only at
its end).
"""

from __future__ import annotations

import contextlib
import http.client
import io
import select
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from epochfs.sidecar.remote.httpproxy import Proxy, ProxyConnectError, tunnel_refusal
from epochfs.sidecar.remote.ratefloor import MIN_BODY_RATE, RateFloor, SlowBody

DEFAULT_RECV_BUFFER = 4 << 20
"""Socket receive buffer asked for on each connection (bytes; the kernel doubles it)."""


class _FlooredRaw(io.RawIOBase):
    """A socket's reads under a :class:`~.ratefloor.RateFloor` of ``window`` seconds, straight
    from the socket (``recv_into``, not through ``socket.makefile``'s own raw reader): this is
    every download's innermost loop, a call for each ``recv``, so it adds one Python frame, not
    two. It holds a ``makefile`` reader all the same, unread: the socket's reference that keeps
    its descriptor open while the body is read after the connection let go of it (a server that
    closes each connection), as the response's own reader would."""

    def __init__(self, sock: Any, window: float) -> None:
        self._held = sock.makefile("rb", buffering=0)
        self._recv_into = sock.recv_into
        self._floor = RateFloor(window)

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int | None:
        start = time.monotonic()
        try:
            n: int = self._recv_into(b)
        except BlockingIOError:  # as socket.makefile's reader: no data now on a non-blocking socket
            return None
        self._floor.note(n, time.monotonic() - start)
        return n

    def close(self) -> None:
        self._held.close()
        super().close()


class FlooredResponse(http.client.HTTPResponse):
    """A response read under the rate floor (the window: the socket's read timeout)."""

    def __init__(self, sock: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        window = sock.gettimeout() if hasattr(sock, "gettimeout") else None
        if window:
            plain, self.fp = self.fp, io.BufferedReader(_FlooredRaw(sock, window))
            plain.close()


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


class _ConnMixin:
    """A connection with separate connect and read timeouts (http.client has only one) and,
    optionally, a large receive buffer set before the first request (see the pool).

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
            refused = tunnel_refusal(self.proxy, e) if self.tunnel and self.proxy is not None else None
            if refused is None:
                raise
            raise refused from None
        self.sock.settimeout(self.read_timeout)

    def _establish(self) -> None:
        super().connect()  # type: ignore[misc]


class HTTPConn(_ConnMixin, http.client.HTTPConnection):
    response_class = FlooredResponse  # the rate floor


class HTTPSConn(_ConnMixin, http.client.HTTPSConnection):
    response_class = FlooredResponse  # the rate floor


class _TLSInTLSConn(HTTPSConn):
    """An ``https://`` target through an ``https://`` proxy: TLS to the proxy, ``CONNECT``
    over it, then TLS to the target inside that TLS (an ``ssl.SSLSocket`` cannot be wrapped
    again, so the inner layer is urllib3's ``SSLTransport``, as in botocore)."""

    target_tls: ssl.SSLContext
    target_host: str

    def _establish(self) -> None:
        from urllib3.util.ssltransport import SSLTransport

        http.client.HTTPConnection.connect(self)  # TCP, TLS to the proxy (_open), CONNECT
        self.sock = SSLTransport(self.sock, self.target_tls, server_hostname=self.target_host)


def new_connection(parts: Any, proxy: Proxy | None, *, timeout: float,
                   tls: Callable[[], ssl.SSLContext]) -> HTTPConn | HTTPSConn:
    """A new, not yet connected connection to the target of ``parts`` (a ``urlsplit`` result),
    through ``proxy`` when given; ``tls`` returns the pool's one TLS context."""
    host = parts.hostname or ""
    fresh: HTTPConn | HTTPSConn
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) URL scheme: {parts.scheme!r}")
    if proxy is None:
        if parts.scheme == "https":
            fresh = HTTPSConn(host, parts.port, timeout=timeout, context=tls())
        else:
            fresh = HTTPConn(host, parts.port, timeout=timeout)
        return fresh
    if parts.scheme == "http":
        fresh = HTTPConn(proxy.host, proxy.port, timeout=timeout)
    else:
        auth = {"Proxy-Authorization": proxy.authorization} if proxy.authorization else None
        if proxy.scheme == "https":
            inner = _TLSInTLSConn(proxy.host, proxy.port, timeout=timeout, context=tls())
            inner.target_tls = tls()
            inner.target_host = host
            fresh = inner
        else:
            fresh = HTTPSConn(proxy.host, proxy.port, timeout=timeout, context=tls())
        fresh.set_tunnel(host, parts.port or 443, headers=auth)
        fresh.tunnel = True
    fresh.proxy = proxy
    if proxy.scheme == "https":
        # The proxy's certificate is checked like a target's (botocore: the same CA bundle).
        fresh.proxy_tls = tls()
    return fresh


def socket_of(sock: Any) -> Any:
    """The OS-level socket under a connection's socket (the outer one for TLS inside TLS)."""
    return getattr(sock, "socket", None) or sock


def dropped(conn: http.client.HTTPConnection) -> bool:
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


__all__ = [
    "DEFAULT_RECV_BUFFER",
    "MIN_BODY_RATE",
    "HTTPConn",
    "HTTPSConn",
    "SlowBody",
    "dropped",
    "new_connection",
    "socket_of",
    "usable_recv_buffer",
]
