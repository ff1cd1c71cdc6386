"""What a remote's refusal at the start says is wrong: the cause (:data:`RefusalCause`) that the
sampler's exit 2 turns into the fix it names (:func:`~epochfs.sidecar.sampler.refusals.refusal_fix`:
one line naming the setting to check, never a traceback). Apart from :mod:`.errors` because it
asks a different question: not which kind of failure an exception is (retry, skip, outage) but
which setting a user should check; it reads the same chains of causes, with :mod:`.errors`'
helpers.
"""

from __future__ import annotations

import socket
import ssl
import sys
from typing import Any

from epochfs.sidecar.remote.base import CredentialsRefused, Denied, NotFound
from epochfs.sidecar.remote.errors import (
    _chain,
    gcs_kind,
    s3_error_code,
    tls_answered_by_plain_http,
)
from epochfs.sidecar.remote.httpget import HTTPStatusError
from epochfs.sidecar.remote.librules import AZURE_CREDENTIAL_CODES, S3_CREDENTIAL_CODES
from epochfs.sidecar.remote.trust import TrustSettingError

S3_REGION_CODES = frozenset({
    "PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException",
})
"""S3 error codes that say the request went to, or was signed for, another region."""

class NoSuchBucket(NotFound):
    """The store says that the URL's bucket (or container) does not exist, where its library says
    only "not found" (gcsfs's and adlfs's ``FileNotFoundError``, with no status and no code): the
    typed cause under the :class:`~.base.RemoteError` that names the bucket
    (:meth:`~.fsspec.FsspecRemote.no_objects`), so the refusal's cause is the bucket, as S3's
    ``NoSuchBucket`` is, not a missing path."""


RefusalCause = str
"""What a refused first listing says is wrong, for the fix the sampler names (sampler/refusals.py):
``ca-bundle`` (the CA bundle a setting names cannot be used), ``host`` (the name does not resolve),
``certificate`` (TLS refused it), ``scheme`` (an ``https://`` URL whose server answered plain HTTP),
``aws-config`` (botocore could not use the AWS configuration: no such ``AWS_PROFILE``, a config file
it cannot parse), ``credentials`` (none found, or the store does not accept them), ``access``
(accepted, but not allowed), ``bucket`` (no such bucket or container), ``region`` (another region's
bucket), ``missing`` (no such folder, object or URL)."""


def _gcs_status(link: BaseException) -> int | None:
    """The HTTP status of a GCS error answer as gcsfs raises it, or None: its ``HttpError`` keeps
    the status as ``code`` (a 401 among them), and its 403 is a bare ``OSError("Forbidden:
    <path>\\n<message>")`` with no status at all, which :func:`.errors.gcs_kind` recognises."""
    if type(link).__name__ == "HttpError":  # gcsfs is optional: known by its name, as gcs_kind does
        code = getattr(link, "code", None)
        return code if isinstance(code, int) and 400 <= code <= 599 else None
    return 403 if type(link) is OSError and gcs_kind(link) is not None else None


def _answer_code(link: BaseException) -> tuple[int, str] | None:
    """(HTTP status, error code) of an error answer in one link of a chain: botocore's
    ``ClientError``, a presigned request's :class:`HTTPStatusError` (S3's ``<Code>`` in its
    body), a :class:`NoSuchBucket` (given S3's code), gcsfs's (:func:`_gcs_status`, no code), or
    any exception with an HTTP ``status`` (aiohttp's) or ``status_code`` (the Azure SDK's, whose
    ``error_code`` may be a ``StorageErrorCode``: a str enum whose ``str()`` is the member's name,
    its ``value`` the code)."""
    if "botocore" in sys.modules:
        from botocore import exceptions as bce

        if isinstance(link, bce.ClientError):
            response: dict[str, Any] = dict(link.response or {})
            status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            return status, str(response.get("Error", {}).get("Code", ""))
        if isinstance(link, (bce.NoCredentialsError, bce.PartialCredentialsError)):
            return 401, "NoCredentials"
    if isinstance(link, HTTPStatusError):
        return link.status, s3_error_code(link.body)
    if isinstance(link, NoSuchBucket):
        return 404, "NoSuchBucket"
    gcs = _gcs_status(link)
    if gcs is not None:
        return gcs, ""
    answered = getattr(link, "status", None) or getattr(link, "status_code", None)
    if isinstance(answered, int) and 400 <= answered <= 599:
        code = getattr(link, "error_code", None) or ""
        return answered, str(getattr(code, "value", code))
    return None


def _aws_config_failure(link: BaseException) -> bool:
    """Whether ``link`` is botocore's refusal of the AWS configuration itself, met as it makes
    its client (:func:`.s3client.new_client`): a profile, a config file or a region it cannot use."""
    if "botocore" not in sys.modules:
        return False
    from botocore import exceptions as bce

    return isinstance(link, (bce.ProfileNotFound, bce.ConfigParseError, bce.ConfigNotFound,
                             bce.InvalidConfigError, bce.InvalidRegionError))


def refusal_cause(exc: BaseException) -> RefusalCause | None:
    """What a remote's refusal at the start says is wrong (:data:`RefusalCause`), from the
    exception and its causes; None when nothing in them tells (then the message names the flag
    only). Asked only of failures :func:`may_answer_later` says a restart would meet again."""
    links = list(_chain(exc))
    if any(isinstance(link, TrustSettingError) for link in links):
        return "ca-bundle"
    if any(isinstance(link, socket.gaierror) for link in links):
        return "host"
    if any(isinstance(link, ssl.SSLCertVerificationError) for link in links):
        return "certificate"
    if tls_answered_by_plain_http(exc):
        return "scheme"
    if any(_aws_config_failure(link) for link in links):
        return "aws-config"
    answers = [answer for answer in map(_answer_code, links) if answer is not None]
    # The answer with S3's own code first: a typed failure above it (NotFound, status 404) may
    # carry the status alone, where the presigned request's error document says NoSuchBucket.
    answers.sort(key=lambda answer: not answer[1])
    for status, code in answers:
        if code == "NoCredentials" or code in S3_CREDENTIAL_CODES or code in AZURE_CREDENTIAL_CODES \
                or status == 401:
            return "credentials"
        if code in ("NoSuchBucket", "ContainerNotFound"):
            return "bucket"
        if code in S3_REGION_CODES or status == 301:
            return "region"
        if status == 403:
            return "access"
        if status == 404:
            return "missing"
    for link in links:
        if isinstance(link, CredentialsRefused):  # no answer to read (azure-identity got no token)
            return "credentials"
        if isinstance(link, (PermissionError, Denied)):
            return "access"
        if isinstance(link, (FileNotFoundError, NotADirectoryError, NotFound)):
            return "missing"
    return None


__all__ = [
    "S3_REGION_CODES",
    "NoSuchBucket",
    "RefusalCause",
    "refusal_cause",
]
