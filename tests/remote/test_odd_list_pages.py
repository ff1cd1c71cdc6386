"""A listing over an S3 endpoint whose ``ListObjectsV2`` pages are odd ends, complete or with a
clear error, in a bounded number of requests (sidecar/remote/s3.py, sidecar/listing/sources.py).

S3 sends empty pages that say more follows (a versioned bucket behind a run of delete markers);
some S3-compatible stores and proxies say a page is truncated and send no continuation token; a
broken one sends the same token again. Paging by ``StartAfter`` alone would ask the empty page
again for ever, reading "no token" as "the end" would report 1,000 of 1,500 keys complete, and
following the same token would list the same keys for ever. The endpoint here is a real HTTP
server answering crafted XML to the real :class:`S3Remote`; past a budget of requests it answers
500 and stops the listing, so a walk that would not end fails the test instead of hanging it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit
from xml.sax.saxutils import escape

import pytest

from epochfs.sidecar.listing.lister import Lister
from epochfs.sidecar.listing.paged import PagedSource
from epochfs.sidecar.listing.sinks import IndexSink
from epochfs.sidecar.listing.span import Span
from epochfs.sidecar.remote import RemoteError
from epochfs.sidecar.remote.base import MAX_EMPTY_PAGES
from epochfs.sidecar.remote.s3 import S3Remote

KEYS = [f"k{i:05d}" for i in range(1500)]
BUDGET = 400
"""Requests a case may make; past it the server answers 500 and sets ``stop``."""
HANG = 60.0
"""Seconds a listing of 1,500 keys may take before it counts as hung (it takes well under one)."""
EMPTY_ZONE = ("k00010", "k00500")
"""A page asked by StartAfter in this range is empty and truncated, with a token past it."""


class OddS3:
    """A ``ListObjectsV2`` endpoint over :data:`KEYS` whose oddity is ``mode``: ``empty`` (pages
    asked in :data:`EMPTY_ZONE` by StartAfter are empty, truncated, with a token that goes on),
    ``empty_first`` (the first page of the listing is empty and truncated, with a token),
    ``empty_forever`` (every page is empty and truncated, a new token each time), ``no_token``
    (truncated pages carry no token), ``no_token_empty`` (an empty truncated page, no token),
    ``same_token`` (every page holds the first keys and the token ``SAME``)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests = 0
        self.stop = threading.Event()
        odd = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return None

            def do_GET(self) -> None:
                odd.requests += 1
                if odd.requests > BUDGET:
                    odd.stop.set()
                    self._send(500, b"<Error><Code>InternalError</Code><Message>budget</Message></Error>")
                    return
                query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
                self._send(200, odd.page(query))

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def page(self, query: dict[str, str]) -> bytes:
        """The answer to one request: the keys after its token (``after:<key>``) or StartAfter."""
        limit = int(query.get("max-keys", 1000))
        token = query.get("continuation-token")
        start = query.get("start-after", "")
        after = token.removeprefix("after:") if token else start
        rest = [k for k in KEYS if k > after]
        keys = rest[:limit]
        more = len(rest) > limit
        if self.mode == "empty" and not token and EMPTY_ZONE[0] <= start < EMPTY_ZONE[1]:
            return xml([], True, f"after:{start}")
        if self.mode == "empty_first" and not token and not start:
            return xml([], True, "after:")
        if self.mode == "empty_forever":
            return xml([], True, f"after:{start}:{self.requests}")
        if self.mode == "no_token":
            return xml(keys, more, None)
        if self.mode == "no_token_empty":
            return xml([], True, None)
        if self.mode == "same_token":
            return xml(KEYS[:limit], True, "SAME")
        return xml(keys, more, f"after:{keys[-1]}" if more else None)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def xml(keys: list[str], truncated: bool, token: str | None) -> bytes:
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    ]
    parts += [f'<Contents><Key>{escape(k)}</Key><Size>1</Size><ETag>"e"</ETag></Contents>' for k in keys]
    parts.append(f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>")
    if token is not None:
        parts.append(f"<NextContinuationToken>{escape(token)}</NextContinuationToken>")
    parts.append("</ListBucketResult>")
    return "".join(parts).encode()


@pytest.fixture
def odd(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[OddS3, S3Remote]]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    }.items():
        monkeypatch.setenv(name, value)
    server = OddS3(request.param)
    remote = S3Remote(url="s3://bkt", endpoint_url=server.endpoint, connect_timeout=5, read_timeout=5)
    try:
        yield server, remote
    finally:
        remote.close()
        server.close()


def list_to_index(remote: S3Remote, server: OddS3, folder: Path) -> tuple[bool, int]:
    """(complete, objects listed) of the real Lister writing an index over ``remote``. The run is
    on a thread only so that a listing that neither ends nor asks the server (a planner stuck on
    a segment) is stopped and fails the test instead of hanging it."""
    folder.mkdir()
    lister = Lister(IndexSink(str(folder)), PagedSource(remote), seed=1, threads=2, stop=server.stop)
    out: list[tuple[bool, int]] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            report = lister.run()
            out.append((report.complete, report.listed))
        except BaseException as e:
            failed.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG)
    if thread.is_alive():
        server.stop.set()
        thread.join()
        pytest.fail(f"the listing did not end in {HANG} s ({server.requests} requests)")
    if failed:
        raise failed[0]
    return out[0]


@pytest.mark.parametrize("odd", ["empty"], indirect=True)
def test_an_empty_truncated_page_is_followed_by_its_token(
    odd: tuple[OddS3, S3Remote], tmp_path: Path
) -> None:
    server, remote = odd
    page = PagedSource(remote).read_page(Span("", "", None), "k00010", 100)
    assert [o.key for o in page.objects] == KEYS[11:111] and not page.done
    assert page.after == "k00110" and server.requests == 2  # the empty page, then its token's

    assert list_to_index(remote, server, tmp_path / "index") == (True, len(KEYS))
    assert not server.stop.is_set()


@pytest.mark.parametrize("odd", ["empty_first"], indirect=True)
def test_an_empty_truncated_first_page_is_not_the_listing(
    odd: tuple[OddS3, S3Remote], tmp_path: Path
) -> None:
    server, remote = odd
    assert [o.key for o in remote.list()] == KEYS
    assert list_to_index(remote, server, tmp_path / "index") == (True, len(KEYS))
    assert not server.stop.is_set()


@pytest.mark.parametrize("odd", ["empty_forever"], indirect=True)
def test_empty_truncated_pages_without_end_are_an_error(odd: tuple[OddS3, S3Remote]) -> None:
    server, remote = odd
    with pytest.raises(RemoteError, match="empty pages in a row"):
        PagedSource(remote).read_page(Span("", "", None), "k00010", 100)
    assert server.requests == MAX_EMPTY_PAGES + 1


@pytest.mark.parametrize("odd", ["no_token"], indirect=True)
def test_a_truncated_page_without_a_token_goes_on_after_its_last_key(
    odd: tuple[OddS3, S3Remote], tmp_path: Path
) -> None:
    server, remote = odd
    assert [o.key for o in remote.list()] == KEYS
    discovered = PagedSource(remote)
    discovered.spans()  # its pages go on after the first page's last key, to the end
    assert discovered.fits_one_page
    source = PagedSource(remote)  # nothing kept: every page asked of the server
    page = source.read_page(Span("", "", None), "k00099", 100)
    assert [o.key for o in page.objects] == KEYS[100:200] and not page.done
    pages = list(source.pages(Span("", "", None), ""))
    assert [o.key for p in pages for o in p.objects] == KEYS and pages[-1].done

    assert list_to_index(remote, server, tmp_path / "index") == (True, len(KEYS))
    assert not server.stop.is_set()


@pytest.mark.parametrize("odd", ["no_token_empty"], indirect=True)
def test_an_empty_truncated_page_without_a_token_is_an_error(odd: tuple[OddS3, S3Remote]) -> None:
    server, remote = odd
    with pytest.raises(RemoteError, match="no continuation token"):
        PagedSource(remote).read_page(Span("", "", None), "k00010", 100)
    with pytest.raises(RemoteError, match="no continuation token"):
        list(remote.list())
    assert server.requests == 2


@pytest.mark.parametrize("odd", ["same_token"], indirect=True)
def test_the_same_continuation_token_twice_is_an_error(odd: tuple[OddS3, S3Remote]) -> None:
    server, remote = odd
    with pytest.raises(RemoteError, match="same continuation token twice"):
        list(remote.list())
    assert server.requests == 2
    with pytest.raises(RemoteError, match="same continuation token twice"):
        list(PagedSource(remote).pages(Span("", "", None), ""))
    assert server.requests == 4
