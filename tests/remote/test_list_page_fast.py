"""``S3Remote.list_page`` reads a page through a presigned URL and ElementTree (sidecar/remote/s3list.py)
instead of botocore, whose parsing cost ~150 µs of CPU a key in the sampler's process (docs/listing.md).

The fast page must be exactly botocore's page for the same arguments (hostile keys included: spaces,
unicode, XML's ``&<>``, a control character XML 1.0 cannot carry, which only ``encoding-type=url``
brings back), against moto and the synthetic endpoint (continuation tokens, the last page). A refused
presigned listing (301, 400, 403) falls back to botocore; a ``503 SlowDown`` stays throttling for the
listing thread (``is_throttled``); a missing bucket says what botocore said. botocore's
``ListObjectsV2`` calls are counted with its own event hook: none on the fast path.
"""

from __future__ import annotations

import http.client
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from common import S3Server, free_port

from epochfs.benchmarks.synthetic_s3 import Dataset, SyntheticS3
from epochfs.sidecar.remote import RemoteError
from epochfs.sidecar.remote.backoff import is_throttled
from epochfs.sidecar.remote.errors import Throttled, Unavailable
from epochfs.sidecar.remote.s3 import S3Remote
from epochfs.sidecar.remote.s3list import parse_list_page

HOSTILE = [
    "plain.bin",
    "with space.bin",
    " leading and trailing ",
    "plus+sign.bin",
    "percent%20literal.bin",
    "amp&lt<gt>quote\"apos'.bin",
    "ünïcödé/日本語.bin",
    "emoji-\U0001f600.bin",
    "tab\tkey.bin",
    "ctl\x01key.bin",  # XML 1.0 cannot carry it: only encoding-type=url lists it
    "sub/one.bin",
    "sub/two.bin",
    "sub2/deep/x.bin",
]

CALLS = [
    {"prefix": ""},
    {"prefix": "", "delimiter": True},
    {"prefix": "sub/"},
    {"prefix": "sub", "delimiter": True},
    {"prefix": "ünïcödé/"},
    {"prefix": "", "start_after": "plus+sign.bin"},
    # (moto echoes StartAfter unencoded, which XML cannot carry for a control character; S3 encodes it)
    {"prefix": "", "start_after": "amp&lt<gt>quote\"apos'.bin", "delimiter": True},
    {"prefix": "", "start_after": "sub/one.bin"},
    {"prefix": "nothing-here/"},
]


def botocore_calls(remote: S3Remote) -> list[str]:
    """botocore's ListObjectsV2 calls of ``remote``, as botocore's own hook sees them."""
    calls: list[str] = []
    remote._client.meta.events.register(
        "before-call.s3.ListObjectsV2", lambda **kw: calls.append(kw["params"]["query_string"]))
    return calls


def botocore_remote(url: str, endpoint: str) -> S3Remote:
    remote = S3Remote(url=url, endpoint_url=endpoint)
    remote._fast_list = False  # today's path: every page through botocore
    return remote


@pytest.fixture
def moto_bucket(s3: S3Server) -> str:
    client = s3.client()
    client.create_bucket(Bucket="hostile")
    for key in HOSTILE:
        client.put_object(Bucket="hostile", Key=f"data/{key}", Body=key.encode())
    client.put_object(Bucket="hostile", Key="outside-the-root.bin", Body=b"x")
    return "s3://hostile/data"


@pytest.fixture
def synthetic(monkeypatch: pytest.MonkeyPatch) -> Iterator[SyntheticS3]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    with SyntheticS3(Dataset(2500, 64, classes=3, prefix="train/"), list_latency=0) as server:
        yield server


def test_fast_pages_equal_botocore_pages_for_hostile_keys(s3: S3Server, moto_bucket: str) -> None:
    fast = S3Remote(url=moto_bucket, endpoint_url=s3.endpoint)
    slow = botocore_remote(moto_bucket, s3.endpoint)
    fast_calls, slow_calls = botocore_calls(fast), botocore_calls(slow)
    try:
        listed = fast.list_page("")
        assert sorted(o.key for o in listed[0]) == sorted(HOSTILE)  # every key, decoded
        for call in CALLS:
            assert fast.list_page(**call) == slow.list_page(**call), call  # type: ignore[arg-type]
        assert fast_calls == []  # not one page through botocore
        assert len(slow_calls) == len(CALLS)
    finally:
        fast.close()
        slow.close()


def test_fast_pages_equal_botocore_pages_across_continuation_tokens(synthetic: SyntheticS3) -> None:
    fast = S3Remote(url=synthetic.url, endpoint_url=synthetic.endpoint)
    slow = botocore_remote(synthetic.url, synthetic.endpoint)
    fast_calls = botocore_calls(fast)
    try:
        for start in ({"prefix": ""}, {"prefix": "class-0001/"},
                      {"prefix": "", "start_after": synthetic.data.key(1700)[len("train/"):]}):
            token: str | None = None
            pages = 0
            while True:
                a = fast.list_page(token=token, **start)  # type: ignore[arg-type]
                b = slow.list_page(token=token, **start)  # type: ignore[arg-type]
                assert a == b, (start, pages)
                pages += 1
                token = a[2]
                if token is None:  # the last page
                    break
            assert pages >= 1
        assert fast.list_page("", delimiter=True) == slow.list_page("", delimiter=True)
        assert fast_calls == []
        assert all(q.get("encoding-type") == "url" for q, _ in synthetic.server.list_log)  # as botocore
    finally:
        fast.close()
        slow.close()


def test_a_url_encoded_page_is_decoded_as_botocore_decodes_it() -> None:
    """S3's own encoding (``+`` for a space, ``%XX``), which moto and the synthetic endpoint write
    differently: botocore decodes with ``unquote_plus``, and so does the parser."""
    doc = (b'<?xml version="1.0" encoding="UTF-8"?>'
           b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
           b"<Name>b</Name><Prefix>a+b%2F</Prefix><EncodingType>url</EncodingType>"
           b"<StartAfter>a+b%2Fc%01</StartAfter><IsTruncated>true</IsTruncated>"
           b"<NextContinuationToken>1+/x=</NextContinuationToken>"
           b"<Contents><Key>a+b%2Fc%01d%2B%26.bin</Key><ETag>&quot;abc&quot;</ETag><Size>7</Size></Contents>"
           b"<CommonPrefixes><Prefix>a+b%2F%E6%97%A5%2F</Prefix></CommonPrefixes></ListBucketResult>")
    page = parse_list_page(doc)
    assert page.objects == [("a b/c\x01d+&.bin", 7, "abc")]
    assert page.prefixes == ["a b/日/"]
    assert page.start_after == "a b/c\x01"
    assert (page.truncated, page.next_token) == (True, "1+/x=")  # tokens are never decoded


class _Refuser:
    """A forwarding proxy that answers every *presigned* listing (``X-Amz-Signature`` in a
    ``list-type=2`` query) with ``status`` and an S3 error, as a store or a region that does not
    take presigned URLs would; everything else (botocore's signed requests) goes to ``upstream``."""

    def __init__(self, upstream: str, status: int, code: str) -> None:
        parts = urlsplit(upstream)
        self.refused = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def _answer(self, head: bool) -> None:
                if "list-type=2" in self.path and "X-Amz-Signature=" in self.path:
                    owner.refused += 1
                    body = f"<Error><Code>{code}</Code><Message>refused</Message></Error>".encode()
                    self.send_response(status)
                    if status in (301, 307):
                        self.send_header("Location", upstream + self.path)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                conn.request(self.command, self.path, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)
                conn.close()

            def do_GET(self) -> None:
                self._answer(head=False)

            def do_HEAD(self) -> None:
                self._answer(head=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.mark.parametrize(("status", "code"), [
    (301, "PermanentRedirect"), (400, "AuthorizationHeaderMalformed"), (403, "AccessDenied")])
def test_a_refused_presigned_listing_falls_back_to_botocore(
        synthetic: SyntheticS3, status: int, code: str, caplog: pytest.LogCaptureFixture) -> None:
    refuser = _Refuser(synthetic.endpoint, status, code)
    remote = S3Remote(url=synthetic.url, endpoint_url=refuser.endpoint)
    calls = botocore_calls(remote)
    try:
        with caplog.at_level(logging.WARNING, logger="epochfs.remote"):
            first = remote.list_page("", delimiter=True)
            second = remote.list_page("class-0000/")
        assert first[1] == ["class-0000/", "class-0001/", "class-0002/"]
        assert len(second[0]) == 834
        assert refuser.refused == 1  # refused once; botocore listed it, and lists from then on
        assert len(calls) == 2
        assert f"S3 presigned listing refused (HTTP {status} {code}); using botocore" in caplog.text
    finally:
        remote.close()
        refuser.close()


def test_a_slowdown_on_the_fast_path_is_throttling(synthetic: SyntheticS3) -> None:
    remote = S3Remote(url=synthetic.url, endpoint_url=synthetic.endpoint)
    calls = botocore_calls(remote)
    try:
        synthetic.server.throttle_pages = {len(synthetic.server.list_log) + 1}
        with pytest.raises(RemoteError) as raised:
            remote.list_page("")
        assert calls == []  # a SlowDown is no refusal: botocore is not asked
        assert is_throttled(raised.value)
        assert isinstance(raised.value.__cause__, Throttled)
        slow = botocore_remote(synthetic.url, synthetic.endpoint)
        synthetic.server.throttle_pages = {len(synthetic.server.list_log) + 1}
        with pytest.raises(RemoteError) as by_botocore:
            slow.list_page("")
        slow.close()
        assert is_throttled(by_botocore.value)
        assert str(raised.value) == str(by_botocore.value)  # "... (SlowDown) ...": as botocore says it
        assert "(SlowDown)" in str(raised.value)
        assert remote.list_page("")[0]  # the next page is served, still on the fast path
        assert calls == []
    finally:
        remote.close()


def test_a_missing_bucket_says_what_botocore_says(s3: S3Server) -> None:
    fast = S3Remote(url="s3://no-such-bucket/x", endpoint_url=s3.endpoint)
    slow = botocore_remote("s3://no-such-bucket/x", s3.endpoint)
    calls = botocore_calls(fast)
    try:
        with pytest.raises(RemoteError) as by_fast:
            fast.list_page("")
        with pytest.raises(RemoteError) as by_botocore:
            slow.list_page("")
        assert "NoSuchBucket" in str(by_botocore.value)
        assert str(by_fast.value) == str(by_botocore.value)
        assert calls == []
        assert not is_throttled(by_fast.value)
    finally:
        fast.close()
        slow.close()


def test_an_endpoint_that_cannot_be_reached_is_named_without_its_password(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection refused on the fast path says which endpoint (as botocore's "Could not connect
    to the endpoint URL" did), without the userinfo, and is an outage for the listing thread."""
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    port = free_port()
    remote = S3Remote(url="s3://bkt/x", endpoint_url=f"http://user:pa55word@127.0.0.1:{port}",
                      connect_timeout=5, read_timeout=5)
    calls = botocore_calls(remote)
    try:
        with pytest.raises(RemoteError) as raised:
            remote.list_page("")
        assert f"(endpoint http://127.0.0.1:{port})" in str(raised.value)
        assert "pa55word" not in str(raised.value)
        assert isinstance(raised.value.__cause__, Unavailable)
        assert calls == []
    finally:
        remote.close()
