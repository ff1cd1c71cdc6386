"""Credentials that stop working mid-run on ``az://`` and ``gs://`` are the remote's as a whole: the
keys are kept (an outage), never skipped as denied; a true denial of one object still skips it.

Typed as a denial of each object, a revoked SAS had every key not yet fetched skipped for good
within a second (Azurite, 60 keys: 40 skipped, the catalog drained), and GCS's 401 the same.

Real parts: ``epochfs sample`` against Azurite and fake-gcs-server. Azure: a SAS bound to a
container's stored access policy, revoked by removing the policy and restored by setting it again
(Azure's own way to revoke a SAS; Azurite refuses it as it refuses a wrong key), and Azure's own
``403 AuthenticationFailed`` to a rotated key, sent by a front (tests/remote/credential_front.py)
while the key is "revoked". GCS: a service account's key file (the chart's files mode:
``GOOGLE_APPLICATION_CREDENTIALS``) whose tokens come from a local token endpoint; the old key is
deleted there (``invalid_grant``) and its access token refused by a front with GCS's 401, then the
file is replaced with a new key, which the remote reads again; one object is refused with GCS's 403 (no
``storage.objects.get``) throughout.
"""

from __future__ import annotations

import datetime
import os
import subprocess
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
    AZURE_REVOKED_KEY,
    GCS_INVALID_CREDENTIALS,
    GCS_NO_OBJECT_ACCESS,
    RefusingFront,
    TokenEndpoint,
    service_account,
)
from sampler_helpers import EPOCHFS, SamplerProc, running_sampler

COUNT = 20
SIZE = 20_000
PACED = ("--capacity", "100Mi", "--max-rate", "40Ki", "--concurrency", "4")
"""About two objects a second: most keys are still to fetch when the credentials stop working."""
STORE_VARIABLES = ("AZURE_", "GOOGLE_", "STORAGE_EMULATOR", "GCE_", "CLOUDSDK_", "GCSFS_")


@pytest.fixture
def no_store_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampler's environment without any store's credentials but those a test gives it."""
    for name in [n for n in os.environ if n.startswith(STORE_VARIABLES)]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("NO_GCE_CHECK", "true")


def objects(prefix: str) -> dict[str, bytes]:
    return {f"{prefix}/{i:05d}.bin": os.urandom(SIZE) for i in range(COUNT)}


def until_kept(sp: SamplerProc, denied: int = 0) -> int:
    """Wait for the sampler to pause on the refused credentials (its outage breaker), or to skip
    more keys than the ``denied`` ones the credentials may not read; the keys skipped then."""
    wait_until(lambda: ("remote refuses the credentials" in sp.log_text()
                        or int(sp.stats()["skipped_total"]) > denied),
               timeout=60, what="the sampler's pause on the refused credentials")
    return int(sp.stats()["skipped_total"])


def until_done(sp: SamplerProc, expected: int) -> dict[str, object]:
    wait_until(lambda: int(sp.stats()["samples"]) + int(sp.stats()["skipped_total"]) >= expected,
               timeout=120, what="every key cached or skipped")
    return sp.stats()


# ---------------------------------------------------------------------------- az://
@dataclass
class Azurite:
    endpoint: str
    service: Any


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    with running_azurite(tmp_path_factory.mktemp("azurite")) as endpoint:
        from azure.storage.blob import BlobServiceClient

        with BlobServiceClient(endpoint, credential={"account_name": ACCOUNT, "account_key": KEY}) as service:
            yield Azurite(endpoint, service)


def _container(azurite: Azurite, data: dict[str, bytes]) -> Any:
    container = azurite.service.create_container(f"rot-{uuid.uuid4().hex[:12]}")
    for key, body in data.items():
        container.get_blob_client(key).upload_blob(body)
    return container


def _reader_policy(container: Any, *, on: bool) -> None:
    """Set (or remove: revoke every SAS bound to it) the container's stored access policy."""
    from azure.storage.blob import AccessPolicy, ContainerSasPermissions

    now = datetime.datetime.now(datetime.timezone.utc)
    policy = AccessPolicy(permission=ContainerSasPermissions(read=True, list=True),
                          start=now - datetime.timedelta(minutes=5), expiry=now + datetime.timedelta(hours=1))
    container.set_container_access_policy(signed_identifiers={"reader": policy} if on else {})


@pytest.mark.long
def test_a_revoked_azure_sas_keeps_every_key_and_its_return_fetches_them(
        azurite: Azurite, no_store_credentials: None, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """The SAS's policy is removed mid-run (Azurite refuses the SAS from then on, as Azure does)
    and set again later: no key is skipped meanwhile, and every key is fetched after."""
    from azure.storage.blob import generate_container_sas

    data = objects("train")
    container = _container(azurite, data)
    _reader_policy(container, on=True)
    name = container.container_name
    sas = generate_container_sas(ACCOUNT, name, account_key=KEY, policy_id="reader")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", sas)
    with running_sampler(tmp_path / "cache", f"az://{name}/train", "--endpoint-url", azurite.endpoint,
                         *PACED) as sp:
        wait_until(lambda: int(sp.stats()["samples"]) >= 4, what="samples with the SAS")
        _reader_policy(container, on=False)
        fetched = int(sp.stats()["samples"])
        skipped = until_kept(sp)
        _reader_policy(container, on=True)
        stats = until_done(sp, COUNT)
        log = sp.log_text()
    assert skipped == 0, f"keys skipped on a revoked SAS:\n{log[-3000:]}"
    assert fetched < COUNT and stats["skipped_total"] == 0 and stats["samples"] == COUNT, log[-3000:]


@pytest.mark.long
def test_azures_refusal_of_a_rotated_key_keeps_every_key(
        azurite: Azurite, no_store_credentials: None, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """Azure's own ``403 AuthenticationFailed`` (what it answers a key rotated away; the SDK raises
    it as ``ClientAuthenticationError``) for a while: kept, then every key fetched."""
    data = objects("train")
    name = _container(azurite, data).container_name
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", KEY)
    revoked: list[bool] = []
    endpoint = azurite.endpoint.rsplit("/", 1)[0]
    front = RefusingFront(upstream=endpoint, rule=lambda _m, _p, _t: AZURE_REVOKED_KEY if revoked else None)
    with front, running_sampler(tmp_path / "cache", f"az://{name}/train", "--endpoint-url",
                                f"{front.url}/{ACCOUNT}", *PACED) as sp:
        wait_until(lambda: int(sp.stats()["samples"]) >= 4, what="samples with the key")
        revoked.append(True)
        skipped = until_kept(sp)
        assert front.seen("", 403) > 0, "the key was refused"
        revoked.clear()
        stats = until_done(sp, COUNT)
        log = sp.log_text()
    assert skipped == 0, f"keys skipped on a refused key:\n{log[-3000:]}"
    assert stats["skipped_total"] == 0 and stats["samples"] == COUNT, log[-3000:]


# ---------------------------------------------------------------------------- gs://
@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_fake_gcs(tmp_path_factory.mktemp("gcs")) as endpoint:
        yield endpoint


def _bucket(endpoint: str, data: dict[str, bytes]) -> str:
    import json
    import urllib.request

    name = f"rot-{uuid.uuid4().hex[:12]}"

    def call(url: str, body: bytes, content_type: str) -> None:
        request = urllib.request.Request(url, data=body, method="POST",
                                         headers={"Content-Type": content_type})
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    call(f"{endpoint}/storage/v1/b?project=test", json.dumps({"name": name}).encode(), "application/json")
    for key, body in data.items():
        call(f"{endpoint}/upload/storage/v1/b/{name}/o?uploadType=media&name={quote(key, safe='')}",
             body, "application/octet-stream")
    return name


def write_credentials(path: Path, text: str) -> None:
    """Replace the credentials file whole, as the kubelet swaps a Secret volume's files."""
    temp = path.with_name(path.name + ".new")
    temp.write_text(text)
    os.replace(temp, path)


DENIED_KEY = "train/00007.bin"
"""The object the credentials may not read (GCS's 403 for it, whatever the token)."""


@pytest.mark.long
def test_a_rotated_gcs_credentials_file_is_read_again_and_only_the_denied_key_is_skipped(
        gcs: str, no_store_credentials: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The old key is deleted mid-run (its access token refused with 401, its renewal with
    ``invalid_grant``) and the file then holds a new key: no key is skipped for it, the new
    credentials are read and every key is fetched with them, but the one object the credentials
    may not read (403), skipped."""
    data = objects("train")
    bucket = _bucket(gcs, data)
    revoked: set[str] = set()

    def rule(_method: str, path: str, token: str) -> Answer | None:
        if token in revoked:
            return GCS_INVALID_CREDENTIALS
        return GCS_NO_OBJECT_ACCESS if quote(DENIED_KEY, safe="") in path else None

    with TokenEndpoint() as tokens, RefusingFront(upstream=gcs, rule=rule) as front:
        credentials = tmp_path / "secret" / "key.json"
        credentials.parent.mkdir()
        write_credentials(credentials, service_account("old", f"{tokens.url}/token"))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(credentials))
        # gcsfs asks Google's Storage Control API (gRPC over TLS) for each bucket's layout when it
        # has credentials, for a minute of retries against an emulator's plain-HTTP endpoint.
        monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        with running_sampler(tmp_path / "cache", f"gs://{bucket}/train", "--endpoint-url", front.url,
                             *PACED) as sp:
            wait_until(lambda: front.seen("tok-old", 0) >= 6, what="objects read with the old token")
            tokens.revoke("old")
            revoked.add("tok-old")
            skipped = until_kept(sp, denied=1)
            assert front.seen("tok-old", 401) > 0, "the old token was refused"
            write_credentials(credentials, service_account("new", f"{tokens.url}/token"))
            stats = until_done(sp, COUNT)
            log = sp.log_text()
    assert skipped <= 1, f"keys skipped on a refused token:\n{log[-3000:]}"
    assert stats["skipped_total"] == 1 and stats["samples"] == COUNT - 1, log[-3000:]
    denied = DENIED_KEY.rsplit("/", 1)[1]
    assert log.count("skipping '") == 1 and f"skipping '{denied}': Denied" in log, log[-3000:]
    assert front.seen("tok-new", 0) > 0 and front.seen("tok-new", 401) == 0, "fetched with the new token"
    assert tokens.grants["new"] >= 1
    assert "the store refuses the credentials" in log and "the store accepts the credentials again" in log


def test_a_refused_azure_key_at_the_start_exits_2_naming_the_credentials(
        azurite: Azurite, no_store_credentials: None, tmp_path: Path) -> None:
    """At the start the same refusal is a setting to fix, not an outage to wait out: exit 2 at
    once, one line naming the credentials (the sidecar does not start it again into the refusal)."""
    name = _container(azurite, {"train/a.bin": b"a"}).container_name
    env = {**os.environ, "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": KEY}
    endpoint = azurite.endpoint.rsplit("/", 1)[0]
    with RefusingFront(upstream=endpoint, rule=lambda _m, _p, _t: AZURE_REVOKED_KEY) as front:
        done = subprocess.run([EPOCHFS, "sample", "--cache", str(tmp_path / "cache"), "--remote",
                               f"az://{name}/train", "--endpoint-url", f"{front.url}/{ACCOUNT}"],
                              env=env, capture_output=True, text=True, timeout=90)
    line = [line for line in done.stderr.splitlines() if line.strip()][-1]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert line.startswith("epochfs sample: --remote: ") and f" az://{name}/train: " in line, line
    assert "ErrorCode:AuthenticationFailed" in line and "<?xml" not in line, line
    assert line.endswith("; check the credentials the store is given (its key, token or SAS)"), line
