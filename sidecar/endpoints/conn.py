"""One connection's state: where it is in its request-response cycle, and what it holds meanwhile.

Its own module so that the states, which both the I/O loop (:mod:`.connections`) and the routes
(:mod:`.server`) move a connection through, are defined once, with the few sizes that bound a
connection's cost.
"""

from __future__ import annotations

import selectors
import socket
import struct

from epochfs.sidecar.endpoints.http11 import Reply

# Connection states. WAITING: for (the rest of) a request; BODY: for the rest of a report's body;
# BUSY: a worker has the request; WRITING: the response is being sent; LINGER: the last response
# was sent and our side shut down, waiting for the client's FIN; CLOSED.
WAITING, BODY, BUSY, WRITING, LINGER, CLOSED = range(6)
INTEREST = {
    WAITING: selectors.EVENT_READ, BODY: selectors.EVENT_READ, LINGER: selectors.EVENT_READ,
    BUSY: 0, WRITING: selectors.EVENT_WRITE, CLOSED: 0,
}
RECV_BYTES = 16384
ACCEPT_BATCH = 64  # accepts per loop turn; well below any cap, so a new probe is never the oldest
LINGER_DISCARD = 1 << 20  # bytes read and dropped after a closing response (an unread body)
RST = struct.pack("ii", 1, 0)


class Conn:
    __slots__ = (
        "body_wanted",
        "buf",
        "cache",
        "deadline",
        "events",
        "host",
        "keep_alive",
        "out",
        "query",
        "seq",
        "served",
        "sock",
        "state",
        "timeout_reply",
        "waited",
    )

    def __init__(self, sock: socket.socket, host: str) -> None:
        self.sock = sock
        self.host = host
        self.state = CLOSED
        self.events = 0
        self.buf = bytearray()
        self.out = b""
        self.deadline = 0.0
        self.keep_alive = True
        self.served = 0
        self.seq = 0
        self.body_wanted = 0
        self.query = ""
        self.cache: str | None = None  # a report's X-Epochfs-Cache, checked once its body is in
        self.timeout_reply: Reply | None = None
        self.waited = 0  # bytes dropped while lingering


