"""An ``http(s)://`` index without sizes: one object the server refuses (403) or does not answer
(5xx) is passed over and counted, as a 404 is, never blocking the whole dataset (the listing beside
the sampler tried the failed listing again for ever, the good keys never fetched); a key the
shared checks refuse for its shape (``..``) is never asked for (aiohttp resolved
``dots/../up.bin`` to ``up.bin``, and ``../../x`` would be asked outside the base URL), and is
counted under its reason; a line past the cap (no newline for megabytes) is dropped up to its
newline and counted. What is the server's (connection refused, every key unanswered) still
fails the listing.

A real HTTP server on a thread answers per key prefix; the index is one of its files.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from common import free_port

from epochfs.sidecar.listing.filter import CatalogReport, PageFilter
from epochfs.sidecar.remote import RemoteError, httpindex, open_remote
from epochfs.sidecar.remote.indexlines import MAX_LINE_BYTES, index_lines
from epochfs.sidecar.remote.ratefloor import SlowBody

BODY = b"0123456789"


class _Store(ThreadingHTTPServer):
    daemon_threads = True
    index = b""
    seen: Counter[tuple[str, str]]
    flaky_left = 0
    trickle = False
    """The index sent a byte at a time, five a second, until the client leaves."""
    lock: threading.Lock


class _Handler(BaseHTTPRequestHandler):
    """``/ds/index.txt``: the index; under ``/ds/``: ``forbid/`` 403, ``e500/`` 500, ``busy/`` 503,
    ``flaky/`` 503 to its first two requests then the body, anything else the body."""

    protocol_version = "HTTP/1.1"
    server: _Store

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _answer(self, head: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        with self.server.lock:
            self.server.seen[(self.command, path)] += 1
        if path == "/ds/index.txt" and self.server.trickle and not head:
            self.send_response(200)
            self.send_header("Content-Length", str(len(self.server.index)))
            self.end_headers()
            with contextlib.suppress(OSError):
                for i in range(len(self.server.index)):
                    self.wfile.write(self.server.index[i:i + 1])
                    self.wfile.flush()
                    time.sleep(0.2)
            return None
        if path == "/ds/index.txt":
            return self._send(200, self.server.index, head)
        key = path.removeprefix("/ds/")
        if key.startswith("forbid/"):
            return self._send(403, b"AccessDenied", head)
        if key.startswith("e500/"):
            return self._send(500, b"internal", head)
        if key.startswith("busy/"):
            return self._send(503, b"busy", head)
        if key.startswith("flaky/"):
            with self.server.lock:
                self.server.flaky_left -= 1
                busy = self.server.flaky_left >= 0
            if busy:
                return self._send(503, b"busy", head)
        return self._send(200, BODY, head, {"ETag": '"e1"'})

    def _send(self, status: int, body: bytes, head: bool, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(False)

    def do_HEAD(self) -> None:
        self._answer(True)


@pytest.fixture
def store() -> Iterator[_Store]:
    server = _Store(("127.0.0.1", 0), _Handler)
    server.seen = Counter()
    server.lock = threading.Lock()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(autouse=True)
def short_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pauses between a key's tries kept short (the rule, full jitter under a doubling bound,
    is the one every retry shares)."""
    monkeypatch.setattr(httpindex, "KEY_PAUSE", (0.01, 0.02), raising=False)


def _url(server: _Store) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/ds"


def test_refused_and_unanswered_keys_are_passed_over_and_counted(
        store: _Store, caplog: pytest.LogCaptureFixture) -> None:
    """403 and 500 (asked :data:`~.httpindex.KEY_TRIES` times) passed over, each counted; a key
    answered 503 once, then 200, listed; the keys before and after them listed."""
    store.index = b"plain/a.bin\nforbid/f.bin\ne500/e.bin\nflaky/g.bin\npct/A.bin\n"
    store.flaky_left = 2  # its HEAD and its GET of the first try
    caplog.set_level(logging.WARNING, logger="epochfs.remote")

    remote = open_remote(_url(store), read_timeout=10)
    try:
        listed = {str(o.key): o.size for o in remote.list()}
    finally:
        remote.close()

    assert listed == {"plain/a.bin": 10, "flaky/g.bin": 10, "pct/A.bin": 10}
    assert store.seen[("GET", "/ds/e500/e.bin")] == httpindex.KEY_TRIES
    said = caplog.text
    assert "listed without 1 line(s) whose object the server refuses (first: line 2)" in said
    assert "listed without 1 line(s) that the server did not answer" in said and "(first: line 3)" in said
    assert "forbid/f.bin: refused (HTTP 403" in said


def test_a_key_with_dot_segments_is_never_asked_for_and_is_counted_by_its_reason(store: _Store) -> None:
    """``dots/../up.bin`` and ``../../x.bin`` reach the shared checks as written, which count
    them as ``'..' component``; the server is asked for neither (``/ds/up.bin``, ``/x.bin``)."""
    store.index = b"dots/../up.bin\n../../x.bin\nplain/a.bin\n"

    remote = open_remote(_url(store), read_timeout=10)
    try:
        objects = list(remote.list())
    finally:
        remote.close()

    assert [str(o.key) for o in objects] == ["dots/../up.bin", "../../x.bin", "plain/a.bin"]
    asked = {path for (_method, path) in store.seen}
    assert asked == {"/ds/index.txt", "/ds/plain/a.bin"}, asked
    report = CatalogReport()
    out = PageFilter(report, seed=0, shard_index=0, shard_count=1, object_limit=1 << 30).page(objects, None)
    assert report.reasons == {"'..' component": 2}
    assert [row.key for row in out.rows] == ["plain/a.bin"]


def test_a_server_that_answers_no_key_fails_the_listing(store: _Store) -> None:
    """Every key 503 (a server down behind a load balancer): the listing fails after
    :data:`~.httpindex.UNANSWERED_RUN` keys in a row, rather than list an empty dataset whose
    keys the catalog would drop."""
    store.index = b"".join(b"busy/%d.bin\n" % i for i in range(httpindex.UNANSWERED_RUN + 4))

    remote = open_remote(_url(store), read_timeout=10)
    try:
        with pytest.raises(RemoteError, match=r"answered none of the last 8 keys .*HTTP 503"):
            list(remote.list())
    finally:
        remote.close()
    asked = {path for (method, path) in store.seen if method == "GET" and path != "/ds/index.txt"}
    assert len(asked) == httpindex.UNANSWERED_RUN


def test_a_server_that_refuses_every_key_fails_the_listing(store: _Store) -> None:
    """Every key 403 (an expired password, a proxy or a firewall refusing everything): the
    listing fails after :data:`~.httpindex.UNANSWERED_RUN` keys in a row, where passing each over
    listed an empty dataset and a relist dropped every key from the catalog."""
    store.index = b"".join(b"forbid/%d.bin\n" % i for i in range(httpindex.UNANSWERED_RUN + 4))

    remote = open_remote(_url(store), read_timeout=10)
    try:
        with pytest.raises(RemoteError, match=r"refused or answered none of the last 8 keys .*HTTP 403"):
            list(remote.list())
    finally:
        remote.close()
    asked = {path for (method, path) in store.seen if method == "HEAD" and path != "/ds/index.txt"}
    assert len(asked) == httpindex.UNANSWERED_RUN


def test_a_server_that_refuses_connections_fails_the_listing(tmp_path: Path) -> None:
    """The objects' server down (connection refused), the index read from a file: a listing
    failure, tried again, not every key passed over."""
    index = tmp_path / "index.txt"
    index.write_bytes(b"plain/a.bin\nplain/b.bin\n")
    remote = open_remote(f"http://127.0.0.1:{free_port()}/ds", index_url=str(index), read_timeout=10)
    try:
        with pytest.raises(RemoteError, match=r"cannot list .*plain/a\.bin: connection refused"):
            list(remote.list())
    finally:
        remote.close()


def test_a_line_past_the_cap_is_passed_over_and_counted(store: _Store,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """A line with no newline for megabytes (a gzip bomb of one byte, an endless line) was held
    whole and searched whole at every block: it is dropped past :data:`~.indexlines.MAX_LINE_BYTES`
    up to its newline, counted, and the lines around it listed."""
    store.index = (b"a.bin\t10\n" + b"x" * (3 * MAX_LINE_BYTES) + b"\nb.bin\t10\n"
                   + b"y" * (2 * MAX_LINE_BYTES))
    caplog.set_level(logging.WARNING, logger="epochfs.remote")
    remote = open_remote(_url(store), read_timeout=10)
    try:
        listed = [str(o.key) for o in remote.list()]
    finally:
        remote.close()
    assert listed == ["a.bin", "b.bin"]
    assert f"line 2: over {MAX_LINE_BYTES} bytes" in caplog.text
    assert "listed without 2 line(s) too long to be a key's (first: line 2)" in caplog.text


class _Blocks:
    """A file whose ``read`` answers the given blocks, one a call."""

    def __init__(self, blocks: list[bytes]) -> None:
        self.blocks = list(blocks)

    def read(self, _n: int) -> bytes:
        return self.blocks.pop(0) if self.blocks else b""


@pytest.mark.parametrize("cut", [1, 2, 3, 7, 4096])
def test_lines_are_the_same_however_the_blocks_fall(cut: int) -> None:
    text = b"one\ntwo\n\nthree" + b"\n" + b"z" * (MAX_LINE_BYTES + 1) + b"\nfour\n" + b"w" * MAX_LINE_BYTES
    blocks = [text[i:i + cut] for i in range(0, len(text), cut)]
    assert list(index_lines(_Blocks(blocks))) == [b"one", b"two", b"", b"three", None, b"four",
                                                  b"w" * MAX_LINE_BYTES]


def test_an_index_that_trickles_fails_the_listing_within_a_window(store: _Store) -> None:
    """An index sent at 5 bytes a second held the listing without a word (keys are handed on a
    thousand at a time; a read timeout is one of silence): its reads are held to the bodies' rate
    floor, and the listing fails (tried again, and said) within a window of the read timeout."""
    store.index = b"".join(b"k%04d.bin\t10\n" % i for i in range(2000))
    store.trickle = True
    remote = open_remote(_url(store), read_timeout=1)
    started = time.monotonic()
    try:
        with pytest.raises(SlowBody, match="stalled"):
            list(remote.list())
    finally:
        remote.close()
    assert time.monotonic() - started < 20
