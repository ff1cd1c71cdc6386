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
from sampler_helpers import running_sampler, s3_env

from epochfs.sidecar.remote import RemoteError
from epochfs.sidecar.remote.base import Transient
from epochfs.sidecar.remote.s3 import S3Remote
from epochfs.sidecar.remote.s3fastlist import MAX_PAGE_BYTES

NS = "http://s3.amazonaws.com/doc/2006-03-01/"


class FakeS3:
    """Answers every ListObjectsV2 with ``contents`` ((key, size text) pairs, one page), or with a
    page that never ends (``endless``); a GET of a key with its body ``b"x" * 10``."""

    def __init__(self, contents: list[tuple[str, str]], *, endless: bool = False) -> None:
        owner = self
        self.contents = contents

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)
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
                items = "".join(f"<Contents><Key>{k}</Key><Size>{s}</Size><ETag>\"etag\"</ETag></Contents>"
                                for k, s in owner.contents)
                body = head + f"{items}<IsTruncated>false</IsTruncated></ListBucketResult>".encode()
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


def test_a_key_without_a_size_is_skipped_alone(tmp_path: Path) -> None:
    store = FakeS3([("pre/a.bin", "10"), ("pre/b.bin", "abc"), ("pre/c.bin", "-5"), ("pre/d.bin", "10")])
    try:
        cache = tmp_path / "cache"
        with running_sampler(cache, "s3://b/pre", "--endpoint-url", store.endpoint,
                             env=s3_env(store.endpoint)) as sp:
            wait_until(lambda: sp.stats()["samples"] == 2, what="the two keys with sizes")
            wait_until(lambda: sp.stats()["skipped_total"] >= 2, what="the two without, skipped")
            log = sp.log_text()
        assert "skipping key 'b.bin': size not a whole number of bytes" in log, log[-3000:]
        assert "skipping key 'c.bin': size not a whole number of bytes" in log
        assert "Traceback" not in log
    finally:
        store.close()
