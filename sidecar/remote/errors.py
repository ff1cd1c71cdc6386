"""Translation of each client library's exceptions into the typed failures of the remote
(:mod:`.base`: not found, changed, denied, transient, throttled, unavailable), where they arise, so
the downloader and the listing decide from the kind alone and never look inside another library's
exceptions. One module for every library, the listing's questions included:

- a *rule* per library names the kind of one exception: :func:`stdlib_kind` (sockets,
  ``http.client``, ``ssl``, files) for every remote, :func:`botocore_kind` for S3 through
  botocore, :func:`aiohttp_kind` (with :func:`gcs_kind`) for fsspec's ``http(s)://`` and
  ``gs://``, :func:`azure_kind` for the Azure SDK under adlfs (``az://``), and
  :func:`fast_path_failure` for S3's presigned GETs (:mod:`.httpget`), whose error document is
  read with :mod:`xml.etree`;
- :func:`translate` runs one rule over an exception and its causes in a single walk, and
  :class:`Translated` re-raises what it finds where a backend reads (``with Translated(rule):``);
- :func:`library_kind` is every installed library's rule at once, for callers that do not know
  which library raised (:func:`~epochfs.sidecar.remote.backoff.is_throttled`,
  :func:`may_answer_later`), and :func:`failure_reason` says a failure's cause in a few words.

An exception no rule knows (a bug, an unusual ``OSError`` such as EIO) is left as it is; the
downloader skips the object without retrying. The rules keep three behaviours on purpose
(tests/remote/test_remote_errors.py holds the table): an ``http(s)://`` remote's 5xx is retried
but not counted toward an outage; fsspec reports such a remote that cannot be reached as
FileNotFoundError (not found; an HTTP answer under it, a 401, 403 or 429, is typed by that
answer); and botocore's ``SSLError`` (even a certificate that fails) is retried. Throttling is
its own kind, :class:`Throttled`, never an outage nor a reason to skip. Every backend's reads
and listing meet a store that throttles, refuses or is down as the same kind
(tests/remote/test_conformance.py, against each backend's own server).
"""

from __future__ import annotations

import http
import http.client
import os
import socket
import ssl
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator
from typing import Any

from epochfs.sidecar.remote.base import (
    Changed,
    Denied,
    Kind,
    NotFound,
    RemoteError,
    RemoteFailure,
    Throttled,
    Transient,
    Unavailable,
)
from epochfs.sidecar.remote.httpget import HTTPStatusError, ProxyError

Rule = Callable[[BaseException], "Kind | None"]
"""A library's translation: the kind one exception stands for, or None when it does not know it."""


def _asyncio_timeout() -> type[BaseException]:
    """``asyncio.TimeoutError`` (its own class before Python 3.11) where asyncio is loaded: an
    exception of it cannot exist otherwise, and importing asyncio costs the sampler ~25 ms of
    start-up for nothing."""
    asyncio = sys.modules.get("asyncio")
    return asyncio.TimeoutError if asyncio is not None else TimeoutError


def stdlib_kind(e: BaseException) -> Kind | None:
    """The kind of a standard-library error (sockets, ``http.client``, ``ssl``, files), or of a
    failure already typed further down a chain."""
    if isinstance(e, RemoteFailure):
        return type(e)
    if isinstance(e, FileNotFoundError):
        return NotFound
    if isinstance(e, (PermissionError, ssl.SSLCertVerificationError)):
        return Denied  # a certificate that fails is a configuration problem, not a passing one
    if isinstance(e, (ConnectionError, TimeoutError, _asyncio_timeout())):
        return Unavailable  # refused, reset, aborted (also socket.timeout, fsspec's FSTimeoutError)
    if isinstance(e, (http.client.HTTPException, ssl.SSLError)):
        # A truncated or garbled response (IncompleteRead, BadStatusLine...); a TLS connection
        # cut mid-body (SSLEOFError). RemoteDisconnected is a ConnectionResetError: above.
        return Transient
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, outermost first."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def failure_reason(exc: BaseException) -> str:
    """The cause of ``exc`` in a few words for a message: ``HTTP 404 Not Found``, ``connection
    refused``, ``host name does not resolve (...)``, ``timed out``, a TLS failure; else the text of
    the first exception of the chain that says more than a URL. fsspec reports an http(s) URL it
    cannot read as ``FileNotFoundError(url)``, whose text is only the URL again: the status of a
    link further down the chain says what happened."""
    links = list(_chain(exc))
    for link in links:
        status = getattr(link, "status", None)  # aiohttp's ClientResponseError, HTTPStatusError...
        if isinstance(status, int) and 100 <= status <= 599:
            phrase = getattr(link, "message", None) or getattr(link, "reason", None)
            if not isinstance(phrase, str) or not phrase:
                try:
                    phrase = http.HTTPStatus(status).phrase
                except ValueError:
                    phrase = ""
            return f"HTTP {status} {phrase}".rstrip()
    for link in links:
        if isinstance(link, socket.gaierror):
            return f"host name does not resolve ({link.strerror or link})"
    for link in links:
        if isinstance(link, ssl.SSLCertVerificationError):
            return f"TLS certificate refused ({link.verify_message or link})"
        if isinstance(link, ssl.SSLError):
            return f"TLS failed ({link.reason or link})"
    for link in links:
        if isinstance(link, (TimeoutError, _asyncio_timeout())):
            return "timed out"
    for link in links:
        if isinstance(link, OSError) and isinstance(link.errno, int) and link.errno > 0:
            text = os.strerror(link.errno)
            return text[:1].lower() + text[1:]
    for link in links:
        text = str(link).strip()
        if text and not (" " not in text and "://" in text):  # more than a bare URL
            return text
    return type(exc).__name__


def _link_kind(e: BaseException, rule: Rule | None) -> Kind | None:
    """The standard library's verdict first; the library's own rule for what it does not know,
    or to tell that an error of both kinds (aiohttp's TLS handshake error) is an outage."""
    found = stdlib_kind(e)
    own = rule(e) if rule is not None else None
    if found is None:
        return own
    if found is Transient and own is not None and issubclass(own, Unavailable):
        return Unavailable
    return found


def _http_answer(causes: list[BaseException]) -> BaseException | None:
    """The HTTP answer among ``causes`` that is not a 404 (an exception with its ``status``), or
    None. fsspec's HTTP filesystem raises FileNotFoundError from whatever failed its look at a URL
    (a HEAD, then a GET): under it a 401, a 403 or a 429 says what the store answered, which a
    not-found would hide (a throttled server's objects skipped as gone). A connection that could
    not be made has no status and stays not found (the quirk kept on purpose)."""
    for cause in causes:
        status = getattr(cause, "status", None)
        if isinstance(status, int) and 400 <= status <= 599 and status != 404:
            return cause
    return None


def translate(exc: BaseException, rule: Rule | None = None, *, what: str = "") -> RemoteFailure | None:
    """The typed failure ``exc`` stands for, or None when no rule knows it (leave it as it is).

    One walk down the chain of causes: the outermost exception that a rule knows gives the kind,
    but a FileNotFoundError raised over an HTTP answer, which that answer gives, and quotes
    (:func:`_http_answer`).
    When that kind is :class:`Transient`, the causes below it may still show an outage: a
    botocore or aiohttp wrapper around a connection reset or a timeout is :class:`Unavailable`,
    one around a truncated body is not. ``what`` (the key) starts the message when given.
    """
    if isinstance(exc, RemoteFailure):
        return exc
    kind: Kind | None = None
    said = exc  # what the message quotes
    links = list(_chain(exc))
    for i, link in enumerate(links):
        found = _link_kind(link, rule)
        if found is None:
            continue
        if kind is None:
            kind = found
            answer = _http_answer(links[i + 1:]) if isinstance(link, FileNotFoundError) else None
            answered = _link_kind(answer, rule) if answer is not None else None
            if answer is not None and answered is not None:
                kind, said = answered, answer
            if kind is not Transient:
                break
        elif issubclass(found, Unavailable):
            kind = Unavailable
            break
        elif not issubclass(found, Transient):
            break  # a cause that is not about the connection: no outage
    if kind is None:
        return None
    prefix = f"{what}: " if what else ""
    failure = kind(f"{prefix}{type(said).__name__}: {said}".rstrip(": "))
    failure.__cause__ = exc
    return failure


class Translated:
    """A context manager that re-raises a library's exception as its typed failure, where it
    arises (``with Translated(botocore_kind): body.read(n)``); an exception no rule knows, and
    one already typed, pass through unchanged. Reusable and thread-safe: it holds only the rule."""

    __slots__ = ("rule",)

    def __init__(self, rule: Rule | None = None) -> None:
        self.rule = rule

    def __enter__(self) -> None:
        return None

    def __exit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        if not isinstance(exc, Exception) or isinstance(exc, RemoteFailure):
            return
        failure = translate(exc, self.rule)
        if failure is not None:
            raise failure from exc


# ---------------------------------------------------------------------------- HTTP and S3
S3_THROTTLE_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests",
})
"""S3 error codes that ask for fewer requests, whatever their status (400 on some stores)."""
S3_RETRY_CODES = S3_THROTTLE_CODES | frozenset({
    "RequestTimeout", "RequestTimeTooSkewed", "InternalError", "ServiceUnavailable",
    "500", "502", "503", "504",  # botocore's code when the error had no body
})
"""S3 error codes worth another try whatever their status."""


def status_kind(status: int) -> Kind:
    """The kind of an HTTP error status of one object: 429 is throttling, 5xx the remote's."""
    if status == 429:
        return Throttled
    if status >= 500:
        return Unavailable
    return NotFound if status == 404 else Denied


def s3_kind(status: int, code: str) -> Kind:
    """The kind of an S3 error answer, from its status and its error code."""
    if code in S3_THROTTLE_CODES:
        return Throttled
    if code in S3_RETRY_CODES:
        return Unavailable
    if code == "NoSuchKey":
        return NotFound
    return status_kind(status)


def s3_error_code(document: bytes) -> str:
    """The ``<Code>`` of an S3 error document (``<Error><Code>SlowDown</Code>...</Error>``), or
    "" when there is none (an empty body, a proxy's HTML page, a document cut short)."""
    try:
        root = ElementTree.fromstring(document)
    except ElementTree.ParseError:
        return ""
    for child in root:
        if child.tag.rpartition("}")[2] == "Code":  # with or without an XML namespace
            return (child.text or "").strip()
    return ""


def s3_answer(e: HTTPStatusError) -> tuple[str, str]:
    """The error code of an S3 error answer and a short description (``HTTP 503 SlowDown``)."""
    code = s3_error_code(e.body)
    return code, f"HTTP {e.status} {code or e.reason}".strip()


def fast_path_failure(exc: BaseException, *, key: str) -> RemoteFailure | None:
    """The typed failure of a presigned GET (:mod:`.httpget`), or None: S3's
    error answer (status and ``<Code>``), a proxy's refusal by its status, else the socket's,
    TLS's or ``http.client``'s error. The message names the key, never the presigned URL."""
    if isinstance(exc, ProxyError):  # 407, or a tunnel the proxy refused: not S3's answer
        return status_kind(exc.status)(f"{key}: {exc}", status=exc.status)
    if isinstance(exc, HTTPStatusError):
        code, why = s3_answer(exc)
        return s3_kind(exc.status, code)(f"{key}: {why}", status=exc.status)
    return translate(exc)


def botocore_kind(e: BaseException) -> Kind | None:
    """The kind of a botocore exception: S3's error answers by status and code, transport
    errors as retried (an outage when the connection could not be made or timed out, or, seen
    by :func:`translate`, when a reset lies under them). None while botocore is not loaded (the
    S3 remote makes its client on first need): none of its exceptions can exist then, and
    importing it here would cost the ~0.3 s the S3 remote saved."""
    if "botocore" not in sys.modules:
        return None
    from botocore import exceptions as bce
    from botocore.parsers import ResponseParserError

    if isinstance(e, bce.ClientError):
        response: dict[str, Any] = dict(e.response or {})
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        return s3_kind(status, str(response.get("Error", {}).get("Code", "")))
    if isinstance(e, (bce.EndpointConnectionError, bce.ConnectTimeoutError, bce.ReadTimeoutError)):
        return Unavailable
    if isinstance(e, (bce.HTTPClientError, bce.ConnectionError, bce.IncompleteReadError,
                      bce.FlexibleChecksumError, ResponseParserError)):
        # FlexibleChecksumError: botocore's own check of the body against x-amz-checksum-*.
        return Transient
    return None


GCS_THROTTLE_REASONS = ("rateLimitExceeded", "userRateLimitExceeded", "Rate Limit Exceeded")
"""How GCS says it throttles besides a 429: these reasons (a 403 on older APIs), or their message
(all that gcsfs keeps of a 403)."""


def gcs_kind(e: BaseException) -> Kind | None:
    """The kind of a GCS error answer as gcsfs reports it (once its own retries are spent, one
    try here: :func:`~.fsspec.one_try_gcs`), recognised by its attributes, not its class (gcsfs
    is optional): its ``HttpError`` by the status it keeps (``code``: 429 throttling, 401 a
    credential refused, 5xx an outage), else by a throttling reason in its text; a 403, which
    gcsfs raises as a bare ``OSError("Forbidden: <path>\\n<message>")``, denied, unless its message
    says a rate limit. Other errors, gcsfs's 404 (FileNotFoundError) among them, are not GCS's."""
    if type(e).__name__ == "HttpError":
        code = getattr(e, "code", None)
        if any(r in str(e) for r in GCS_THROTTLE_REASONS):
            return Throttled
        return status_kind(code) if isinstance(code, int) and 400 <= code <= 599 else None
    if type(e) is OSError and e.errno is None and str(e).startswith("Forbidden: "):
        return Throttled if any(r in str(e) for r in GCS_THROTTLE_REASONS) else Denied
    return None


def aiohttp_kind(e: BaseException) -> Kind | None:
    """The kind of an aiohttp exception (fsspec's ``http(s)://``, gcsfs). A 5xx answer is
    retried but not counted toward an outage, as before failures were typed; a 429 is
    throttling; fsspec already turns a 404, and a connection it cannot make, into
    FileNotFoundError."""
    gcs = gcs_kind(e)
    if gcs is not None:
        return gcs
    try:
        import aiohttp
    except ImportError:  # pragma: no cover - aiohttp comes with the sidecar extra
        return None
    if isinstance(e, aiohttp.ClientResponseError):
        if e.status == 429:
            return Throttled
        return Transient if e.status >= 500 else status_kind(e.status)
    if isinstance(e, (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError,
                      aiohttp.ServerTimeoutError)):
        return Unavailable
    if isinstance(e, aiohttp.ClientError):
        return Transient
    return None


# ---------------------------------------------------------------------------- Azure Blob
AZURE_THROTTLE_CODES = frozenset({"ServerBusy", "TooManyRequests"})
"""Azure Storage error codes that ask for fewer requests (``503 ServerBusy``: the account's
ingress, egress or request rate is over its limit)."""
AZURE_RETRY_CODES = frozenset({"InternalError", "OperationTimedOut", "ServerBusy"})
"""Azure Storage error codes worth another try whatever their status."""


def azure_kind(e: BaseException) -> Kind | None:
    """The kind of an Azure SDK exception (azure-core's, raised by azure-storage-blob under
    adlfs), else aiohttp's (the SDK's transport under adlfs): an answer by its class, its
    ``error_code`` and its status (``BlobNotFound`` not found, a refused key or token denied,
    ``ServerBusy`` throttling, 5xx an outage); a request that could not be sent (refused,
    timed out) an outage; a response cut short or garbled retried."""
    from azure.core import exceptions as ace

    if isinstance(e, ace.ResourceNotFoundError):
        return NotFound
    if isinstance(e, ace.ResourceModifiedError):  # 412: an If-Match on the listed ETag failed
        return Changed
    if isinstance(e, ace.ClientAuthenticationError):  # a refused key, SAS or token (azure-identity too)
        return Denied
    if isinstance(e, ace.DecodeError):  # IncompleteReadError among them: a body cut short
        return Transient
    if isinstance(e, ace.HttpResponseError):
        status = int(getattr(e, "status_code", None) or 0)
        code = getattr(e, "error_code", None) or ""
        code = str(getattr(code, "value", code))  # azure-storage's StorageErrorCode: str() is its name
        if code in AZURE_THROTTLE_CODES or status == 429:
            return Throttled
        if code in AZURE_RETRY_CODES or status >= 500:
            return Unavailable
        return status_kind(status) if status else None
    if isinstance(e, (ace.ServiceRequestError, ace.ServiceResponseTimeoutError)):
        return Unavailable  # not sent (refused, no route, timed out), or no answer in time
    if isinstance(e, ace.ServiceResponseError):
        return Transient  # a connection cut mid-answer: an outage when a reset lies under it
    return aiohttp_kind(e)


def library_kind(e: BaseException) -> Kind | None:
    """botocore's verdict, else aiohttp's, else the Azure SDK's (each only where its library is
    installed): the rule for an exception whose library is not known (an S3 ``list_page`` wraps
    botocore's ``SlowDown`` in a :class:`RemoteError` untyped; fsspec's reads of an index raise
    aiohttp's; adlfs's listing the Azure SDK's)."""
    for rule in (botocore_kind, aiohttp_kind, azure_kind):
        try:
            kind = rule(e)
        except ImportError:
            continue
        if kind is not None:
            return kind
    return None


def may_answer_later(exc: BaseException) -> bool:
    """Whether a remote that failed as ``exc`` at the start may answer later: it could not be
    reached (connection refused or reset, a timeout, a 5xx: a store still starting) or it asked
    for fewer requests, or the resolver could not answer now (``EAI_AGAIN``: the node's DNS
    server down or slow, as in a pod whose cluster DNS is still starting); not when it answered
    with a refusal (no such bucket, access denied), nor when its host name does not exist (a typo
    in ``--endpoint-url``: ``EAI_NONAME``), nor for an error no rule knows. ``epochfs sample``
    exits :data:`~epochfs.sidecar.config.EXIT_RETRY` (75) for the first (the sidecar starts it
    again) and 2 for the rest (the sidecar stops with the reason: docs/sidecar.md)."""
    links = list(_chain(exc))
    names = [link for link in links if isinstance(link, socket.gaierror)]
    if names:
        return all(link.errno == socket.EAI_AGAIN for link in names)
    if any(isinstance(link, (ConnectionError, TimeoutError, _asyncio_timeout())) for link in links):
        return True  # under any wrapper: fsspec reports an http(s) URL it cannot reach as not found
    failure = translate(exc, library_kind)
    return failure is not None and failure.retry


__all__ = [
    "AZURE_RETRY_CODES",
    "AZURE_THROTTLE_CODES",
    "GCS_THROTTLE_REASONS",
    "S3_RETRY_CODES",
    "S3_THROTTLE_CODES",
    "Changed",
    "Denied",
    "Kind",
    "NotFound",
    "RemoteError",
    "RemoteFailure",
    "Rule",
    "Throttled",
    "Transient",
    "Translated",
    "Unavailable",
    "aiohttp_kind",
    "azure_kind",
    "botocore_kind",
    "failure_reason",
    "fast_path_failure",
    "gcs_kind",
    "library_kind",
    "may_answer_later",
    "s3_answer",
    "s3_error_code",
    "s3_kind",
    "status_kind",
    "stdlib_kind",
    "translate",
]
