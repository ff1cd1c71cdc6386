"""The blocking GET pool of the S3 fast path, against a real local HTTP server."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from epochfs.sidecar.remote.httpget import GetPool, HTTPStatusError, usable_recv_buffer

BODY = bytes(range(256)) * 4096  # 1 MiB


class _Server:
    def __init__(self) -> None:
        self.connections: list[str] = []
        self.stall = threading.Event()
        self.release = threading.Event()
        self.closed = threading.Semaphore(0)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                owner.connections.append(f"{self.client_address}")

            def do_GET(self) -> None:
                if self.path.startswith("/missing"):
                    body = b"<Error><Code>NoSuchKey</Code></Error>"
                    self.send_response(404)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                close = self.path.startswith("/close")
                if self.path.startswith("/drop"):
                    self.close_connection = True  # closed after the response, without saying so
                self.send_response(200)
                self.send_header("Content-Length", str(len(BODY)))
                self.send_header("ETag", '"abc"')
                if close:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                if self.path.startswith("/stall"):
                    self.wfile.write(BODY[:1000])
                    self.wfile.flush()
                    owner.stall.set()
                    owner.release.wait(30)
                    self.close_connection = True
                    return
                self.wfile.write(BODY)

        class Server(ThreadingHTTPServer):
            def shutdown_request(self, request: object) -> None:
                super().shutdown_request(request)  # type: ignore[arg-type]
                owner.closed.release()

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server()
    try:
        yield s
    finally:
        s.close()


def read_all(pool: GetPool, url: str) -> bytes:
    resp = pool.get(url)
    buf = memoryview(bytearray(300_000))
    out = bytearray()
    try:
        while n := resp.readinto(buf):
            out += buf[:n]
    finally:
        resp.close()
    assert resp.size == len(BODY) and resp.etag == '"abc"'
    return bytes(out)


def test_bodies_are_read_whole_over_one_kept_alive_connection(server: _Server) -> None:
    pool = GetPool(connect_timeout=5, read_timeout=5)
    try:
        for i in range(3):
            assert read_all(pool, f"{server.url}/bkt/k{i}?X-Amz-Signature=s") == BODY
    finally:
        pool.close()
    assert len(server.connections) == 1, "the connection is reused"


def test_a_connection_the_server_closed_is_replaced_not_failed(server: _Server) -> None:
    pool = GetPool(connect_timeout=5, read_timeout=5)
    try:
        assert read_all(pool, f"{server.url}/close/a") == BODY  # "Connection: close"
        assert server.closed.acquire(timeout=10)
        assert read_all(pool, f"{server.url}/drop/b") == BODY  # closed while idle in the pool
        assert server.closed.acquire(timeout=10)
        assert read_all(pool, f"{server.url}/c") == BODY
    finally:
        pool.close()
    assert len(server.connections) == 3


def test_an_error_status_carries_the_error_document(server: _Server) -> None:
    pool = GetPool(connect_timeout=5, read_timeout=5)
    try:
        with pytest.raises(HTTPStatusError) as info:
            pool.get(f"{server.url}/missing/x?X-Amz-Signature=secret")
        assert info.value.status == 404
        assert b"NoSuchKey" in info.value.body
        assert "secret" not in str(info.value)
        assert read_all(pool, f"{server.url}/after") == BODY, "the pool still works"
    finally:
        pool.close()


def test_close_wakes_a_read_blocked_on_a_stalled_body(server: _Server) -> None:
    pool = GetPool(connect_timeout=5, read_timeout=30)
    resp = pool.get(f"{server.url}/stall/x")
    result: list[object] = []

    def reader() -> None:
        buf = memoryview(bytearray(len(BODY)))
        try:
            result.append(resp.readinto(buf))
        except Exception as e:  # either an early end or an error is fine: not a 30 s wait
            result.append(e)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    assert server.stall.wait(10)
    started = time.monotonic()
    pool.close()
    t.join(timeout=5)
    assert not t.is_alive(), "close() ended the blocked read"
    assert time.monotonic() - started < 5
    assert result and result[0] != len(BODY)
    with pytest.raises(ConnectionAbortedError):
        pool.get(f"{server.url}/after-close")


def test_a_silent_server_times_out(server: _Server) -> None:
    pool = GetPool(connect_timeout=5, read_timeout=0.5)
    try:
        resp = pool.get(f"{server.url}/stall/y")
        buf = memoryview(bytearray(len(BODY)))
        with pytest.raises(TimeoutError):
            resp.readinto(buf)
        resp.close()
    finally:
        pool.close()


def test_https_with_a_ca_bundle(server: _Server, tmp_path: Path) -> None:
    """The TLS path: the certificate is checked against ``cafile`` (AWS_CA_BUNDLE in the sampler)."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server.httpd.socket = context.wrap_socket(server.httpd.socket, server_side=True)
    url = server.url.replace("http://", "https://")
    pool = GetPool(connect_timeout=5, read_timeout=5, cafile=str(cert))
    try:
        assert read_all(pool, f"{url}/bkt/a") == BODY
        assert read_all(pool, f"{url}/bkt/b") == BODY
    finally:
        pool.close()
    assert len(server.connections) == 1
    untrusted = GetPool(connect_timeout=5, read_timeout=5)
    try:
        with pytest.raises(ssl.SSLCertVerificationError):
            untrusted.get(f"{url}/bkt/c")
    finally:
        untrusted.close()


def test_a_large_receive_buffer_only_when_the_kernel_grants_it(server: _Server) -> None:
    with open("/proc/sys/net/core/rmem_max") as f:
        rmem_max = int(f.read())
    assert usable_recv_buffer(rmem_max + 1) == 0, "less than asked for: keep autotuning"
    assert usable_recv_buffer(0) == 0
    wanted = min(rmem_max, 1 << 20)
    assert usable_recv_buffer(wanted) == wanted
    pool = GetPool(connect_timeout=5, read_timeout=5, recv_buffer=wanted)
    try:
        resp = pool.get(f"{server.url}/bkt/a")
        sock = resp._conn.sock  # type: ignore[union-attr]
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= wanted
        resp.close()
    finally:
        pool.close()


def test_errors_of_the_fast_path_are_classified() -> None:
    """What http.client and ssl raise on the fast path: retried, except a certificate problem."""
    import http.client

    from epochfs.sidecar.download import is_transient, is_unavailable

    assert is_transient(http.client.BadStatusLine("garbage"))
    assert is_transient(http.client.IncompleteRead(b"", 10))
    assert is_transient(ssl.SSLEOFError(8, "EOF occurred in violation of protocol"))
    assert is_transient(http.client.RemoteDisconnected("closed")) and is_unavailable(
        http.client.RemoteDisconnected("closed"))
    assert is_transient(TimeoutError("timed out")) and is_unavailable(TimeoutError("timed out"))
    assert not is_transient(ssl.SSLCertVerificationError(1, "certificate verify failed"))
    assert not is_transient(FileNotFoundError("k: HTTP 404 NoSuchKey"))



@pytest.mark.parametrize("when", ["before it is made", "before it connects"])
def test_a_close_while_a_connection_is_made_leaves_no_request_waiting(
        server: _Server, monkeypatch: pytest.MonkeyPatch, when: str) -> None:
    """close() racing a thread that makes a fresh connection (the sampler's LIST-ahead thread at a
    stop): a connection made after close() emptied the pool, or put in the pool but not yet
    connected, had no socket for close() to shut down; its GET must fail at once, not go to the
    server and wait there (on a stalled body: until the read timeout)."""
    from epochfs.sidecar.remote import httpget

    pool = GetPool(connect_timeout=5, read_timeout=30)
    made = httpget.new_connection

    def racing(*args: object, **kwargs: object) -> object:
        if when == "before it is made":
            pool.close()
            return made(*args, **kwargs)  # type: ignore[arg-type]
        conn = made(*args, **kwargs)  # type: ignore[arg-type]
        connect = conn.connect

        def late() -> None:
            pool.close()
            connect()

        conn.connect = late  # type: ignore[method-assign]
        return conn

    monkeypatch.setattr(httpget, "new_connection", racing)
    try:
        with pytest.raises(ConnectionAbortedError):
            resp = pool.get(f"{server.url}/stall/x")
            resp.close()  # reached only when the GET went out after the close
    finally:
        pool.close()
    if when == "before it is made":
        assert server.connections == [], "no connection was made after the pool was closed"
    else:  # connected, then closed unused: the server's handler ends at the EOF
        assert server.closed.acquire(timeout=10)
        assert len(server.connections) == 1
    assert not server.stall.is_set(), "no GET reached the server after the pool was closed"
