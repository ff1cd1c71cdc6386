"""A front for the moto S3 server that refuses the credentials on demand, as S3 refuses a revoked
key: every request answered ``403 InvalidAccessKeyId`` while :attr:`RefusingProxy.refusing` is set,
forwarded to moto otherwise. The outage tests turn it on mid-run and off again.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

REFUSAL = (b"<Error><Code>InvalidAccessKeyId</Code><Message>The AWS Access Key Id you provided does "
           b"not exist in our records.</Message></Error>")


class RefusingProxy(ThreadingHTTPServer):
    """Forwards to the S3 server; answers 403 ``InvalidAccessKeyId`` while :attr:`refusing`, and
    counts the refusals (:attr:`refused`)."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream = urlsplit(upstream).netloc
        self.refusing = False
        self.refused = 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RefusingProxy

    def log_message(self, *_: object) -> None:
        pass

    def _forward(self, body: bytes | None) -> tuple[int, bytes, list[tuple[str, str]]]:
        conn = http.client.HTTPConnection(self.server.upstream, timeout=30)
        try:
            conn.request(self.command, self.path, body=body,
                         headers={k: v for k, v in self.headers.items() if k.lower() != "connection"})
            response = conn.getresponse()
            headers = [(k, v) for k, v in response.getheaders()
                       if k.lower() not in ("connection", "transfer-encoding", "content-length")]
            return response.status, response.read(), headers
        finally:
            conn.close()

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if self.server.refusing:
            with self.server.lock:
                self.server.refused += 1
            status, data, headers = 403, REFUSAL, [("Content-Type", "application/xml")]
        else:
            status, data, headers = self._forward(body)
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST = _answer


@contextmanager
def refusing_proxy(upstream: str) -> Iterator[RefusingProxy]:
    """A :class:`RefusingProxy` in front of ``upstream``, serving for the block."""
    proxy = RefusingProxy(upstream)
    thread = threading.Thread(target=proxy.serve_forever, name="refusing-proxy", daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join(timeout=10)
