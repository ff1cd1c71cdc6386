"""The endpoints' I/O loop: one thread, a ``selectors`` loop over every connection, never blocking.

Its own module because this is what keeps the server's cost bounded whatever a client does, apart
from what the requests mean: the cap on open connections (at the cap the oldest connection without
a request in progress is closed, a lingering one first), deadlines instead of per-byte timeouts,
pipelining, the half-close after a last response, and a prompt stop. :class:`ConnectionLoop` hands
each complete request head and body to its subclass (:class:`~.server.Endpoints`), which answers
through :meth:`ConnectionLoop._respond`, from the loop or, via :meth:`ConnectionLoop._post`, a worker.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from epochfs.sidecar.endpoints.conn import (
    ACCEPT_BATCH,
    BODY,
    BUSY,
    CLOSED,
    INTEREST,
    LINGER,
    LINGER_DISCARD,
    RECV_BYTES,
    RST,
    WAITING,
    WRITING,
    Conn,
)
from epochfs.sidecar.endpoints.http11 import HttpDate, Limits, Refusal, Reply, encode_response, split_head
from epochfs.sidecar.listen import listen
from epochfs.sidecar.metrics import EndpointMetrics

log = logging.getLogger("epochfs.endpoints")

class ConnectionLoop:
    """The listener (bound here: a port in use raises ``OSError`` at once) and the I/O thread."""

    def __init__(self, *, host: str, port: int, limits: Limits, metrics: EndpointMetrics) -> None:
        self.limits = limits
        self._metrics = metrics
        listener = listen(host, port, self.limits.backlog)
        self._listener = listener.sock
        self.where = listener.where
        """Which addresses the listener answers on, in words (for the line that names the port)."""
        self._listener.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._done: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]]] = queue.SimpleQueue()
        self._conns: set[Conn] = set()
        # Connections without a request in progress, oldest first: the ones closed at the cap.
        self._waiting: dict[Conn, None] = {}
        self._lingering: dict[Conn, None] = {}
        self._stopping = False
        self._stopped = False
        self._accept_paused_until = 0.0
        self._thread: threading.Thread | None = None
        self._date = HttpDate()

    # ------------------------------------------------------------------ what the subclass answers
    def _request(self, conn: Conn, head: bytes) -> None:
        """A complete request head arrived on ``conn`` (state WAITING)."""
        raise NotImplementedError

    def _body(self, conn: Conn, body: bytes) -> None:
        """The body the subclass asked for (state BODY, ``conn.body_wanted`` bytes) arrived."""
        raise NotImplementedError

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def connections(self) -> int:
        """Connections open now (read from any thread; for tests and logs)."""
        return len(self._conns)

    def _start_loop(self) -> None:
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, self._wake_r)
        self._thread = threading.Thread(target=self._serve, name=f"epochfs-http-{self.port}", daemon=True)
        self._thread.start()

    def _stop_loop(self, timeout: float) -> bool:
        """Close the listener and every connection within ``timeout``; False if already stopped."""
        if self._stopped:
            return False
        self._stopped = True
        self._stopping = True
        if self._thread is None:
            self._close_all()
        else:
            self._wake()
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("HTTP endpoint thread did not stop within %.1fs", timeout)
        return True

    # ------------------------------------------------------------------ the loop
    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full (a wake-up is pending anyway) or closed (stopped)
            self._wake_w.send(b"\0")

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        """From a worker thread: run ``fn(*args)`` on the I/O thread."""
        self._done.put((fn, args))
        self._wake()

    def _serve(self) -> None:
        tick = max(0.01, min(0.25, self.limits.request_timeout / 4, self.limits.check_timeout / 4))
        next_sweep = time.monotonic() + tick
        try:
            while not self._stopping:
                for key, events in self._selector.select(max(0.0, next_sweep - time.monotonic())):
                    try:
                        self._dispatch(key.data, events)
                    except Exception:
                        log.exception("HTTP endpoint")
                        if isinstance(key.data, Conn):
                            self._close(key.data, reset=True)
                now = time.monotonic()
                if now >= next_sweep:
                    next_sweep = now + tick
                    self._sweep(now)
        except Exception:
            log.exception("HTTP endpoint loop failed")
        finally:
            self._close_all()

    def _dispatch(self, data: Any, events: int) -> None:
        if data is None:
            self._accept()
        elif data is self._wake_r:
            self._completions()
        else:
            conn: Conn = data
            if events & selectors.EVENT_WRITE and conn.state == WRITING:
                self._flush(conn)
                self._resume(conn)
            if events & selectors.EVENT_READ and conn.state in (WAITING, BODY, LINGER):
                self._readable(conn)

    def _completions(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass
        while True:
            try:
                fn, args = self._done.get_nowait()
            except queue.Empty:
                return
            try:
                fn(*args)
            except Exception:
                log.exception("HTTP endpoint completion")

    def _sweep(self, now: float) -> None:
        if self._accept_paused_until and now >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self._selector.register(self._listener, selectors.EVENT_READ, None)
        for conn in [c for c in self._conns if c.deadline <= now]:
            if conn.state == BUSY:  # a check or a report that did not answer in time
                assert conn.timeout_reply is not None
                self._respond(conn, conn.timeout_reply)
                self._resume(conn)
            elif conn.state in (WAITING, BODY):
                if conn.buf or conn.state == BODY or conn.served == 0:
                    self._metrics.reject("timeout")  # an idle keep-alive connection is not counted
                self._close(conn)
            elif conn.state == WRITING:
                self._metrics.reject("timeout")  # the client does not read its response
                self._close(conn, reset=True)
            elif conn.state == LINGER:
                self._close(conn, reset=True)

    def _close_all(self) -> None:
        for conn in list(self._conns):
            self._close(conn, reset=True)
        for sock in (self._listener, self._wake_r, self._wake_w):
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            sock.close()
        self._selector.close()

    # ------------------------------------------------------------------ connections
    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors: free the oldest idle connection, or stop accepting for a
                    # moment (the pending connection stays queued in the kernel).
                    victim = self._victim()
                    if victim is not None:
                        self._metrics.reject("capacity")
                        self._close(victim, reset=True)
                    else:
                        self._selector.unregister(self._listener)
                        self._accept_paused_until = time.monotonic() + 0.1
                    log.warning("HTTP endpoint: accept failed: %s", e.strerror)
                    return
                if e.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue
                raise
            self._open(sock, str(addr[0]))

    def _open(self, sock: socket.socket, host: str) -> None:
        if len(self._conns) >= self.limits.max_connections:
            victim = self._victim()
            if victim is None:  # every connection has a request in progress: refuse the new one
                self._metrics.reject("capacity")
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RST)
                sock.close()
                return
            self._metrics.reject("evicted")
            self._close(victim, reset=True)
        sock.setblocking(False)
        conn = Conn(sock, host)
        self._conns.add(conn)
        self._metrics.connections.inc()
        self._wait_for_request(conn, time.monotonic())
        self._readable(conn)  # the request often arrives with the handshake

    def _victim(self) -> Conn | None:
        """The connection to close for a new one: done and lingering, else waiting the longest."""
        for idle in (self._lingering, self._waiting):
            if idle:
                return next(iter(idle))
        return None

    def _set_state(self, conn: Conn, state: int, deadline: float) -> None:
        if state in (WAITING, BODY):
            if conn.state not in (WAITING, BODY):
                self._waiting[conn] = None
        else:
            self._waiting.pop(conn, None)
        if state == LINGER:
            self._lingering[conn] = None
        else:
            self._lingering.pop(conn, None)
        conn.state = state
        conn.deadline = deadline
        events = INTEREST[state]
        if events != conn.events:
            if conn.events == 0:
                self._selector.register(conn.sock, events, conn)
            elif events == 0:
                self._selector.unregister(conn.sock)
            else:
                self._selector.modify(conn.sock, events, conn)
            conn.events = events

    def _wait_for_request(self, conn: Conn, now: float) -> None:
        self._set_state(conn, WAITING, now + self.limits.request_timeout)

    def _close(self, conn: Conn, *, reset: bool = False) -> None:
        if conn.state == CLOSED and conn not in self._conns:
            return
        self._set_state(conn, CLOSED, 0.0)
        self._conns.discard(conn)
        self._metrics.connections.dec()
        try:
            if reset:  # RST: the descriptor and the kernel's buffers are freed at once
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RST)
        except OSError:
            pass
        conn.sock.close()
        conn.buf = bytearray()
        conn.out = b""

    def _readable(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn, reset=True)
            return
        if not data:  # the client closed (or half-closed) its side: nothing more will come
            self._close(conn)
            return
        if conn.state == LINGER:
            conn.waited += len(data)
            if conn.waited > LINGER_DISCARD:
                self._close(conn, reset=True)
            return
        conn.buf += data
        self._advance(conn)

    def _resume(self, conn: Conn) -> None:
        """After a response: parse a request the client already sent (pipelining)."""
        if conn.state == WAITING and conn.buf:
            self._advance(conn)


    def _advance(self, conn: Conn) -> None:
        """Parse what ``conn.buf`` holds: at most one request per response, a loop, no recursion."""
        while conn.state in (WAITING, BODY) and conn.buf:
            if conn.state == BODY:
                if len(conn.buf) < conn.body_wanted:
                    return
                body = bytes(conn.buf[: conn.body_wanted])
                del conn.buf[: conn.body_wanted]
                self._body(conn, body)
                continue
            if conn.buf[:1] in (b"\r", b"\n"):  # empty lines before a request line are allowed
                del conn.buf[: len(conn.buf) - len(conn.buf.lstrip(b"\r\n"))]
                continue
            head = split_head(conn.buf, self.limits.max_head_bytes)
            if head is None:
                return
            if isinstance(head, Refusal):
                self._refuse(conn, head)
                return
            self._request(conn, head)

    # ------------------------------------------------------------------ responses
    def _refuse(self, conn: Conn, refusal: Refusal) -> None:
        self._metrics.reject(refusal.reason)
        self._respond(conn, refusal.reply, close=True)

    def _respond(self, conn: Conn, reply: Reply, *, close: bool = False) -> None:
        conn.served += 1
        if close or conn.served >= self.limits.max_requests_per_connection:
            conn.keep_alive = False
        conn.out = encode_response(reply, keep_alive=conn.keep_alive, date=self._date())
        self._set_state(conn, WRITING, time.monotonic() + self.limits.request_timeout)
        self._flush(conn)

    def _flush(self, conn: Conn) -> None:
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(conn, reset=True)
            return
        conn.out = conn.out[sent:]
        if conn.out:
            return  # WRITING: the loop sends the rest when the socket takes it
        now = time.monotonic()
        if conn.keep_alive:
            self._wait_for_request(conn, now)
            return
        try:  # half-close, then read what the client still sends until its FIN (no RST on its data)
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.buf = bytearray()
        self._set_state(conn, LINGER, now + self.limits.request_timeout)
