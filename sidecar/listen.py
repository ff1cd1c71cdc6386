"""A server's listening socket (the sidecar's endpoints, the admission webhook's): both address
families by default, IPv4 where the kernel has no IPv6.

Its own module, below both servers, because which families a probe or the API server can reach
decides whether a pod ever becomes ready or a webhook is ever called:
the kubelet probes the pod's IP, and on an IPv6-only or IPv6-primary cluster that is an IPv6
address, which a socket bound to ``0.0.0.0`` refuses. So :data:`ALL_ADDRESSES` (``"::"``, the
supervisor's default) is one IPv6 socket with ``IPV6_V6ONLY`` off, which takes IPv4 connections
too (as ``::ffff:a.b.c.d``); only where the kernel has no IPv6 at all (booted with
``ipv6.disable=1``: the socket or its bind fails with ``EAFNOSUPPORT`` / ``EADDRNOTAVAIL``) does it
fall back to ``0.0.0.0``. :attr:`Listener.where` says which, for the one log line that names the port.
Any other address is bound as given (one family).
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

ALL_ADDRESSES = "::"
"""Listen on every IPv6 and IPv4 address (dual stack), or every IPv4 one without IPv6."""

NO_IPV6 = frozenset({errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL})
"""What an IPv6 socket or its bind to ``::`` fails with when the kernel has no IPv6."""


@dataclass(frozen=True)
class Listener:
    """A bound, listening socket and, in words, which addresses it answers on."""

    sock: socket.socket
    where: str


def listen(host: str, port: int, backlog: int) -> Listener:
    """Bind and listen on ``host:port`` (port 0 picks a free one); ``OSError`` when that fails
    (a port in use: the caller names the flag). See the module docstring for :data:`ALL_ADDRESSES`."""
    if host != ALL_ADDRESSES:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family, backlog=backlog)
        return Listener(sock, f"{host or '0.0.0.0'} (IPv{6 if family == socket.AF_INET6 else 4} only)")
    try:
        return Listener(_dual_stack(port, backlog), "all IPv6 and IPv4 addresses (dual stack)")
    except OSError as e:
        if e.errno not in NO_IPV6:
            raise  # a port in use is a port in use in either family
        why = e
    sock = socket.create_server(("0.0.0.0", port), family=socket.AF_INET, backlog=backlog)
    return Listener(sock, f"all IPv4 addresses only (no IPv6 in this kernel: {why})")


def _dual_stack(port: int, backlog: int) -> socket.socket:
    """An IPv6 socket on ``[::]:port`` that takes IPv4 too. Made by hand rather than with
    ``socket.create_server(dualstack_ipv6=True)``, which turns a kernel without IPv6 into a
    ``ValueError`` and loses the errno that tells it from any other failure."""
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as create_server does
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # not the sysctl's default
        sock.bind((ALL_ADDRESSES, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock
