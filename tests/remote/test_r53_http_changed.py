"""An ``http(s)://`` index remote's object whose size differs from the index is Changed, at once.

The index says 5000 bytes; the server's answer says otherwise: a Content-Length of 4990, or a
chunked body that ends cleanly (its last chunk sent) after 4995 bytes. Both are what the object
is now, not a failed transfer: skipped at once with one GET each, as S3's are (docs/sampler.md,
"changed"), not retried ``--retries`` times as Transient. A body cut off by a dropped connection
(chunked, or short of its Content-Length) is a failed transfer: retried.

Run against a real HTTP server on a thread, which counts the GETs of each object, through the
index remote as the registry opens it and the real downloader. The server refuses HEAD (501), so
each open costs fsspec's size lookup (a GET whose body is not read) and the body's GET: what one
attempt costs is what the object of the listed size costs.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from store_helpers import sid_of

from epochfs.sidecar.download import Downloader, FetchResult, RetryPolicy
from epochfs.sidecar.remote import Remote
from epochfs.sidecar.remote.registry import open_remote
from epochfs.sidecar.store import Candidate, Store

LISTED = 5000
ATTEMPTS = 3
BODIES = {
    "length": b"l" * 4990,      # Content-Length: 4990, all of it sent
    "chunked": b"c" * 4995,     # chunked, ended by its last chunk
    "good": b"g" * LISTED,      # chunked, of the listed size
    "dropped": b"d" * LISTED,   # chunked, the connection closed after 2000 bytes
    "cut": b"x" * LISTED,       # Content-Length: 5000, the connection closed after 2000 bytes
}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.gets: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        name = self.path.removeprefix("/data/")
        if name == "index.txt":
            index = "".join(f"{key}\t{LISTED}\tv-{key}\n" for key in BODIES).encode()
            self._head(200, {"Content-Length": str(len(index))})
            self.wfile.write(index)
            return
        body = BODIES.get(name)
        if body is None:
            self._head(404, {"Content-Length": "0"})
            return
        with self.server.lock:
            self.server.gets[name] += 1
        if name in ("length", "cut"):
            self._head(200, {"Content-Length": str(len(body))})
            self.wfile.write(body if name == "length" else body[:2000])
        else:
            self._head(200, {"Transfer-Encoding": "chunked"})
            sent = body if name != "dropped" else body[:2000]
            for at in range(0, len(sent), 1000):
                piece = sent[at:at + 1000]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            if name != "dropped":
                self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        if name in ("dropped", "cut"):
            self.close_connection = True  # the body never completed: the connection ends

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()


@pytest.fixture
def server() -> Iterator[_Server]:
    served = _Server()
    thread = threading.Thread(target=served.serve_forever, name="r53-http", daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.shutdown()
        served.server_close()
        thread.join(timeout=10)


@pytest.fixture
def fetched(server: _Server, tmp_path: Path) -> Iterator[dict[str, FetchResult]]:
    """Every listed object fetched once through the real downloader (three attempts at most)."""
    remote: Remote = open_remote(f"http://127.0.0.1:{server.server_address[1]}/data", read_timeout=10)
    try:
        listed = {str(o.key): o for o in remote.list()}
        assert set(listed) == set(BODIES) and {o.size for o in listed.values()} == {LISTED}
        with contextlib.closing(Store(tmp_path / "cache", create=True)) as store:
            downloader = Downloader(store=store, remote=remote, stop=threading.Event(),
                                    retry=RetryPolicy(attempts=ATTEMPTS, base=0.001, cap=0.001))
            yield {key: downloader.fetch(Candidate(key, sid_of(key), LISTED, o.version))
                   for key, o in listed.items()}
    finally:
        remote.close()


@pytest.mark.parametrize(("key", "said"), [("length", "size is 4990"), ("chunked", "size is 4995")])
def test_a_body_of_another_size_than_the_index_is_skipped_at_once_as_changed(
        fetched: dict[str, FetchResult], server: _Server, key: str, said: str) -> None:
    result = fetched[key]
    assert result.admission is None and result.error is not None
    assert result.error.startswith("Changed:") and said in result.error, result.error
    assert result.attempts == 1 and server.gets[key] == server.gets["good"]  # one open's GETs


def test_a_body_of_the_listed_size_is_admitted(fetched: dict[str, FetchResult], server: _Server) -> None:
    result = fetched["good"]
    assert result.admission is not None, result.error
    assert result.admission.temp.read_bytes() == BODIES["good"] and result.attempts == 1
    assert server.gets["good"] in (1, 2)  # the body's GET, after fsspec's size lookup's (HEAD refused)


@pytest.mark.parametrize("key", ["dropped", "cut"])
def test_a_body_cut_off_by_a_dropped_connection_is_retried(
        fetched: dict[str, FetchResult], server: _Server, key: str) -> None:
    result = fetched[key]
    assert result.admission is None and result.error is not None
    assert not result.error.removeprefix(f"gave up after {ATTEMPTS} attempts: ").startswith("Changed")
    assert result.attempts == ATTEMPTS and server.gets[key] == ATTEMPTS * server.gets["good"], result.error
