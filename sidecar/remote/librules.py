"""Each client library's rule: the kind (:mod:`.base`) that one of its exceptions stands for, or None
when the rule does not know it. The rules read only the exception itself; :mod:`.errors` runs
them over a chain of causes (:func:`~.errors.translate`), after the standard library's verdict.

- S3's error answers by status and ``<Code>`` (:func:`s3_kind`, :func:`s3_error_code`, the
  presigned fast path's :func:`s3_answer`) and botocore's exceptions (:func:`botocore_kind`,
  :func:`botocore_error_code`);
- GCS's answers as gcsfs reports them (:func:`gcs_kind`: a 401 and a token that could not be
  renewed refuse the credentials, but a 401 to an anonymous caller denies one object) and
  aiohttp's exceptions (:func:`aiohttp_kind`: fsspec's ``http(s)://`` and ``gs://``);
- the Azure SDK's under adlfs (:func:`azure_kind`: :data:`AZURE_CREDENTIAL_CODES` and
  ``ClientAuthenticationError`` refuse the credentials);
- :func:`library_kind`, every installed library's rule at once, for callers that do not know
  which library raised.

A module of its own so that a new backend's rule goes here, beside the others (and into
:func:`library_kind`), without touching the translation. Each rule imports its library when it
is called, never when this module is loaded (botocore's only once something else has loaded it:
none of its exceptions can exist before), so loading this module costs the sampler's start-up
nothing.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from typing import Any

from epochfs.sidecar.remote.base import (
    Changed,
    CredentialsRefused,
    Denied,
    Kind,
    NotFound,
    Throttled,
    Transient,
    Unavailable,
)
from epochfs.sidecar.remote.httpget import HTTPStatusError

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
S3_CREDENTIAL_CODES = frozenset({
    "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException",
    "InvalidToken", "TokenRefreshRequired", "InvalidClientTokenId", "AuthFailure",
})
"""S3 error codes that refuse the credentials themselves (an unknown or deleted key, a wrong secret,
an expired session token), whatever the object: :class:`~.base.CredentialsRefused`, the remote's as a
whole. ``AccessDenied`` is not among them: known credentials without the right to one object."""


def status_kind(status: int) -> Kind:
    """The kind of an HTTP error status of one object: 429 is throttling, 5xx the remote's."""
    if status == 429:
        return Throttled
    if status >= 500:
        return Unavailable
    return NotFound if status == 404 else Denied


def s3_kind(status: int, code: str) -> Kind:
    """The kind of an S3 error answer, from its status and its error code."""
    if code in S3_CREDENTIAL_CODES:
        return CredentialsRefused
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


def botocore_kind(e: BaseException) -> Kind | None:
    """The kind of a botocore exception: S3's error answers by status and code (a refusal of the
    credentials, or none found, the remote's as a whole), transport
    errors as retried (an outage when the connection could not be made or timed out, or, seen
    by :func:`~.errors.translate`, when a reset lies under them). None while botocore is not loaded (the
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
    if isinstance(e, (bce.NoCredentialsError, bce.PartialCredentialsError, bce.CredentialRetrievalError)):
        return CredentialsRefused  # none found (a credentials file emptied, a token not yet renewed)
    if isinstance(e, (bce.EndpointConnectionError, bce.ConnectTimeoutError, bce.ReadTimeoutError)):
        return Unavailable
    if isinstance(e, (bce.HTTPClientError, bce.ConnectionError, bce.IncompleteReadError,
                      bce.FlexibleChecksumError, ResponseParserError)):
        # FlexibleChecksumError: botocore's own check of the body against x-amz-checksum-*.
        return Transient
    return None


def botocore_error_code(e: BaseException) -> str:
    """The S3 error code of a botocore ``ClientError`` ("" for any other exception): what the S3
    remote asks of an answer that is not a failure to it (``InvalidRange``: a range that starts at
    or past the end reads as empty)."""
    response: Any = getattr(e, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


GCS_THROTTLE_REASONS = ("rateLimitExceeded", "userRateLimitExceeded", "Rate Limit Exceeded")
"""How GCS says it throttles besides a 429: these reasons (a 403 on older APIs), or their message
(all that gcsfs keeps of a 403)."""
GCS_ANONYMOUS = "Anonymous caller"
"""How GCS's answer to a request without credentials begins (``Anonymous caller does not have
storage.objects.get access ...``, a 401): what refuses it is the object's permission, as a 403
does to known credentials, for there are no credentials to refuse or rotate."""


def gcs_kind(e: BaseException) -> Kind | None:
    """The kind of a GCS error answer as gcsfs reports it (once its own retries are spent, one
    try here: :func:`~.gcs.one_try_gcs`), recognised by its attributes, not its class (gcsfs
    is optional): its ``HttpError`` by the status it keeps (``code``: 429 throttling, 401 the
    credentials refused, 5xx an outage), else by a throttling reason in its text; a 403, which
    gcsfs raises as a bare ``OSError("Forbidden: <path>\\n<message>")``, denied (known credentials
    without ``storage.objects.get`` on that object), unless its message says a rate limit.
    A 401 is a token GCS does not take (revoked, expired), and gcsfs raises a token it could not
    renew (google-auth's ``RefreshError``: ``invalid_grant``, a deleted key) as one too: never one
    object's. But GCS's 401 to an anonymous caller (:data:`GCS_ANONYMOUS`: a public bucket read
    without credentials) is denied: an object that caller may not read, skipped as the 403 is.
    Other errors, gcsfs's 404 (FileNotFoundError) among them, are not GCS's."""
    if type(e).__name__ == "HttpError":
        code = getattr(e, "code", None)
        if any(r in str(e) for r in GCS_THROTTLE_REASONS):
            return Throttled
        if code == 401:
            return Denied if GCS_ANONYMOUS in str(e) else CredentialsRefused
        return status_kind(code) if isinstance(code, int) and 400 <= code <= 599 else None
    if type(e) is OSError and e.errno is None and str(e).startswith("Forbidden: "):
        return Throttled if any(r in str(e) for r in GCS_THROTTLE_REASONS) else Denied
    return CredentialsRefused if refused_google_token(e) else None


def refused_google_token(e: BaseException) -> bool:
    """Whether ``e`` is google-auth's failure to get a token (``RefreshError``: the token endpoint
    answered ``invalid_grant`` for a deleted key or a revoked grant, or the metadata server gave
    none), where it reaches a caller unwrapped. google-auth is loaded with gcsfs: none of its
    exceptions exist before."""
    auth = sys.modules.get("google.auth.exceptions")
    return auth is not None and isinstance(e, auth.RefreshError)


def aiohttp_kind(e: BaseException) -> Kind | None:
    """The kind of an aiohttp exception (fsspec's ``http(s)://``, gcsfs). A 5xx answer is
    retried (:class:`~.base.Transient`) but not counted toward an outage; a 429 is
    throttling; a redirect loop (``TooManyRedirects``, a status of 0: no answer of its own to
    type) is retried as a passing misconfiguration, then skipped, never taken as a refusal or as
    not found. fsspec turns all of these into FileNotFoundError (:func:`~.errors.translate` looks
    under it)."""
    gcs = gcs_kind(e)
    if gcs is not None:
        return gcs
    try:
        import aiohttp
    except ImportError:  # pragma: no cover - aiohttp comes with the sidecar extra
        return None
    if isinstance(e, aiohttp.TooManyRedirects):
        return Transient
    if isinstance(e, aiohttp.ClientResponseError):
        if unparsed_answer(e):  # aiohttp's 400 for an answer it could not read: no server's status
            return Transient
        if e.status == 429:
            return Throttled
        return Transient if e.status >= 500 else status_kind(e.status)
    if isinstance(e, (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError,
                      aiohttp.ServerTimeoutError)):
        return Unavailable
    if isinstance(e, aiohttp.ClientError):
        return Transient
    return None


def unparsed_answer(e: BaseException) -> bool:
    """Whether ``e`` is aiohttp's report of an answer it could not parse (a garbled status line,
    a Content-Length shorter than the body that left bytes before the next answer, a TLS record
    where HTTP was due): aiohttp raises it as ``ClientResponseError(status=400)`` from its parser's
    ``HttpProcessingError`` (``BadStatusLine``, ``BadHttpMessage``), a status no server sent. A
    garbled answer is retried, as on every backend; a server's own 400 or 403 has no such cause."""
    from aiohttp.http_exceptions import HttpProcessingError

    seen: set[int] = set()
    link: BaseException | None = e
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, HttpProcessingError):
            return True
        link = link.__cause__ or link.__context__
    return False


# ---------------------------------------------------------------------------- Azure Blob
AZURE_THROTTLE_CODES = frozenset({"ServerBusy", "TooManyRequests"})
"""Azure Storage error codes that ask for fewer requests (``503 ServerBusy``: the account's
ingress, egress or request rate is over its limit)."""
AZURE_RETRY_CODES = frozenset({"InternalError", "OperationTimedOut", "ServerBusy"})
"""Azure Storage error codes worth another try whatever their status."""
AZURE_CREDENTIAL_CODES = frozenset({
    "AuthenticationFailed", "InvalidAuthenticationInfo", "NoAuthenticationInformation",
    "AuthorizationFailure", "KeyBasedAuthenticationNotPermitted",
})
"""Azure Storage error codes that refuse the credentials themselves, whatever the blob:
:class:`~.base.CredentialsRefused`, the remote's as a whole. ``AuthenticationFailed`` (403): a key
rotated away, a SAS whose signature fails or that expired (``Signed expiry time``) or whose stored
access policy was removed; ``InvalidAuthenticationInfo`` (401): a bearer token expired or
revoked; ``NoAuthenticationInformation`` (401): none sent; ``AuthorizationFailure`` (403): the
account's firewall refusing this client, and Azurite's answer to a wrong key or a revoked SAS;
``KeyBasedAuthenticationNotPermitted`` (403): the account no longer takes keys. Not among them:
``AuthorizationPermissionMismatch`` (403), known credentials without the right to this blob
(a role or a SAS scoped elsewhere), denied as S3's ``AccessDenied`` is."""


def azure_kind(e: BaseException) -> Kind | None:
    """The kind of an Azure SDK exception (azure-core's, raised by azure-storage-blob under
    adlfs), else aiohttp's (the SDK's transport under adlfs): an answer by its class, its
    ``error_code`` and its status (``BlobNotFound`` not found, ``ServerBusy`` throttling, 5xx an
    outage, a refusal of the credentials the remote's as a whole: :data:`AZURE_CREDENTIAL_CODES`,
    and ``ClientAuthenticationError``, which the SDK raises for a 401 and for those codes, and
    azure-identity for a token it could not get); a request that could not be sent (refused,
    timed out) an outage, but denied over a TLS certificate that does not verify; a response cut
    short or garbled retried."""
    from azure.core import exceptions as ace

    if isinstance(e, ace.ResourceNotFoundError):
        return NotFound
    if isinstance(e, ace.ResourceModifiedError):  # 412: an If-Match on the listed ETag failed
        return Changed
    if isinstance(e, ace.ClientAuthenticationError):  # a refused key, SAS or token (azure-identity too)
        return CredentialsRefused
    if isinstance(e, ace.DecodeError):  # IncompleteReadError among them: a body cut short
        return Transient
    if isinstance(e, ace.HttpResponseError):
        return azure_answer_kind(int(getattr(e, "status_code", None) or 0), getattr(e, "error_code", None))
    if isinstance(e, (ace.ServiceRequestError, ace.ServiceResponseTimeoutError)):
        import ssl

        inner = getattr(e, "inner_exception", None) or e.__cause__
        if isinstance(inner, ssl.SSLCertVerificationError):
            return Denied  # a certificate that does not verify: another try meets it again
        return Unavailable  # not sent (refused, no route, timed out), or no answer in time
    if isinstance(e, ace.ServiceResponseError):
        return Transient  # a connection cut mid-answer: an outage when a reset lies under it
    return aiohttp_kind(e)


def azure_answer_kind(status: int, error_code: object) -> Kind | None:
    """The kind of an Azure Storage error answer by its status and its ``error_code`` as the SDK
    keeps it (azure-storage's ``StorageErrorCode``, whose ``str()`` is its member's name: its
    ``value`` is the code; or the code itself), None for one with neither."""
    code = str(getattr(error_code, "value", error_code) or "")
    if code in AZURE_CREDENTIAL_CODES:
        return CredentialsRefused
    if code in AZURE_THROTTLE_CODES or status == 429:
        return Throttled
    if code in AZURE_RETRY_CODES or status >= 500:
        return Unavailable
    return status_kind(status) if status else None


def library_kind(e: BaseException) -> Kind | None:
    """botocore's verdict, else aiohttp's, else the Azure SDK's (each only where its library is
    installed): the rule for an exception whose library is not known (an S3 ``list_page`` wraps
    botocore's ``SlowDown`` in a :class:`~.base.RemoteError` untyped; fsspec's reads of an index raise
    aiohttp's; adlfs's listing the Azure SDK's)."""
    for rule in (botocore_kind, aiohttp_kind, azure_kind):
        try:
            kind = rule(e)
        except ImportError:
            continue
        if kind is not None:
            return kind
    return None


__all__ = [
    "AZURE_CREDENTIAL_CODES",
    "AZURE_RETRY_CODES",
    "AZURE_THROTTLE_CODES",
    "GCS_ANONYMOUS",
    "GCS_THROTTLE_REASONS",
    "S3_CREDENTIAL_CODES",
    "S3_RETRY_CODES",
    "S3_THROTTLE_CODES",
    "aiohttp_kind",
    "azure_answer_kind",
    "azure_kind",
    "botocore_error_code",
    "botocore_kind",
    "gcs_kind",
    "library_kind",
    "refused_google_token",
    "s3_answer",
    "s3_error_code",
    "s3_kind",
    "status_kind",
    "unparsed_answer",
]
