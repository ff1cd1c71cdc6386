"""Answers that are not the store's, against each backend's real server behind a front that
answers for it (tests/remote/answering_front.py) or garbles one answer (:class:`GarblingFront`):

- an endpoint that answers a web page (``200 text/html``: a web console on the store's port, a
  captive portal, a catch-all host) is a setting to fix at the start on every backend, named
  (endpoint and Content-Type), not an outage to start again for ever (s3:// exited 75), and an
  ``http(s)://`` index that is a web page is refused, not read as keys;
- a listing page of the store's own format that does not parse (cut short) is worth another try
  on every backend;
- a ``gs://`` range answered short (a 72-byte page for a 3,000-byte object) is one failure, not a
  part read to ask the rest of (one GET, where it cost one GET per 72 bytes);
- a ``gs://`` answer aiohttp could not parse (a garbled status line) is retried and then read,
  while a server's own 400 stays denied.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from answering_front import ANSWERS, Answer, AnsweringFront
from proxy_helpers import _Base, _Handler
from test_conformance import (  # noqa: F401  (fixtures the backends' builders ask for by name)
    BACKENDS,
    OBJECTS,
    Backend,
    _fronted,
    _read_all,
    azure_env,
    azurite,
    gcs_server,
    http_server,
)

from epochfs.sidecar.download import failure_kind
from epochfs.sidecar.remote import Changed, Denied, Remote, RemoteError, Transient
from epochfs.sidecar.remote.errors import _chain, may_answer_later
from epochfs.sidecar.remote.notstore import NotTheStore

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
PAGE = b"<!doctype html><html><head><title>Con</title></head><body></body></html>"
"""A web console's page, 72 bytes."""
assert len(PAGE) == 72
ANSWERS.update({
    "html-200": Answer(200, "OK", (("Content-Type", "text/html; charset=utf-8"),), PAGE),
    "index-tags": Answer(200, "OK", (("Content-Type", "text/plain"),), b"\n  <html><body>\n<p>keys</p>\n"),
    "s3-cut-page": Answer(200, "OK", (("Content-Type", "application/xml"),),
                          b'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns='
                          b'"http://s3.amazonaws.com/doc/2006-03-01/"><Contents><Key>da'),
    "gcs-cut-page": Answer(200, "OK", (("Content-Type", "application/json; charset=UTF-8"),),
                           b'{"kind": "storage#objects", "items": [{"na'),
    "azure-cut-page": Answer(200, "OK", (("Content-Type", "application/xml"),),
                             b'<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint='
                             b'"x"><Blobs><Blob><Na'),
    "http-400": Answer(400, "Bad Request", (("Content-Type", "text/plain"),), b"bad request\n"),
    "gcs-400": Answer(400, "Bad Request", (("Content-Type", "application/json; charset=UTF-8"),),
                      b'{"error": {"code": 400, "message": "Invalid argument.", "errors": [{"message": '
                      b'"Invalid argument.", "domain": "global", "reason": "invalid"}]}}'),
})
GARBAGE = b"\x16\x03\x01garbage-not-http\r\n\r\n"
"""What a TLS-intercepting proxy or a half-open load balancer sends once: no HTTP status line."""


def _first_listing(remote: Remote) -> None:
    """The start's first listing request: the probe (gs://, az://, http(s)://), then the listing
    (s3:// lists its first page at the start)."""
    remote.probe()
    list(remote.list())


@pytest.mark.parametrize("name", ["s3", "gs", "az", "http"])
def test_an_endpoint_that_answers_a_web_page_is_a_setting_to_fix_named(
        name: str, request: pytest.FixtureRequest) -> None:
    """Every request answered ``200 text/html``: the start's listing fails as a setting to fix
    (exit 2: not ``may_answer_later``), its message names the endpoint and the Content-Type,
    and the failure under it is retried where met mid-run (:class:`NotTheStore` is transient)."""
    with _fronted(name, request) as (remote, front):
        front.answer("html-200")
        with pytest.raises(RemoteError) as start:
            _first_listing(remote)
    assert not may_answer_later(start.value), repr(start.value)
    [foreign] = [link for link in _chain(start.value) if isinstance(link, NotTheStore)]
    assert foreign.retry
    said = str(start.value)
    if name == "http":
        assert "answered an HTML page (Content-Type text/html), not an index of keys" in said, said
    else:
        assert f"the endpoint {front.url} answered 200 text/html" in said, said
        assert "is --endpoint-url the store's API port?" in said, said


def test_an_http_index_whose_first_line_is_a_tag_is_refused(request: pytest.FixtureRequest) -> None:
    """An index sent as text/plain whose first non-blank line opens with ``<`` (a page sent with
    the wrong type) is refused at the start, never listed as keys."""
    with _fronted("http", request) as (remote, front):
        front.answer("index-tags", only=lambda _method, path: path.endswith("/index.txt"))
        with pytest.raises(RemoteError, match="answered an HTML page") as start:
            remote.probe()
        with pytest.raises(RemoteError, match="answered an HTML page"):
            list(remote.list())
    assert not may_answer_later(start.value)


@pytest.mark.parametrize(("name", "answer"), [("s3", "s3-cut-page"), ("gs", "gcs-cut-page"),
                                              ("az", "azure-cut-page")])
def test_a_listing_page_of_the_stores_format_cut_short_is_worth_another_try(
        name: str, answer: str, request: pytest.FixtureRequest) -> None:
    """A page in the store's own format that does not parse: the start may be tried again
    (exit 75), and the listing reads once the store answers whole again."""
    with _fronted(name, request) as (remote, front):
        front.answer(answer)
        with pytest.raises(RemoteError) as start:
            _first_listing(remote)
        front.pass_all()
        assert {str(o.key) for o in remote.list()} == set(OBJECTS)
    assert may_answer_later(start.value), repr(start.value)
    assert not any(isinstance(link, NotTheStore) for link in _chain(start.value))


def _object_gets(method: str, path: str) -> bool:
    return method == "GET" and "alt=media" in path


def test_a_gcs_range_answered_short_is_one_failure_not_a_part_to_continue(
        request: pytest.FixtureRequest) -> None:
    """Every body GET answered with a 72-byte page for a 3,000-byte object: one GET, failed as
    :class:`Changed` (as S3 fails the same answer), not 42 GETs each taken as 72 bytes of it."""
    key = "top.bin"
    assert len(OBJECTS[key]) == 3000
    with _fronted("gs", request) as (remote, front):
        front.answer("html-200", only=_object_gets)
        with pytest.raises(Changed, match="72 bytes answered for the 3000 asked"):
            _read_all(remote, key)
        assert front.answered == 1, f"{front.answered} GETs of one object"
        front.pass_all()
        assert _read_all(remote, key) == OBJECTS[key]


@dataclass
class GarblingFront(_Base):
    """Passes every request on to ``upstream``, but answers the next :attr:`left` requests that
    ``only(method, path)`` selects with :data:`GARBAGE` and closes the connection."""

    upstream: str
    only: Callable[[str, str], bool]
    left: int = 0
    garbled: int = 0
    _count: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        owner = self
        parts = urlsplit(self.upstream)

        class Handler(_Handler):
            def _front(self) -> None:
                if not owner.take(self.command, self.path):
                    self.pass_on(parts.hostname or "127.0.0.1", int(parts.port or 80), self.path)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                self.wfile.write(GARBAGE)
                self.wfile.flush()
                self.close_connection = True

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _front

        Handler.owner = owner
        self._serve(Handler, None)

    def take(self, method: str, path: str) -> bool:
        with self._count:
            if self.left <= 0 or not self.only(method, path):
                return False
            self.left -= 1
            self.garbled += 1
            return True


@contextmanager
def _garbled(name: str, request: pytest.FixtureRequest,
             only: Callable[[str, str], bool]) -> Iterator[tuple[Remote, GarblingFront]]:
    backend = BACKENDS[name](request)
    assert backend.endpoint_url is not None
    parts = urlsplit(backend.endpoint_url)
    front = GarblingFront(upstream=f"{parts.scheme}://{parts.netloc}", only=only)
    remote = Backend(name, backend.url, front.url + parts.path).open()
    try:
        yield remote, front
    finally:
        remote.close()
        front.close()


def test_a_gcs_answer_that_cannot_be_parsed_is_retried_not_denied(request: pytest.FixtureRequest) -> None:
    """The first body GET answered with no HTTP status line (aiohttp: ``400, message='Bad status
    line'``, a status no server sent): retried (Transient, as on S3 and Azure), and the next try
    reads the object; it was Denied, the object skipped at once."""
    key = "top.bin"
    with _garbled("gs", request, _object_gets) as (remote, front):
        front.left = 1
        with pytest.raises(Exception) as first:
            _read_all(remote, key)
        assert front.garbled == 1
        assert _read_all(remote, key) == OBJECTS[key]
    assert "Bad status line" in str(first.value) or "Bad status line" in repr(first.value.__cause__)
    assert failure_kind(first.value) is Transient, repr(first.value)


@pytest.mark.parametrize(("name", "answer"), [("gs", "gcs-400"), ("http", "http-400")])
def test_a_servers_own_400_stays_denied(name: str, answer: str, request: pytest.FixtureRequest) -> None:
    """A 400 the server sent (gcsfs's error, aiohttp's ``raise_for_status``) is a refusal of the
    request as made: denied, skipped at once, as before."""
    with _fronted(name, request) as (remote, front):
        front.answer(answer, only=lambda method, _path: method == "GET")
        with pytest.raises(Denied) as read:
            _read_all(remote, "top.bin")
    assert failure_kind(read.value) is Denied


@pytest.mark.parametrize("name", ["s3", "http"])
def test_epochfs_sample_exits_2_naming_a_web_page_where_the_store_was_expected(
        name: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The real ``epochfs sample`` against a web page: exit 2 with the line that says so (s3://
    exited 75, "the remote cannot be reached now", and was started again for ever; http:// served
    the page back as a sample)."""
    backend = BACKENDS[name](request)
    with AnsweringFront(upstream="http://127.0.0.1:9") as front:  # answers every request itself
        front.answer("html-200")
        flags = ["--remote", backend.url if name == "s3" else f"{front.url}/data"]
        if name == "s3":
            flags += ["--endpoint-url", front.url]
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}
        run = subprocess.run([EPOCHFS, "sample", "--cache", str(tmp_path / "cache"), "--capacity", "1Mi",
                              "--read-timeout", "10", *flags], capture_output=True, text=True,
                             timeout=120, env=env)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    [line] = [line for line in run.stderr.splitlines() if line.startswith("epochfs sample:")]
    assert "text/html" in line, line
