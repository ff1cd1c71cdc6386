"""``az://`` and ``gs://`` refusals of the credentials themselves are the remote's as a whole
(:class:`CredentialsRefused`: retried, counted toward an outage, the keys kept; a refusal still at
the start), while a refusal of one object to known credentials stays :class:`Denied`.

Each is the store's answer off the wire, parsed by the store's own client library: Azurite's own
refusal of a wrong key and of a revoked SAS (``AuthorizationFailure``) and of a SAS without read
permission (``AuthorizationPermissionMismatch``); Azure's ``AuthenticationFailed`` and
``InvalidAuthenticationInfo`` and GCS's 401 and 403, which the emulators cannot give, from a front
(tests/remote/credential_front.py); a service account key that Google's token endpoint no longer
takes (``invalid_grant``), from a local token endpoint. GCS's credentials are then read again, at
most once every :data:`~epochfs.sidecar.remote.s3creds.REREAD_EVERY` seconds.
"""

from __future__ import annotations

import datetime
import json
import os
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from common import wait_until
from emulators import ACCOUNT, KEY, running_azurite, running_fake_gcs
from remote.answering_front import Answer
from remote.credential_front import (
    AZURE_EXPIRED_SAS,
    AZURE_EXPIRED_TOKEN,
    AZURE_NO_PERMISSION,
    AZURE_REVOKED_KEY,
    GCS_INVALID_CREDENTIALS,
    GCS_NO_OBJECT_ACCESS,
    RefusingFront,
    TokenEndpoint,
    service_account,
)

from epochfs.sidecar.download import failure_kind, is_unavailable
from epochfs.sidecar.listing.refused import refusal
from epochfs.sidecar.remote import Remote, open_remote
from epochfs.sidecar.remote.base import CredentialsRefused, Denied
from epochfs.sidecar.remote.errors import library_kind, may_answer_later, translate
from epochfs.sidecar.remote.fsspec import FsspecRemote

OBJECTS = {"d/a.bin": b"a" * 3000, "d/b.bin": b"b" * 3000}


@pytest.fixture(autouse=True)
def no_store_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """No store's credentials but those a test gives."""
    for name in [n for n in os.environ if n.startswith(("AZURE_", "GOOGLE_", "STORAGE_EMULATOR", "GCSFS_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("NO_GCE_CHECK", "true")


@dataclass
class Failures:
    """What a remote raised for a read, a ranged read and the listing."""

    read: BaseException
    ranged: BaseException
    listing: BaseException


def raised(call: Any) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


def read_all(remote: Remote, key: str = "a.bin") -> bytes:
    reader = remote.open(key)
    try:
        return b"".join(iter(lambda: reader.read(1 << 16), b""))
    finally:
        reader.close()


def failures(remote: Remote) -> Failures:
    return Failures(raised(lambda: read_all(remote)), raised(lambda: remote.read_range("a.bin", 0, 10)),
                    raised(lambda: list(remote.list())))


def assert_credentials_refused(found: Failures, says: str) -> None:
    """Each failure the credentials' refusal (an outage's kind: the downloader keeps the key),
    the listing's too (never passed over as one span's refusal), each a refusal at the start (exit
    2, not started again into it); each quoting the store."""
    for failure in (found.read, found.ranged):
        assert failure_kind(failure) is CredentialsRefused and is_unavailable(failure), repr(failure)
    typed = translate(found.listing, library_kind)
    assert typed is not None and typed.credentials, repr(found.listing)
    assert refusal(found.listing) is None, "a listing refused so is tried again, never passed over"
    for failure in (found.read, found.ranged, found.listing):
        assert not may_answer_later(failure), repr(failure)
        assert says in str(failure) or says in str(failure.__cause__), repr(failure)


# ---------------------------------------------------------------------------- az://
@dataclass
class Azurite:
    endpoint: str
    container: Any


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    with running_azurite(tmp_path_factory.mktemp("azurite")) as endpoint:
        from azure.storage.blob import BlobServiceClient

        with BlobServiceClient(endpoint, credential={"account_name": ACCOUNT, "account_key": KEY}) as service:
            container = service.create_container(f"creds-{uuid.uuid4().hex[:12]}")
            for key, body in OBJECTS.items():
                container.get_blob_client(key).upload_blob(body)
            yield Azurite(endpoint, container)


def _az(azurite: Azurite, monkeypatch: pytest.MonkeyPatch, endpoint: str | None = None, *,
        key: str | None = None, sas: str | None = None) -> Remote:
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT)
    if sas is not None:
        monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", sas)
    else:
        monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", key or KEY)
    url = f"az://{azurite.container.container_name}/d"
    return open_remote(url, endpoint_url=endpoint or azurite.endpoint)


def _sas(azurite: Azurite, **permissions: bool) -> str:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    return generate_container_sas(ACCOUNT, azurite.container.container_name, account_key=KEY,
                                  permission=ContainerSasPermissions(**permissions), expiry=expiry)


def test_azurites_refusal_of_a_wrong_key_refuses_the_credentials(
        azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> None:
    remote = _az(azurite, monkeypatch, key=KEY[:-4] + "AAA=")
    try:
        assert_credentials_refused(failures(remote), "AuthorizationFailure")
    finally:
        remote.close()


AZURE_REFUSALS = {"a rotated key": AZURE_REVOKED_KEY, "an expired SAS": AZURE_EXPIRED_SAS,
                  "an expired token": AZURE_EXPIRED_TOKEN}
"""Azure's own answers to credentials it no longer takes (the SDK raises each as
``ClientAuthenticationError``)."""


@pytest.mark.parametrize("answer", AZURE_REFUSALS.values(), ids=AZURE_REFUSALS.keys())
def test_azures_refusals_of_the_credentials_are_the_remotes_as_a_whole(
        answer: Answer, azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> None:
    origin = azurite.endpoint.rsplit("/", 1)[0]
    with RefusingFront(upstream=origin, rule=lambda _m, _p, _t: answer) as front:
        remote = _az(azurite, monkeypatch, f"{front.url}/{ACCOUNT}")
        try:
            assert_credentials_refused(failures(remote), "Server failed to authenticate the request")
        finally:
            remote.close()


def test_a_blob_the_credentials_may_not_read_is_denied(
        azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SAS that may list but not read (Azurite's own ``AuthorizationPermissionMismatch``), and
    Azure's answer to a role without the right to one blob: that blob denied, skipped at once."""
    remote = _az(azurite, monkeypatch, sas=_sas(azurite, list=True))
    try:
        assert {str(o.key) for o in remote.list()} == {"a.bin", "b.bin"}
        with pytest.raises(Denied, match="AuthorizationPermissionMismatch"):
            remote.open("a.bin")
    finally:
        remote.close()
    origin = azurite.endpoint.rsplit("/", 1)[0]
    refused = quote("d/a.bin", safe="/")
    with RefusingFront(upstream=origin,
                       rule=lambda _m, path, _t: AZURE_NO_PERMISSION if refused in path else None) as front:
        remote = _az(azurite, monkeypatch, f"{front.url}/{ACCOUNT}")
        try:
            with pytest.raises(Denied, match="AuthorizationPermissionMismatch") as denied:
                remote.open("a.bin")
            assert remote.read_range("b.bin", 0, 4) == b"bbbb"
        finally:
            remote.close()
    assert failure_kind(denied.value) is Denied and not is_unavailable(denied.value)


# ---------------------------------------------------------------------------- gs://
@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """fake-gcs-server's endpoint, holding the bucket ``bkt`` with :data:`OBJECTS`."""
    with running_fake_gcs(tmp_path_factory.mktemp("gcs")) as endpoint:
        _post(f"{endpoint}/storage/v1/b?project=test", json.dumps({"name": "bkt"}).encode(),
              "application/json")
        for key, body in OBJECTS.items():
            _post(f"{endpoint}/upload/storage/v1/b/bkt/o?uploadType=media&name={quote(key, safe='')}",
                  body, "application/octet-stream")
        yield endpoint


def _post(url: str, body: bytes, content_type: str) -> None:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def test_gcs_401_refuses_the_credentials_and_its_403_denies_one_object(gcs: str) -> None:
    with RefusingFront(upstream=gcs, rule=lambda _m, _p, _t: GCS_INVALID_CREDENTIALS) as front:
        remote = open_remote("gs://bkt/d", endpoint_url=front.url)
        try:
            assert_credentials_refused(failures(remote), "Invalid Credentials")
        finally:
            remote.close()
    refused = quote("d/a.bin", safe="")
    with RefusingFront(upstream=gcs,
                       rule=lambda _m, path, _t: GCS_NO_OBJECT_ACCESS if refused in path else None) as front:
        remote = open_remote("gs://bkt/d", endpoint_url=front.url)
        try:
            # gcsfs finds a forbidden object's details by listing: its body is what is refused.
            with pytest.raises(Denied, match=r"storage\.objects\.get") as denied:
                read_all(remote)
            assert read_all(remote, "b.bin") == OBJECTS["d/b.bin"]
        finally:
            remote.close()
    assert failure_kind(denied.value) is Denied and not is_unavailable(denied.value)


def test_a_deleted_gcs_key_is_refused_and_a_new_key_file_is_read_again(
        gcs: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The service account's key is deleted (Google's token endpoint answers ``invalid_grant``,
    which gcsfs raises as a 401): each open is the credentials' refusal; ten of them in a row read
    the key file again once (the bound: the file rewritten meanwhile is not read yet); a refusal
    past the bound reads the new key, and the opens after it use it. Opens only: gcsfs's first read
    of a body with credentials asks Google's Storage Control API for the bucket's layout, which an
    emulator does not serve (a minute of retries)."""
    with TokenEndpoint() as tokens, RefusingFront(upstream=gcs) as front:
        key_file = tmp_path / "key.json"
        key_file.write_text(service_account("old", f"{tokens.url}/token"))
        tokens.revoke("old")
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
        remote = open_remote("gs://bkt/d", endpoint_url=front.url)
        assert isinstance(remote, FsspecRemote) and remote.rereads is not None
        rereads = remote.rereads
        try:
            refused = [raised(lambda: remote.open("a.bin")) for _ in range(10)]
            read_again = rereads.generation
            key_file.write_text(service_account("new", f"{tokens.url}/token"))
            refused.append(raised(lambda: remote.open("a.bin")))
            wait_until(lambda: _opens(remote), timeout=30, what="an open with the new key")
            remote.open("b.bin").close()
        finally:
            remote.close()
    assert [failure_kind(e) for e in refused] == [CredentialsRefused] * 11, refused
    assert any("RefreshError" in repr(link) for link in _causes(refused[0])), "under gcsfs's 401"
    assert not may_answer_later(refused[0])
    assert read_again == 1, "ten refusals within the bound read the file once"
    assert tokens.grants["old"] >= 11 and tokens.grants["new"] == 1
    assert front.seen("", 0) == 0 and front.seen("tok-new", 0) >= 2, "only the new token reached the store"


def _opens(remote: Remote) -> bool:
    """Whether ``a.bin`` opens now (a refusal of the credentials reported, as the downloader's is)."""
    try:
        remote.open("a.bin").close()
    except CredentialsRefused:
        return False
    return True


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__ or link.__context__
    return chain
