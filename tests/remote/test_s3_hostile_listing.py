"""``ListObjectsV2`` answers a store should never give, from a local server that speaks S3's listing:
a page that never ends (it was read whole: 7.5 GB of memory in 20 s), a ``<Size>`` that is no
number (a traceback, or a listing failed for ever naming no key) or is negative (cataloged, each key
skipped later as changed), and keys outside the prefix asked (cut to another key of the dataset:
``other/secret.bin`` under ``pre/`` became ``r/secret.bin``). Now: the endless page fails as a
garbled one does (asked again), the key with no size is skipped alone and counted by reason, and
keys outside the prefix are passed over with a warning. The real S3 remote, and the real sampler."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from common import wait_until
from sampler_helpers import index_rows, running_sampler, s3_env

from epochfs.sidecar.remote import RemoteError
from epochfs.sidecar.remote.base import Transient
from epochfs.sidecar.remote.s3 import S3Remote
from epochfs.sidecar.remote.s3fastlist import MAX_PAGE_BYTES
from epochfs.sidecar.remote.s3list import NOT_A_SIZE, OVER_ANY_OBJECT, SIZE_SKIPS

NS = "http://s3.amazonaws.com/doc/2006-03-01/"


class FakeS3:
    """Answers every ListObjectsV2 with ``contents`` ((key, size text) pairs, one page; a size of
    None: no ``<Size>``), or with a page that never ends (``endless``); a GET of a key with its body
    ``b"x" * 10``. ``refuse_presigned``: a presigned request (its signature in the query) is
    refused with a 403, as a store that takes only signed headers does, so botocore lists.
    ``padding``: bytes of an XML comment in the page (a page of that size that still parses)."""

    def __init__(self, contents: list[tuple[str, str | None]], *, endless: bool = False,
                 refuse_presigned: bool = False, padding: int = 0) -> None:
        owner = self
        self.contents = contents
        self.padding = padding

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)
                if refuse_presigned and "X-Amz-Signature" in query:
                    denied = b"<Error><Code>AccessDenied</Code><Message>signed headers only</Message></Error>"
                    self.send_response(403)
                    self.send_header("Content-Length", str(len(denied)))
                    self.end_headers()
                    self.wfile.write(denied)
                    return
                if "list-type" not in query:
                    body = b"x" * 10
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.send_header("ETag", '"etag"')
                    self.end_headers()
                    self.wfile.write(body)
                    return
                head = f'<?xml version="1.0"?><ListBucketResult xmlns="{NS}"><Name>b</Name>'.encode()
                if endless:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    chunk = b"<Contents><Key>pre/a</Key><Size>1</Size></Contents>" * 20_000
                    try:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(head), head))
                        while True:  # until the client goes away
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    except OSError:
                        return
                items = "".join(f"<Contents><Key>{k}</Key>{'' if s is None else f'<Size>{s}</Size>'}"
                                "<ETag>\"etag\"</ETag></Contents>" for k, s in owner.contents)
                pad = b"<!--" + b"x" * owner.padding + b"-->" if owner.padding else b""
                body = head + pad + f"{items}<IsTruncated>false</IsTruncated></ListBucketResult>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in s3_env("http://unused").items():
        monkeypatch.setenv(name, value)


def test_a_page_that_never_ends_fails_as_a_garbled_one(env: None) -> None:
    store = FakeS3([], endless=True)
    remote = S3Remote(url="s3://b/pre", endpoint_url=store.endpoint)
    try:
        with pytest.raises(RemoteError, match=f"passed {MAX_PAGE_BYTES >> 20} MiB") as raised:
            remote.list_page("")
        assert isinstance(raised.value.__cause__, Transient)  # asked again, as a cut page is
    finally:
        remote.close()
        store.close()


def test_botocore_reads_a_page_to_the_same_cap(env: None) -> None:
    """botocore, listing what the presigned listing was refused, read a whole answer however large
    (a page that never ends: without bound); past the cap its page fails as the presigned one's."""
    store = FakeS3([("pre/a.bin", "1")], refuse_presigned=True, padding=MAX_PAGE_BYTES + (1 << 20))
    remote = S3Remote(url="s3://b/pre", endpoint_url=store.endpoint)
    try:
        with pytest.raises(RemoteError, match=f"passed {MAX_PAGE_BYTES >> 20} MiB") as raised:
            remote.list_page("")
        assert isinstance(raised.value.__cause__, Transient)  # asked again, as a cut page is
        store.padding = 0  # the store answers pages of its size again: so does the remote
        assert [o.key for o in remote.list_page("")[0]] == ["a.bin"]
    finally:
        remote.close()
        store.close()


def test_keys_outside_the_prefix_are_passed_over(env: None, caplog: pytest.LogCaptureFixture) -> None:
    store = FakeS3([("aaa", "1"), ("other/secret.bin", "1"), ("pre/ok1.bin", "1")])
    remote = S3Remote(url="s3://b/pre", endpoint_url=store.endpoint)
    try:
        with caplog.at_level(logging.WARNING, logger="epochfs.remote"):
            page = remote.list_page("")
        assert [o.key for o in page[0]] == ["ok1.bin"]
        assert "answered 2 key(s) or folder(s) outside the prefix 'pre/' (the first: 'aaa')" in caplog.text
    finally:
        remote.close()
        store.close()


def test_the_sampler_catalogs_no_key_outside_the_prefix(tmp_path: Path) -> None:
    """The tester's run: ``other/secret.bin`` answered under ``pre/`` was cataloged as
    ``r/secret.bin`` and fetched as ``pre/r/secret.bin``, another object than the one listed."""
    store = FakeS3([("aaa", "10"), ("other/secret.bin", "10"), ("pre/ok1.bin", "10")])
    try:
        cache = tmp_path / "cache"
        with running_sampler(cache, "s3://b/pre", "--endpoint-url", store.endpoint,
                             env=s3_env(store.endpoint)) as sp:
            # One page, committed whole: once ok1.bin is fetched, every row of the page is cataloged.
            wait_until(lambda: sp.stats()["samples"] >= 1, what="ok1.bin fetched")
            log = sp.log_text()
        assert {k for (k,) in index_rows(cache, "SELECT key FROM catalog")} == {"ok1.bin"}
        assert "outside the prefix 'pre/'" in log, log[-3000:]
    finally:
        store.close()


ABSURD = str(10**30)
"""A ``<Size>`` past any S3 object's: alone in a listing it stopped the sampler (exit 2) blaming
``--capacity`` as if a larger cache could hold it."""
HOSTILE_SIZES: list[tuple[str, str | None]] = [
    ("pre/a.bin", "10"), ("pre/b.bin", "abc"), ("pre/c.bin", "-5"), ("pre/d.bin", "10"),
    ("pre/e.bin", ABSURD), ("pre/f.bin", ""), ("pre/g.bin", None), ("pre/h.bin", "12abc"),
]


def test_a_key_without_a_size_is_skipped_alone(tmp_path: Path) -> None:
    store = FakeS3(HOSTILE_SIZES)
    try:
        cache = tmp_path / "cache"
        with running_sampler(cache, "s3://b/pre", "--endpoint-url", store.endpoint,
                             env=s3_env(store.endpoint)) as sp:
            wait_until(lambda: sp.stats()["samples"] == 2, what="the two keys with sizes")
            wait_until(lambda: sp.stats()["skipped_total"] >= 6, what="the six without, skipped")
            log = sp.log_text()
        for key in ("b.bin", "c.bin", "f.bin", "g.bin", "h.bin"):
            assert f"skipping key {key!r}: {SIZE_SKIPS[NOT_A_SIZE]}" in log, log[-3000:]
        assert f"skipping key 'e.bin': {SIZE_SKIPS[OVER_ANY_OBJECT]}" in log, log[-3000:]
        assert "over the object limit" not in log
        assert "Traceback" not in log
    finally:
        store.close()


def test_botocore_lists_the_same_sizes_without_failing_the_page(env: None) -> None:
    """A store that refuses presigned listing is listed by botocore, whose parser took ``int()``
    of every ``<Size>``: one ``abc`` failed the page at every try, naming no key."""
    store = FakeS3([*HOSTILE_SIZES, ("other/secret.bin", "1")], refuse_presigned=True)
    remote = S3Remote(url="s3://b/pre", endpoint_url=store.endpoint)
    try:
        objects = remote.list_page("")[0]
        assert {o.key: o.size for o in objects} == {
            "a.bin": 10, "b.bin": NOT_A_SIZE, "c.bin": NOT_A_SIZE, "d.bin": 10, "e.bin": OVER_ANY_OBJECT,
            "f.bin": NOT_A_SIZE, "g.bin": NOT_A_SIZE, "h.bin": NOT_A_SIZE}
    finally:
        remote.close()
        store.close()
