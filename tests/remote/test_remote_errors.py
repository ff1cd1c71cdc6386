"""Remote failures typed where they arise, and what the downloader does with each kind.

The outcomes below (``skip``: given up at once; ``retry``: retried, then skipped; ``outage``:
retried, then counted toward an outage) are literals computed with the downloader's rules as they
were before failures were typed (``is_transient``/``is_unavailable`` in ``git show
53422a7:sidecar/download.py``), run on the same exceptions, and on the same faults for the real
backends: the typed failures change no decision, but those made on purpose since: throttling
(SlowDown, 429, GCS ``rateLimitExceeded``) is ``throttled``, returned at once for the sampler to
fetch again later (it was ``outage``, or ``retry`` over fsspec; issue 14); a GCS 5xx is an
outage, which gcsfs's own retries hid until they were switched off, and the 401, 403 or 429 under
fsspec's not found decides for it (issue 24), as does a connection that could not be made under
it (an outage: every key of a remote that was down was skipped as gone). Two quirks are kept
on purpose and named in the table: an ``http(s)://`` remote's 5xx is retried but not counted
toward an outage, and botocore's ``SSLError`` is retried even for a certificate that does not
verify.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import http.client
import itertools
import os
import ssl
import threading
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import aiohttp
import botocore.exceptions as bce
import pytest
import urllib3.exceptions as u3
import yarl
from aiohttp.http_exceptions import ContentLengthError
from botocore.parsers import ResponseParserError
from common import S3Server, put_objects
from faultproxy import FaultProxy
from fsspec.exceptions import FSTimeoutError
from multidict import CIMultiDict, CIMultiDictProxy
from store_helpers import sid_of

from epochfs.sidecar.download import (
    Downloader,
    FetchResult,
    RetryPolicy,
    failure_kind,
    is_transient,
    is_unavailable,
)
from epochfs.sidecar.remote import Remote
from epochfs.sidecar.remote.errors import (
    Changed,
    RemoteFailure,
    Rule,
    Transient,
    Translated,
    Unavailable,
    aiohttp_kind,
    botocore_kind,
    fast_path_failure,
    s3_error_code,
)
from epochfs.sidecar.remote.file import FileRemote
from epochfs.sidecar.remote.httpget import HTTPStatusError, Proxy, ProxyConnectError, ProxyError
from epochfs.sidecar.remote.httpindex import HTTPRemote
from epochfs.sidecar.remote.s3 import S3Remote
from epochfs.sidecar.store import Candidate, Store

URL = "http://127.0.0.1:9/bkt/k"


def chained(*links: BaseException) -> BaseException:
    """``links[0]`` raised while handling ``links[1]``, raised while handling ``links[2]``...
    (how botocore, urllib3 and aiohttp wrap the socket's error)."""
    for outer, inner in itertools.pairwise(links):
        outer.__context__ = inner
    return links[0]


def client_error(status: int, code: str) -> bce.ClientError:
    return bce.ClientError({"Error": {"Code": code, "Message": "m"},
                            "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")


def response_error(status: int, message: str) -> aiohttp.ClientResponseError:
    info = aiohttp.RequestInfo(yarl.URL(URL), "GET", CIMultiDictProxy(CIMultiDict()), yarl.URL(URL))
    return aiohttp.ClientResponseError(info, (), status=status, message=message)


def redirect_loop() -> aiohttp.TooManyRedirects:
    info = aiohttp.RequestInfo(yarl.URL(URL), "GET", CIMultiDictProxy(CIMultiDict()), yarl.URL(URL))
    return aiohttp.TooManyRedirects(info, ())


def connector_error(cls: type[aiohttp.ClientConnectorError], os_error: OSError) -> BaseException:
    from aiohttp.client_reqrep import ConnectionKey

    return cls(ConnectionKey("h", 443, True, True, None, None, None), os_error)


class GcsHttpError(Exception):
    """gcsfs's ``HttpError`` (gcsfs is not installed here): a message and a ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


GcsHttpError.__name__ = "HttpError"


# (case, the exception as it arises, the kind it is typed as (None: left as it is), outcome)
Case = tuple[str, Callable[[], BaseException], "str | None", str]

STDLIB: list[Case] = [  # file:// and the presigned fast path's sockets, TLS and http.client
    ("connection refused", lambda: ConnectionRefusedError(errno.ECONNREFUSED, "refused"),
     "Unavailable", "outage"),
    ("connection reset", lambda: ConnectionResetError(errno.ECONNRESET, "reset"), "Unavailable", "outage"),
    ("pool closed", lambda: ConnectionAbortedError("the connection pool is closed"), "Unavailable", "outage"),
    ("broken pipe", lambda: BrokenPipeError(errno.EPIPE, "Broken pipe"), "Unavailable", "outage"),
    ("closed before answering", lambda: http.client.RemoteDisconnected("closed"), "Unavailable", "outage"),
    ("read timeout", lambda: TimeoutError("timed out"), "Unavailable", "outage"),
    ("ETIMEDOUT (NFS)", lambda: TimeoutError(errno.ETIMEDOUT, "timed out"), "Unavailable", "outage"),
    ("proxy unreachable", lambda: ProxyConnectError("cannot connect to the proxy"), "Unavailable", "outage"),
    ("incomplete read", lambda: http.client.IncompleteRead(b"", 10), "Transient", "retry"),
    ("garbled status line", lambda: http.client.BadStatusLine("garbage"), "Transient", "retry"),
    ("header line too long", lambda: http.client.LineTooLong("header line"), "Transient", "retry"),
    ("TLS cut mid-body", lambda: ssl.SSLEOFError(8, "EOF occurred in violation of protocol"),
     "Transient", "retry"),
    ("incomplete read after a reset",
     lambda: chained(http.client.IncompleteRead(b"", 10), ConnectionResetError(104, "reset")),
     "Unavailable", "outage"),
    ("TLS certificate", lambda: ssl.SSLCertVerificationError(1, "certificate verify failed"),
     "Denied", "skip"),
    ("ENOENT", lambda: FileNotFoundError(errno.ENOENT, "No such file or directory"), "NotFound", "skip"),
    ("EACCES", lambda: PermissionError(errno.EACCES, "Permission denied"), "Denied", "skip"),
    ("EISDIR", lambda: IsADirectoryError(errno.EISDIR, "Is a directory"), None, "skip"),
    ("EIO", lambda: OSError(errno.EIO, "Input/output error"), None, "skip"),
    ("unknown error", lambda: ValueError("something else"), None, "skip"),
]

BOTOCORE: list[Case] = [  # s3:// through botocore (a refused fast path, S3's checksum checks)
    ("NoSuchKey 404", lambda: client_error(404, "NoSuchKey"), "NotFound", "skip"),
    ("AccessDenied 403", lambda: client_error(403, "AccessDenied"), "Denied", "skip"),
    ("InvalidRange 416", lambda: client_error(416, "InvalidRange"), "Denied", "skip"),
    ("SlowDown 503", lambda: client_error(503, "SlowDown"), "Throttled", "throttled"),
    ("InternalError 500", lambda: client_error(500, "InternalError"), "Unavailable", "outage"),
    ("502 without a body", lambda: client_error(502, "502"), "Unavailable", "outage"),
    ("RequestTimeout 400", lambda: client_error(400, "RequestTimeout"), "Unavailable", "outage"),
    ("RequestTimeTooSkewed 403", lambda: client_error(403, "RequestTimeTooSkewed"), "Unavailable", "outage"),
    ("Throttling 400", lambda: client_error(400, "Throttling"), "Throttled", "throttled"),
    ("TooManyRequests 429", lambda: client_error(429, "TooManyRequests"), "Throttled", "throttled"),
    ("503 without a body", lambda: client_error(503, "503"), "Unavailable", "outage"),
    ("endpoint refused", lambda: chained(bce.EndpointConnectionError(endpoint_url=URL, error="x"),
                                         u3.NewConnectionError(None, "refused"),
                                         ConnectionRefusedError(111, "refused")), "Unavailable", "outage"),
    ("connect timeout", lambda: chained(bce.ConnectTimeoutError(endpoint_url=URL, error="x"),
                                        u3.ConnectTimeoutError("t"), TimeoutError("timed out")),
     "Unavailable", "outage"),
    ("read timeout", lambda: chained(bce.ReadTimeoutError(endpoint_url=URL, error="x"),
                                     u3.ReadTimeoutError(None, URL, "t"),
                                     TimeoutError("timed out")), "Unavailable", "outage"),
    ("closed before answering (reset)", lambda: chained(
        bce.ConnectionClosedError(endpoint_url=URL, error="x"), u3.ProtocolError("Connection aborted."),
        ConnectionResetError(104, "reset")), "Unavailable", "outage"),
    ("closed before answering (garbled)", lambda: chained(
        bce.ConnectionClosedError(endpoint_url=URL, error="x"), u3.ProtocolError("Connection aborted."),
        http.client.BadStatusLine("x")), "Transient", "retry"),
    ("reset mid-body", lambda: chained(bce.ResponseStreamingError(error="x"), u3.ProtocolError("broken"),
                                       ConnectionResetError(104, "reset")), "Unavailable", "outage"),
    ("cut mid-body", lambda: chained(bce.ResponseStreamingError(error="x"), u3.ProtocolError("broken"),
                                     http.client.IncompleteRead(b"", 5)), "Transient", "retry"),
    ("truncated body", lambda: bce.IncompleteReadError(actual_bytes=5, expected_bytes=10),
     "Transient", "retry"),
    ("checksum mismatch", lambda: bce.FlexibleChecksumError(error_msg="Expected checksum x, got y"),
     "Transient", "retry"),
    ("unparseable response", lambda: ResponseParserError("bad xml"), "Transient", "retry"),
    ("other HTTP client error", lambda: bce.HTTPClientError(error="x"), "Transient", "retry"),
    ("quirk: TLS certificate", lambda: chained(bce.SSLError(endpoint_url=URL, error="x"), u3.SSLError("x"),
                                               ssl.SSLCertVerificationError(1, "certificate verify failed")),
     "Transient", "retry"),
    ("proxy unreachable", lambda: chained(bce.ProxyConnectionError(proxy_url="http://p:1", error="x"),
                                          u3.ProxyError("p", None), ConnectionRefusedError(111, "refused")),
     "Unavailable", "outage"),
    ("no credentials", lambda: bce.NoCredentialsError(), "CredentialsRefused", "outage"),
    ("InvalidAccessKeyId 403", lambda: client_error(403, "InvalidAccessKeyId"), "CredentialsRefused",
     "outage"),
    ("ExpiredToken 400", lambda: client_error(400, "ExpiredToken"), "CredentialsRefused", "outage"),
]

FSSPEC: list[Case] = [  # http(s):// and gs:// through fsspec (aiohttp)
    ("404", lambda: FileNotFoundError(URL), "NotFound", "skip"),
    ("unreachable under fsspec's not found", lambda: chained(FileNotFoundError(URL), connector_error(
        aiohttp.ClientConnectorError, ConnectionRefusedError(111, "refused"))), "Unavailable", "outage"),
    ("timed out under fsspec's not found", lambda: chained(FileNotFoundError(URL), TimeoutError()),
     "Unavailable", "outage"),
    ("redirect loop under fsspec's not found", lambda: chained(FileNotFoundError(URL), redirect_loop()),
     "Transient", "retry"),
    ("403", lambda: response_error(403, "Forbidden"), "Denied", "skip"),
    ("quirk: 503", lambda: response_error(503, "Service Unavailable"), "Transient", "retry"),
    ("quirk: 500", lambda: response_error(500, "Internal Server Error"), "Transient", "retry"),
    ("429", lambda: response_error(429, "Too Many Requests"), "Throttled", "throttled"),
    ("GCS rateLimitExceeded 429", lambda: GcsHttpError(429, "rateLimitExceeded: too many requests"),
     "Throttled", "throttled"),
    ("GCS rateLimitExceeded 403", lambda: GcsHttpError(403, "The project exceeded the rate limit: "
                                                       "rateLimitExceeded"), "Throttled", "throttled"),
    # gcsfs keeps the status of an HttpError, and raises a 403 as a bare OSError: both were left
    # untyped (skipped, as any error no rule knows), a GCS 5xx too since gcsfs's own retries are off.
    ("GCS 401", lambda: GcsHttpError(401, "Invalid Credentials, 401"), "CredentialsRefused", "outage"),
    ("GCS 503", lambda: GcsHttpError(503, "Backend Error, 503"), "Unavailable", "outage"),
    ("GCS 403 as gcsfs raises it", lambda: OSError("Forbidden: b/bkt/o/k\nreader does not have "
                                                   "storage.objects.get access"), "Denied", "skip"),
    ("GCS 403 rate limit as gcsfs raises it", lambda: OSError("Forbidden: b/bkt/o/k\nRate Limit Exceeded"),
     "Throttled", "throttled"),
    # fsspec's look at a URL (a HEAD, then a GET) raises FileNotFoundError over any answer: the
    # answer decides (a throttled or refusing server's objects were skipped as not found).
    ("429 under fsspec's not found", lambda: chained(FileNotFoundError(URL), response_error(429, "")),
     "Throttled", "throttled"),
    ("401 under fsspec's not found", lambda: chained(FileNotFoundError(URL), response_error(401, "")),
     "Denied", "skip"),
    ("404 under fsspec's not found", lambda: chained(FileNotFoundError(URL), response_error(404, "")),
     "NotFound", "skip"),
    ("truncated body", lambda: chained(aiohttp.ClientPayloadError("Response payload is not completed"),
                                       ContentLengthError("short")), "Transient", "retry"),
    ("other client error", lambda: aiohttp.ClientConnectionError("x"), "Transient", "retry"),
    ("stalled body", lambda: chained(FSTimeoutError(), aiohttp.SocketTimeoutError("timeout reading")),
     "Unavailable", "outage"),
    ("connection refused", lambda: connector_error(aiohttp.ClientConnectorError,
                                                   ConnectionRefusedError(111, "refused")),
     "Unavailable", "outage"),
    ("server disconnected", lambda: aiohttp.ServerDisconnectedError(), "Unavailable", "outage"),
    ("reset", lambda: chained(aiohttp.ClientOSError(104, "reset"), ConnectionResetError(104, "reset")),
     "Unavailable", "outage"),
    ("TLS handshake", lambda: connector_error(aiohttp.ClientConnectorSSLError, ssl.SSLError(1, "x")),
     "Unavailable", "outage"),
    ("TLS certificate", lambda: connector_error(aiohttp.ClientConnectorCertificateError,
                                                ssl.SSLCertVerificationError(1, "x")), "Denied", "skip"),
]

RULES: dict[str, Rule | None] = {"stdlib": None, "botocore": botocore_kind, "fsspec": aiohttp_kind}
TABLE = [pytest.param(backend, *case, id=f"{backend}: {case[0]}")
         for backend, cases in (("stdlib", STDLIB), ("botocore", BOTOCORE), ("fsspec", FSSPEC))
         for case in cases]


def outcome(failure: BaseException) -> str:
    """What the downloader does with a failed attempt, from its public classifier."""
    if failure_kind(failure).throttled:
        return "throttled"
    if not is_transient(failure):
        return "skip"
    return "outage" if is_unavailable(failure) else "retry"


@pytest.mark.parametrize(("backend", "case", "make", "kind", "expected"), TABLE)
def test_each_backend_types_its_failures_and_the_decisions_are_unchanged(
        backend: str, case: str, make: Callable[[], BaseException], kind: str | None, expected: str) -> None:
    raw = make()
    with pytest.raises(BaseException) as info, Translated(RULES[backend]):
        raise raw
    got = info.value
    if kind is None:
        assert got is raw, "an exception no rule knows passes through unchanged"
    else:
        assert type(got).__name__ == kind and isinstance(got, RemoteFailure)
        assert got.__cause__ is raw, "the library's exception stays attached"
        with pytest.raises(RemoteFailure) as again, Translated(RULES[backend]):
            raise got
        assert again.value is got, "a typed failure passes through unchanged"
    assert outcome(got) == expected


def s3_error(status: int, code: str) -> HTTPStatusError:
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>m</Message>'
            f"<Resource>/bkt/k</Resource></Error>").encode()
    return HTTPStatusError(status, "Reason", body)


PROXY = Proxy.from_url("http://u:pw@p:3128")
FAST_PATH = [  # (id, what the presigned GET raised, kind, outcome)
    ("404 NoSuchKey", s3_error(404, "NoSuchKey"), "NotFound", "skip"),
    ("409 OperationAborted", s3_error(409, "OperationAborted"), "Denied", "skip"),
    ("412 PreconditionFailed", s3_error(412, "PreconditionFailed"), "Denied", "skip"),
    ("416 InvalidRange", s3_error(416, "InvalidRange"), "Denied", "skip"),
    ("429 TooManyRequests", s3_error(429, "TooManyRequests"), "Throttled", "throttled"),
    ("429 from a proxy page", HTTPStatusError(429, "Too Many Requests", b"<html>slow down</html>"),
     "Throttled", "throttled"),
    ("500 InternalError", s3_error(500, "InternalError"), "Unavailable", "outage"),
    ("502 BadGateway", s3_error(502, "BadGateway"), "Unavailable", "outage"),
    ("503 SlowDown", s3_error(503, "SlowDown"), "Throttled", "throttled"),
    ("503 ServiceUnavailable", s3_error(503, "ServiceUnavailable"), "Unavailable", "outage"),
    ("504 from a proxy page", HTTPStatusError(504, "Gateway Timeout", b"<html>proxy page</html>"),
     "Unavailable", "outage"),
    ("proxy 407", ProxyError(PROXY, 407, "Proxy Authentication Required"), "Denied", "skip"),
    ("proxy tunnel 502", ProxyError(PROXY, 502, "Bad Gateway"), "Unavailable", "outage"),
    ("reset", ConnectionResetError(104, "reset"), "Unavailable", "outage"),
]


@pytest.mark.parametrize(("answer", "kind", "expected"), [f[1:] for f in FAST_PATH],
                         ids=[f[0] for f in FAST_PATH])
def test_presigned_get_answers_are_typed_by_status_and_s3_code(
        answer: Exception, kind: str, expected: str) -> None:
    """301, 307, 400 and 403 never get here: S3Remote.open gives those to botocore."""
    failure = fast_path_failure(answer, key="train/k")
    assert failure is not None and type(failure).__name__ == kind
    assert outcome(failure) == expected
    if isinstance(answer, (HTTPStatusError, ProxyError)):
        assert failure.status == answer.status and str(failure).startswith("train/k: ")
        assert "pw" not in str(failure)


def test_the_downloaders_own_checks_are_typed() -> None:
    assert outcome(Changed("size is 3, the listing said 4")) == "skip"
    assert outcome(Transient("got 3 bytes, expected 4")) == "retry"
    assert outcome(Unavailable("down")) == "outage"


@pytest.mark.parametrize(("document", "code"), [
    (b"<Error><Code>SlowDown</Code><Message>Reduce your rate</Message></Error>", "SlowDown"),
    (b'<?xml version="1.0"?>\n<Error xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
     b"<Code> NoSuchKey </Code></Error>", "NoSuchKey"),
    (b"<Error><Message>has <Code> in the text &lt;Code&gt;</Message></Error>", ""),
    (b"<Error><Code>SlowDown</Code>", ""),  # cut short: no guess from a broken document
    (b"<html><body>502 Bad Gateway</body></html>", ""),
    (b"", ""),
])
def test_s3_error_documents_are_parsed_as_xml(document: bytes, code: str) -> None:
    assert s3_error_code(document) == code


# ---------------------------------------------------------------------------- real backends
BODY = os.urandom(300_000)
MD5 = hashlib.md5(BODY).hexdigest()

# (fault, outcome of the presigned fast path, outcome through botocore (the fallback))
S3_FAULTS = [
    ("reset", "Unavailable", "outage", "Unavailable", "outage"),
    ("reset-body", "Unavailable", "outage", "Unavailable", "outage"),
    ("stall", "Unavailable", "outage", "Unavailable", "outage"),
    ("truncate", "Transient", "retry", "Transient", "retry"),
    ("corrupt", "Transient", "retry", "Transient", "retry"),
    ("garbage", "Transient", "retry", "Transient", "retry"),
    ("503", "Throttled", "throttled", "Throttled", "throttled"),  # SlowDown
    ("500", "Unavailable", "outage", "Unavailable", "outage"),
    ("429", "Throttled", "throttled", "Throttled", "throttled"),
    ("404", "NotFound", "skip", "NotFound", "skip"),
    ("403", "Denied", "skip", "Denied", "skip"),  # presigned: refused, then botocore's answer
]


def fetch_once(tmp_path: Path, remote: Remote, *, version: str) -> FetchResult:
    """One object through the real downloader, two attempts at most."""
    with contextlib.closing(Store(tmp_path / "cache", create=True)) as store:
        downloader = Downloader(store=store, remote=remote, stop=threading.Event(),
                                retry=RetryPolicy(attempts=2, base=0.01, cap=0.01))
        return downloader.fetch(Candidate("k", sid_of("k"), len(BODY), version))


def decided(result: FetchResult) -> tuple[str, str]:
    """(kind, outcome) of a failed fetch: the kind heads its reason."""
    assert result.admission is None and result.error is not None, result
    kind = result.error.removeprefix(f"gave up after {result.attempts} attempts: ").split(":")[0]
    if result.throttled:
        assert result.attempts == 1, "a throttled answer returns at once, not retried in place"
        return kind, "throttled"
    if result.attempts == 1:
        return kind, "skip"
    return kind, "outage" if result.unavailable else "retry"


@pytest.fixture
def s3_proxy(s3: S3Server) -> Iterator[FaultProxy]:
    put_objects(s3, "bkt", {"k": BODY})
    with FaultProxy(upstream=s3.endpoint) as proxy:
        yield proxy


@pytest.mark.parametrize("fast", [True, False], ids=["presigned", "botocore"])
@pytest.mark.parametrize(("fault", "fast_kind", "fast_outcome", "boto_kind", "boto_outcome"), S3_FAULTS,
                         ids=[f[0] for f in S3_FAULTS])
def test_s3_faults_over_real_connections(s3_proxy: FaultProxy, tmp_path: Path, fast: bool, fault: str,
                                         fast_kind: str, fast_outcome: str, boto_kind: str,
                                         boto_outcome: str) -> None:
    s3_proxy.set_plan("/bkt/k", [fault] * 4)
    # Every GET takes the presigned fast path; botocore's GETs are its fallback when presigned
    # URLs are refused (the faults then apply to botocore's requests).
    s3_proxy.refuse_presigned = not fast
    remote = S3Remote(url="s3://bkt", endpoint_url=s3_proxy.endpoint, concurrency=2,
                      connect_timeout=2, read_timeout=1)
    try:
        result = fetch_once(tmp_path, remote, version=MD5)
    finally:
        remote.close()
    expected = (fast_kind, fast_outcome) if fast else (boto_kind, boto_outcome)
    assert decided(result) == expected
    assert "X-Amz-Signature" not in (result.error or "")


@pytest.fixture
def http_proxy(tmp_path: Path) -> Iterator[FaultProxy]:
    """A plain HTTP server with /bkt/k, behind the fault proxy (the https:// remote's path)."""

    class Quiet(SimpleHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

    (tmp_path / "www" / "bkt").mkdir(parents=True)
    (tmp_path / "www" / "bkt" / "k").write_bytes(BODY)
    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(Quiet, directory=str(tmp_path / "www")))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with FaultProxy(upstream=f"http://127.0.0.1:{server.server_address[1]}") as proxy:
            yield proxy
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("fault", "kind", "expected"), [
    ("reset-body", "Transient", "retry"),
    ("truncate", "Transient", "retry"),
    # No "corrupt" row: an HTTP ETag is opaque (a 32-hex one may be no md5: KMS, a CDN), so
    # http(s) bodies are checked by their size only (docs/listing.md, "http(s):// key lists").
    ("stall", "Unavailable", "outage"),
    ("garbage", "Transient", "retry"),  # aiohttp's 400 for a garbled status line: no server's answer
    ("503", "Transient", "retry"),  # quirk: not counted toward an outage
    ("429", "Throttled", "throttled"),
    ("404", "NotFound", "skip"),
    ("403", "Denied", "skip"),
])
def test_http_faults_over_real_connections(http_proxy: FaultProxy, tmp_path: Path, fault: str, kind: str,
                                           expected: str) -> None:
    http_proxy.set_plan("/bkt/k", [fault] * 4)
    remote = HTTPRemote(url=f"{http_proxy.endpoint}/bkt", read_timeout=1)
    result = fetch_once(tmp_path, remote, version=MD5)
    assert decided(result) == (kind, expected)


def test_file_failures(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    remote = FileRemote(url=f"file://{tmp_path / 'data'}")
    assert decided(fetch_once(tmp_path, remote, version="mtime:1")) == ("NotFound", "skip")
    (tmp_path / "data" / "k").mkdir()  # a folder where the object was: EISDIR, no rule knows it
    assert decided(fetch_once(tmp_path, remote, version="mtime:1")) == ("IsADirectoryError", "skip")
    os.rmdir(tmp_path / "data" / "k")
    (tmp_path / "data" / "k").write_bytes(BODY[:10])  # shorter than listed: changed
    assert decided(fetch_once(tmp_path, remote, version="mtime:1")) == ("Changed", "skip")
