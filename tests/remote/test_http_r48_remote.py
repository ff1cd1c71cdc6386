"""The ``http(s)://`` remote (an index of keys served over HTTP) against a real local HTTP server
with the habits of the servers users put behind it: a signed query every request must carry,
HEADs without a length, servers that ignore ``Range``, gzip negotiated or stored, opaque 32-hex
ETags, an index saved with a BOM, a missing index, nothing listening. Every request is recorded,
so a test sees what was asked; downloads go through the real :class:`Downloader` into a real
:class:`Store`.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from common import serving_http
from store_helpers import sid_of

from epochfs.sidecar.download import Downloader, RetryPolicy
from epochfs.sidecar.remote import RemoteError, open_remote
from epochfs.sidecar.remote.base import Remote
from epochfs.sidecar.remote.errors import may_answer_later
from epochfs.sidecar.remote.refusal import refusal_cause
from epochfs.sidecar.store import Candidate, Store


@dataclass
class Site:
    """What the server serves and how. ``objects``: path (unquoted, from the root) to body."""

    objects: dict[str, bytes] = field(default_factory=dict)
    token: str | None = None
    """A query every request must carry (``?token=...``); without it: 403."""
    head_length: bool = True
    """HEAD answers with Content-Length (False: a server that says nothing of the size)."""
    head_zero: bool = False
    """HEAD answers ``Content-Length: 0`` whatever the size (a proxy that drops HEAD lengths)."""
    ranges: bool = True
    """GET honours ``Range: bytes=a-b`` (206 with Content-Range)."""
    chunked: bool = False
    """A GET without Range is sent chunked, with no Content-Length."""
    gzip: str = ""
    """``negotiate``: bodies gzipped when the client accepts gzip (nginx ``gzip on``);
    ``stored``: bodies are gzip bytes served with ``Content-Encoding: gzip`` whatever is asked."""
    opaque_etag: bool = False
    """A 32-hex ETag that is not the body's md5 (an encrypted store behind a CDN)."""
    seen: list[tuple[str, str, str]] = field(default_factory=list)
    """(method, path with query as sent, Accept-Encoding) of every request."""


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _answer(self, head: bool) -> None:
            accept = self.headers.get("Accept-Encoding", "")
            site.seen.append((self.command, self.path, accept))
            parts = urlsplit(self.path)
            if site.token is not None and parts.query != f"token={site.token}":
                return self._status(403)
            body = site.objects.get(unquote(parts.path))
            if body is None:
                return self._status(404)
            encoding = ""
            if site.gzip == "stored" or (site.gzip == "negotiate" and "gzip" in accept):
                encoding = "gzip"
                body = body if site.gzip == "stored" else gzip.compress(body, mtime=0)
            wanted = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
            status, first, last = 200, 0, len(body) - 1
            if wanted and site.ranges:
                first, last = int(wanted[1]), min(int(wanted[2]), len(body) - 1)
                if first >= len(body):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(body)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
            part = body[first:last + 1]
            self.send_response(status)
            if encoding:
                self.send_header("Content-Encoding", encoding)
            salt = b"kms" if site.opaque_etag else b""
            self.send_header("ETag", f'"{hashlib.md5(salt + body).hexdigest()}"')
            if status == 206:
                self.send_header("Content-Range", f"bytes {first}-{last}/{len(body)}")
            if head and not site.head_length:
                self.end_headers()
                return
            if head and site.head_zero:
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if not head and site.chunked and status == 200:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(part), part) if part else b"0\r\n\r\n")
                return
            self.send_header("Content-Length", str(len(part)))
            self.end_headers()
            if not head:
                self.wfile.write(part)

        def _status(self, status: int) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/html")
            page = b"<html><body>no</body></html>\n"
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(page)

        def do_GET(self) -> None:
            self._answer(head=False)

        def do_HEAD(self) -> None:
            self._answer(head=True)

    return Handler


def serving(site: Site) -> contextlib.AbstractContextManager[str]:
    """``site`` served on a free local port: its URL (``http://127.0.0.1:PORT``)."""
    return serving_http(_handler(site))


def _listed(remote: Remote) -> list[tuple[str, int]]:
    return [(str(o.key), o.size) for o in remote.list()]


def _fetch(tmp_path: Path, remote: Remote, key: str) -> tuple[str | None, bytes | None]:
    """(the download's error, the admitted body) of ``key`` as listed, by the real downloader."""
    listed = {str(o.key): o for o in remote.list()}[key]
    with contextlib.closing(Store(tmp_path / "cache", create=True)) as store:
        dl = Downloader(store=store, remote=remote, stop=threading.Event(),
                        retry=RetryPolicy(attempts=1, base=0.0, cap=0.0))
        result = dl.fetch(Candidate(key, sid_of(key), listed.size, listed.version))
        if result.admission is None:
            return result.error, None
        body = result.admission.temp.read_bytes()
        result.admission.temp.unlink()
        return result.error, body


# ---------------------------------------------------------------- 1. a base URL with a query
def test_a_base_url_with_a_query_sends_it_with_each_request_after_the_path() -> None:
    site = Site({"/base/index.txt": b"a b.txt\nc.txt\t3\n", "/base/a b.txt": b"AB", "/base/c.txt": b"CCC"},
                token="abc")
    with serving(site) as url:
        remote = open_remote(f"{url}/base?token=abc")
        try:
            assert _listed(remote) == [("a b.txt", 2), ("c.txt", 3)]
            reader = remote.open("a b.txt")
            try:
                assert reader.read(10) == b"AB"
            finally:
                reader.close()
            assert remote.read_range("c.txt", 1, 2) == b"CC"
        finally:
            remote.close()
    paths = {path for _, path, _ in site.seen}
    assert paths == {"/base/index.txt?token=abc", "/base/a%20b.txt?token=abc", "/base/c.txt?token=abc"}


# ---------------------------------------------------------------- 2. a key whose object is missing
def test_a_key_without_a_size_whose_object_is_missing_is_passed_over_and_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    site = Site({"/index.txt": b"a.txt\nmissing.txt\nb.txt\n", "/a.txt": b"A", "/b.txt": b"BB"})
    with serving(site) as url, caplog.at_level(logging.WARNING, logger="epochfs.remote"):
        remote = open_remote(url)
        try:
            assert _listed(remote) == [("a.txt", 1), ("b.txt", 2)]
        finally:
            remote.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"{url}/index.txt line 2: missing.txt: not found (HTTP 404)"), lines
    assert lines[1] == f"{url}/index.txt: listed without 1 line(s) whose object is not found (first: line 2)"


# ---------------------------------------------------------------- 3. a size the server does not say
@pytest.mark.parametrize("server", [{"head_length": False, "chunked": True}, {"head_zero": True}],
                         ids=["no-length", "length-0"])
def test_a_size_that_head_does_not_say_is_learned_from_a_ranged_get(tmp_path: Path,
                                                                    server: dict[str, bool]) -> None:
    """A HEAD without a length (a chunked server), or one that says 0 for every object (a proxy
    that drops HEAD lengths: it listed 1,100 bytes as 0, and every fetch was refused "body longer
    than the listed 0 bytes"): the ranged GET says the size, an empty object's 416 says 0."""
    site = Site({"/index.txt": b"a.bin\nempty.bin\n", "/a.bin": b"x" * 5000, "/empty.bin": b""},
                head_length=server.get("head_length", True), chunked=server.get("chunked", False),
                head_zero=server.get("head_zero", False))
    with serving(site) as url:
        remote = open_remote(url)
        try:
            assert _listed(remote) == [("a.bin", 5000), ("empty.bin", 0)]
            assert _fetch(tmp_path, remote, "a.bin") == (None, b"x" * 5000)
        finally:
            remote.close()


def test_a_size_no_answer_says_is_passed_over_not_listed_as_zero(caplog: pytest.LogCaptureFixture) -> None:
    site = Site({"/index.txt": b"a.bin\nb.bin\t2\n", "/a.bin": b"x" * 5000, "/b.bin": b"yy"},
                head_length=False, chunked=True, ranges=False)
    with serving(site) as url, caplog.at_level(logging.WARNING, logger="epochfs.remote"):
        remote = open_remote(url)
        try:
            assert _listed(remote) == [("b.bin", 2)]
        finally:
            remote.close()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith(f"{url}/index.txt line 1: a.bin: the server does not say its size"), lines
    assert lines[1] == (f"{url}/index.txt: listed without 1 line(s) whose size the server does not say "
                        "(first: line 1)")


# ---------------------------------------------------------------- 4. opaque ETags
def test_a_32_hex_etag_that_is_not_the_md5_does_not_refuse_the_body(tmp_path: Path) -> None:
    site = Site({"/index.txt": b"s.bin\n", "/s.bin": b"\x07" * 1000}, opaque_etag=True)
    with serving(site) as url:
        remote = open_remote(url)
        try:
            assert _fetch(tmp_path, remote, "s.bin") == (None, b"\x07" * 1000)
        finally:
            remote.close()


# ---------------------------------------------------------------- 5. gzip: the stored bytes
@pytest.mark.parametrize("mode", ["negotiate", "stored"])
def test_a_body_is_fetched_as_stored_never_decompressed(tmp_path: Path, mode: str) -> None:
    raw = b'{"i": 1, "pad": "' + b"x" * 3000 + b'"}'
    stored = gzip.compress(raw, mtime=0) if mode == "stored" else raw
    site = Site({"/index.txt": b"s.json\n", "/s.json": stored}, gzip=mode)
    if mode == "stored":
        site.objects["/index.txt"] = b"s.json\t%d\n" % len(stored)
    with serving(site) as url:
        site.gzip = ""  # the index itself comes plain
        remote = open_remote(url)
        try:
            assert _listed(remote) == [("s.json", len(stored))]
            site.gzip = mode
            assert _fetch(tmp_path, remote, "s.json") == (None, stored)
        finally:
            remote.close()
    assert {accept for method, path, accept in site.seen if path == "/s.json"} == {"identity"}


def test_an_index_stored_gzipped_is_read_gunzipped() -> None:
    site = Site({"/index.txt": gzip.compress(b"a.txt\t1\n", mtime=0), "/a.txt": b"A"}, gzip="stored")
    with serving(site) as url:
        remote = open_remote(url)
        try:
            remote.probe()
            assert _listed(remote) == [("a.txt", 1)]
        finally:
            remote.close()


# ---------------------------------------------------------------- 6. a local index
@pytest.mark.parametrize("form", ["path", "file-url"])
def test_a_local_key_list_is_read_for_an_http_remote(tmp_path: Path, form: str) -> None:
    index = tmp_path / "keys.txt"
    index.write_bytes(b"a.txt\t1\nb.txt\n")
    site = Site({"/a.txt": b"A", "/b.txt": b"BB"})
    with serving(site) as url:
        remote = open_remote(url, index_url=str(index) if form == "path" else index.as_uri())
        try:
            remote.probe()
            assert _listed(remote) == [("a.txt", 1), ("b.txt", 2)]
        finally:
            remote.close()


# ---------------------------------------------------------------- 7. refused at the start
def test_a_missing_index_is_refused_at_the_probe() -> None:
    with serving(Site({"/a.txt": b"A"})) as url:
        remote = open_remote(url)
        try:
            with pytest.raises(RemoteError) as refused:
                remote.probe()
        finally:
            remote.close()
    assert f"{url}/index.txt" in str(refused.value)
    assert not may_answer_later(refused.value)
    assert refusal_cause(refused.value) == "missing"


def test_a_forbidden_index_is_refused_at_the_probe() -> None:
    with serving(Site({"/index.txt": b"a.txt\n"}, token="abc")) as url:
        remote = open_remote(url)
        try:
            with pytest.raises(RemoteError) as refused:
                remote.probe()
        finally:
            remote.close()
    assert not may_answer_later(refused.value)
    assert refusal_cause(refused.value) == "access"


def test_an_index_on_a_host_where_nothing_listens_may_answer_later() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        remote = open_remote(f"http://127.0.0.1:{port}/base")
        try:
            with pytest.raises(RemoteError) as refused:
                remote.probe()
        finally:
            remote.close()
    assert may_answer_later(refused.value)


def test_a_readable_index_passes_the_probe() -> None:
    with serving(Site({"/index.txt": b"a.txt\t1\n"})) as url:
        remote = open_remote(url)
        try:
            remote.probe()
        finally:
            remote.close()


def _sample_exit(remote: str, cache: Path) -> tuple[int, str]:
    """``epochfs sample --remote REMOTE`` run to its end: (its exit status, its last stderr line).
    A sampler still running after a minute (its listing retried for ever) is killed with every
    process it started."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    proc = subprocess.Popen([str(Path(sys.executable).with_name("epochfs")), "sample", "--remote", remote,
                             "--cache", str(cache)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert "Traceback" not in err
    return proc.returncode, err.strip().splitlines()[-1]


def test_the_sampler_refuses_a_remote_without_its_index_at_the_start(tmp_path: Path) -> None:
    with serving(Site({"/data/a.txt": b"A"})) as url:
        status, line = _sample_exit(f"{url}/data", tmp_path / "cache")
    assert status == 2, line
    assert line == (f"epochfs sample: --remote: cannot read the index {url}/data/index.txt: "
                    "HTTP 404 Not Found; check --remote")


def test_the_sampler_exits_to_be_started_again_when_nothing_listens(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        status, line = _sample_exit(f"http://127.0.0.1:{port}/data", tmp_path / "cache")
    assert status == 75, line
    assert line == (f"epochfs sample: the remote cannot be reached now: cannot read the index "
                    f"http://127.0.0.1:{port}/data/index.txt: connection refused")


# ---------------------------------------------------------------- 8. a BOM
def test_an_index_saved_with_a_bom_keeps_its_first_key() -> None:
    site = Site({"/index.txt": b"\xef\xbb\xbfa.txt\t1\nb.txt\t2\n"})
    with serving(site) as url:
        remote = open_remote(url)
        try:
            assert _listed(remote) == [("a.txt", 1), ("b.txt", 2)]
        finally:
            remote.close()
