"""A refusal of the credentials says one cause wherever it is met: at the start
(:func:`~epochfs.sidecar.remote.refusal.refusal_cause`, whose exit line names the credentials to
check) and later (:func:`~epochfs.sidecar.remote.librules.s3_kind`: an outage that keeps the keys).
Two copies of the codes had drifted: ``ExpiredTokenException`` was an outage to the downloader but
sent a user at the start to ``--remote and --endpoint-url``."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from epochfs.sidecar.remote.base import CredentialsRefused
from epochfs.sidecar.remote.librules import AZURE_CREDENTIAL_CODES, S3_CREDENTIAL_CODES, s3_kind
from epochfs.sidecar.remote.refusal import refusal_cause


def s3_answer(code: str, status: int = 400) -> ClientError:
    """botocore's error for an S3 answer of ``status`` with the error code ``code``."""
    return ClientError({"Error": {"Code": code, "Message": "refused"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "ListObjectsV2")


@pytest.mark.parametrize("code", sorted(S3_CREDENTIAL_CODES))
def test_each_s3_credential_code_is_the_credentials_at_the_start_and_later(code: str) -> None:
    assert s3_kind(400, code) is CredentialsRefused
    assert refusal_cause(s3_answer(code)) == "credentials", code


@pytest.mark.parametrize("code", sorted(AZURE_CREDENTIAL_CODES))
def test_azure_credential_codes_are_the_credentials_at_the_start(code: str) -> None:
    error = s3_answer(code, status=403)
    assert refusal_cause(error) == "credentials", code


def test_a_known_key_without_the_right_is_access_not_credentials() -> None:
    assert refusal_cause(s3_answer("AccessDenied", status=403)) == "access"


def test_every_rule_and_code_set_is_importable_from_errors() -> None:
    """errors.py says every name of librules is importable from it too (callers import the kinds,
    the rules and the codes from one module): a new code set added to librules alone broke that."""
    from epochfs.sidecar.remote import errors, librules

    assert set(librules.__all__) <= set(errors.__all__)
    assert all(getattr(errors, name) is getattr(librules, name) for name in librules.__all__)
