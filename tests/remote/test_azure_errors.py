"""The Azure SDK's exceptions (azure-core's, raised by azure-storage-blob under adlfs for
``az://``) typed by :func:`~epochfs.sidecar.remote.errors.azure_kind`: the answers Azurite cannot
be made to give (throttling, a server error) are built here as the SDK builds them, from a status
and an Azure Storage error code; the rest are met against Azurite in test_conformance.py.
"""

from __future__ import annotations

from typing import Any

import pytest

ace = pytest.importorskip("azure.core.exceptions", reason="az:// needs the Azure SDK (the azure extra)")
blob = pytest.importorskip("azure.storage.blob", reason="az:// needs the Azure SDK (the azure extra)")
StorageErrorCode = blob.StorageErrorCode

from epochfs.sidecar.remote.base import (  # noqa: E402 - after the skip when the SDK is missing
    Changed,
    CredentialsRefused,
    Denied,
    Kind,
    NotFound,
    Throttled,
    Transient,
    Unavailable,
)
from epochfs.sidecar.remote.errors import (  # noqa: E402
    Translated,
    azure_kind,
    library_kind,
    may_answer_later,
    translate,
)
from epochfs.sidecar.remote.refusal import refusal_cause  # noqa: E402


def answer(cls: Any, status: int, code: str = "") -> BaseException:
    """An SDK error answer: the class azure-storage-blob raises for it, its status and its
    Azure Storage error code (``x-ms-error-code``) as the SDK keeps it: a ``StorageErrorCode``
    (a str enum whose ``str()`` is the member's name, ``StorageErrorCode.SERVER_BUSY``), or the
    code itself when the SDK does not know it."""
    e = cls(message=f"{status} {code}")
    e.status_code = status
    try:
        e.error_code = StorageErrorCode(code) if code else None
    except ValueError:
        e.error_code = code
    return e


@pytest.mark.parametrize("exc,kind", [
    (answer(ace.ResourceNotFoundError, 404, "BlobNotFound"), NotFound),
    (answer(ace.ResourceNotFoundError, 404, "ContainerNotFound"), NotFound),
    (answer(ace.ResourceModifiedError, 412, "ConditionNotMet"), Changed),
    (answer(ace.ClientAuthenticationError, 403, "AuthenticationFailed"), CredentialsRefused),
    (answer(ace.ClientAuthenticationError, 401, "InvalidAuthenticationInfo"), CredentialsRefused),
    (answer(ace.HttpResponseError, 403, "AuthenticationFailed"), CredentialsRefused),
    (answer(ace.HttpResponseError, 403, "AuthorizationFailure"), CredentialsRefused),
    (answer(ace.HttpResponseError, 403, "AuthorizationPermissionMismatch"), Denied),
    (answer(ace.HttpResponseError, 409, "BlobArchived"), Denied),
    (answer(ace.HttpResponseError, 503, "ServerBusy"), Throttled),
    (answer(ace.HttpResponseError, 429), Throttled),
    (answer(ace.HttpResponseError, 500, "InternalError"), Unavailable),
    (answer(ace.HttpResponseError, 500, "OperationTimedOut"), Unavailable),
    (answer(ace.HttpResponseError, 502), Unavailable),
    (ace.IncompleteReadError("the body was cut short"), Transient),
    (ace.ServiceRequestError("connection refused"), Unavailable),
    (ace.ServiceRequestTimeoutError("connect timed out"), Unavailable),
    (ace.ServiceResponseTimeoutError("read timed out"), Unavailable),
    (ace.ServiceResponseError("the connection broke mid-answer"), Transient),
    (ace.ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token"), CredentialsRefused),
])
def test_each_azure_error_has_its_kind(exc: BaseException, kind: Kind) -> None:
    assert azure_kind(exc) is kind
    failure = translate(exc, azure_kind, what="data/a.bin")
    assert type(failure) is kind and str(failure).startswith("data/a.bin: ")
    assert library_kind(exc) is kind  # the listing's check, which does not know the library


def test_a_reset_under_a_broken_answer_is_an_outage() -> None:
    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError as reset:
            raise ace.ServiceResponseError("the connection broke", error=reset) from reset
    except ace.ServiceResponseError as e:
        assert type(translate(e, azure_kind)) is Unavailable


def test_translated_raises_the_kind_where_the_sdk_raised() -> None:
    with pytest.raises(Throttled) as raised, Translated(azure_kind):
        raise answer(ace.HttpResponseError, 503, "ServerBusy")
    assert isinstance(raised.value.__cause__, ace.HttpResponseError)


@pytest.mark.parametrize("exc,later", [
    (answer(ace.HttpResponseError, 503, "ServerBusy"), True),
    (ace.ServiceRequestError("connection refused"), True),
    (answer(ace.ClientAuthenticationError, 403, "AuthenticationFailed"), False),
    (answer(ace.ResourceNotFoundError, 404, "ContainerNotFound"), False),
])
def test_a_listing_that_failed_may_answer_later_or_not(exc: BaseException, later: bool) -> None:
    """``epochfs sample`` exits 1 (started again) when the store may answer later, 2 when not."""
    assert may_answer_later(exc) is later


def test_an_azure_refusal_names_its_cause() -> None:
    """What a refused first listing says is wrong, for the fix the sampler's exit 2 names: the
    Azure Storage error code decides, whether the SDK keeps it as a ``StorageErrorCode`` (it
    makes one of the ``x-ms-error-code`` of an answer its generated layer did not map, a 403
    among them) or as the plain code (a 401 or 404 that layer mapped). The enum's ``str()`` is
    its member's name, so ContainerNotFound was a missing folder and AuthenticationFailed (a
    wrong key) a refused access."""
    plain = ace.ResourceNotFoundError(message="404 ContainerNotFound")
    plain.status_code, plain.error_code = 404, "ContainerNotFound"
    cases = {
        "ContainerNotFound": answer(ace.ResourceNotFoundError, 404, "ContainerNotFound"),
        "ContainerNotFound as a str": plain,
        "AuthenticationFailed": answer(ace.ClientAuthenticationError, 403, "AuthenticationFailed"),
        "AuthorizationPermissionMismatch": answer(ace.HttpResponseError, 403,
                                                  "AuthorizationPermissionMismatch"),
        "BlobNotFound": answer(ace.ResourceNotFoundError, 404, "BlobNotFound"),
    }
    assert isinstance(getattr(cases["ContainerNotFound"], "error_code", None), StorageErrorCode)
    assert {name: refusal_cause(exc) for name, exc in cases.items()} == {
        "ContainerNotFound": "bucket",
        "ContainerNotFound as a str": "bucket",
        "AuthenticationFailed": "credentials",
        "AuthorizationPermissionMismatch": "access",
        "BlobNotFound": "missing",
    }
