"""A body whose length the server does not announce, against the listed size (review 38, finding 1).

A plain HTTP/1.0 server that sends no ``Content-Length`` (the body ends when it closes the
connection) stands behind the ``http://`` remote and its ``index.txt``, as a simple static host
or a chunked proxy does: the reader's size is then unknown and only the listing says how long the
body should be. The real :class:`Downloader` fetches into a real :class:`Store`:

- a body longer than the listed size is read no further than the listed size plus one byte and
  refused as :class:`Changed` at the first attempt (before, it streamed to its end onto the node
  volume, 16 MiB for a 1 KiB sample here, and was retried as Transient: the disk budget reserved
  1 KiB);
- a body of exactly the listed size is admitted (the last read finds its end);
- a shorter body stays Transient and is retried.

While it sends, the server looks at the store's temp folder before each block it writes, so the
largest temp file the download ever had is seen from outside the downloader.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from store_helpers import sid_of

from epochfs.sidecar.download import Downloader, RetryPolicy
from epochfs.sidecar.remote import open_remote
from epochfs.sidecar.remote.base import Remote
from epochfs.sidecar.store import Candidate, Store

CHUNK = 64 * 1024
LONG = 16 * 1024 * 1024
"""The body served for a 1 KiB listing: more than the loopback socket buffers and the HTTP
client's own hold, so a downloader that reads to the end must have written most of it while the
server is still sending."""

LISTED = {"long.bin": 1024, "exact.bin": 300_001, "short.bin": 4096}
BODIES = {"long.bin": LONG, "exact.bin": 300_001, "short.bin": 1000}


@dataclass
class _Seen:
    """The largest temp file the server saw in the store's tmp folder while it sent."""

    tmp_dir: Path
    largest_temp: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def look(self) -> None:
        sizes = []
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.tmp_dir):
                with contextlib.suppress(FileNotFoundError):
                    sizes.append(entry.stat().st_size)
        with self.lock:
            self.largest_temp = max([self.largest_temp, *sizes])


def _handler(seen: _Seen) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # no Content-Length: the body ends when the connection closes

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _head(self) -> str | None:
            name = self.path.lstrip("/")
            if name == "index.txt" or name in BODIES:
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()
                return name
            self.send_error(404)
            return None

        def do_HEAD(self) -> None:
            self._head()

        def do_GET(self) -> None:
            name = self._head()
            if name is None:
                return
            if name == "index.txt":
                self.wfile.write("".join(f"{k}\t{n}\tv1\n" for k, n in LISTED.items()).encode())
                return
            left = BODIES[name]
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                while left:
                    seen.look()
                    n = min(CHUNK, left)
                    self.wfile.write(b"x" * n)
                    left -= n
                self.wfile.flush()
            seen.look()

    return Handler


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with contextlib.closing(Store(tmp_path / "cache", create=True)) as s:
        yield s


@pytest.fixture
def served(store: Store) -> Iterator[tuple[Remote, _Seen]]:
    seen = _Seen(store.temp_path().parent)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(seen))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    remote = open_remote(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield remote, seen
    finally:
        remote.close()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _candidate(remote: Remote, key: str) -> Candidate:
    listed = {str(o.key): o for o in remote.list()}[key]
    assert listed.size == LISTED[key]
    return Candidate(key, sid_of(key), listed.size, listed.version)


def _downloader(store: Store, remote: Remote, attempts: int) -> Downloader:
    return Downloader(store=store, remote=remote, stop=threading.Event(),
                      retry=RetryPolicy(attempts=attempts, base=0.0, cap=0.0))


def test_a_body_longer_than_the_listing_is_refused_at_once_and_never_written_past_it(
        store: Store, served: tuple[Remote, _Seen]) -> None:
    remote, seen = served
    dl = _downloader(store, remote, attempts=3)
    result = dl.fetch(_candidate(remote, "long.bin"))
    assert result.admission is None
    assert result.error == "Changed: body longer than the listed 1024 bytes"
    assert result.attempts == 1
    assert seen.largest_temp <= LISTED["long.bin"]
    assert dl.active_temps() == [] and list(store.temp_path().parent.iterdir()) == []


def test_a_body_of_the_listed_size_without_a_length_is_admitted(
        store: Store, served: tuple[Remote, _Seen]) -> None:
    remote, _ = served
    result = _downloader(store, remote, attempts=1).fetch(_candidate(remote, "exact.bin"))
    assert result.error is None and result.admission is not None
    assert result.admission.size == LISTED["exact.bin"]
    assert result.admission.temp.read_bytes() == b"x" * LISTED["exact.bin"]
    result.admission.temp.unlink()


def test_a_shorter_body_stays_transient_and_is_retried(
        store: Store, served: tuple[Remote, _Seen]) -> None:
    remote, _ = served
    result = _downloader(store, remote, attempts=2).fetch(_candidate(remote, "short.bin"))
    assert result.admission is None
    assert result.error == "gave up after 2 attempts: Transient: got 1000 bytes, expected 4096"
    assert result.attempts == 2
