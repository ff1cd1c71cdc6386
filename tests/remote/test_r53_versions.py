"""A ``gs://`` or ``az://`` sample's recorded version is that of the bytes cached.

An object overwritten (same size) after the listing and before its fetch is cached with its new
bytes, verified against the new object's stored checksum: its version must be the new object's
too (GCS: the generation; Azure: the ETag), not the listing's, or a later check of the sample
against the store (a repair, a relisting) takes the new bytes for the old object. S3 records
the ETag of the GET that brought the bytes; the fsspec-backed readers reported no version, so
the downloader fell back to the listing's.

Run against the real servers: fake-gcs-server and Azurite (skipped where either is missing),
the listing through the remote, the fetch through the real downloader.
"""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from emulators import ACCOUNT, KEY, running_azurite, running_fake_gcs
from store_helpers import sid_of

from epochfs.sidecar.download import Downloader, FetchResult, RetryPolicy
from epochfs.sidecar.remote import Remote
from epochfs.sidecar.remote.registry import open_remote
from epochfs.sidecar.store import Candidate, Store

SIZE = 64 * 1024
OLD = b"o" * SIZE
NEW = b"n" * SIZE
AZURE_VARIABLES = ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_NAME",
                   "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CLIENT_ID",
                   "AZURE_STORAGE_ANON")


def fetch_listed(tmp_path: Path, remote: Remote, overwrite: object) -> tuple[FetchResult, bytes]:
    """List the one object ``k``, call ``overwrite()`` (the object rewritten in the store), then
    fetch it as listed through the real downloader: its result and the bytes it cached."""
    (listed,) = list(remote.list())
    assert listed.key == "k" and listed.size == SIZE and listed.version
    overwrite()  # type: ignore[operator]
    with contextlib.closing(Store(tmp_path / "cache", create=True)) as store:
        downloader = Downloader(store=store, remote=remote, stop=threading.Event(),
                                retry=RetryPolicy(attempts=1, base=0.01, cap=0.01))
        result = downloader.fetch(Candidate("k", sid_of("k"), SIZE, listed.version))
        assert result.admission is not None, result
        return result, result.admission.temp.read_bytes()


# ---------------------------------------------------------------------------- gs://
@pytest.fixture(scope="module")
def gcs_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_fake_gcs(tmp_path_factory.mktemp("gcs")) as endpoint:
        yield endpoint


def gcs_call(endpoint: str, path: str, body: bytes, content_type: str) -> dict[str, object]:
    request = urllib.request.Request(f"{endpoint}{path}", data=body, method="POST",
                                     headers={"Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, object] = json.loads(response.read())
        return answer


def gcs_put(endpoint: str, bucket: str, key: str, body: bytes) -> str:
    """Write ``body`` as ``key``; returns the generation the server gave it."""
    path = f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(key, safe='')}"
    answer = gcs_call(endpoint, path, body, "application/octet-stream")
    return str(answer["generation"])


def test_a_gcs_object_rewritten_after_the_listing_is_recorded_with_its_new_generation(
        gcs_endpoint: str, tmp_path: Path) -> None:
    bucket = f"r53-{uuid.uuid4().hex[:12]}"
    gcs_call(gcs_endpoint, "/storage/v1/b?project=test", json.dumps({"name": bucket}).encode(),
             "application/json")
    old = gcs_put(gcs_endpoint, bucket, "train/k", OLD)
    written: list[str] = []
    remote = open_remote(f"gs://{bucket}/train", endpoint_url=gcs_endpoint, read_timeout=10)
    try:
        result, cached = fetch_listed(tmp_path, remote,
                                      lambda: written.append(gcs_put(gcs_endpoint, bucket, "train/k", NEW)))
    finally:
        remote.close()
    (new,) = written
    assert new != old
    assert result.admission is not None
    assert cached == NEW and result.admission.verified != "size-only"  # checked by the new crc32c
    assert result.admission.version == new, f"listed {old}, cached {new}'s bytes"


# ---------------------------------------------------------------------------- az://
@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_azurite(tmp_path_factory.mktemp("azurite")) as endpoint:
        yield endpoint


def test_an_azure_blob_rewritten_after_the_listing_is_recorded_with_its_new_etag(
        azurite: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from azure.storage.blob import BlobServiceClient

    for name in AZURE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", KEY)
    container = f"r53-{uuid.uuid4().hex[:12]}"
    written: list[str] = []
    with BlobServiceClient(azurite, credential={"account_name": ACCOUNT, "account_key": KEY}) as service:
        blob = service.create_container(container).get_blob_client("train/k")
        old = str(blob.upload_blob(OLD)["etag"]).strip('"')
        remote = open_remote(f"az://{container}/train", endpoint_url=azurite, read_timeout=10)
        try:
            result, cached = fetch_listed(
                tmp_path, remote,
                lambda: written.append(str(blob.upload_blob(NEW, overwrite=True)["etag"]).strip('"')))
        finally:
            remote.close()
    (new,) = written
    assert new != old
    assert result.admission is not None
    assert cached == NEW and result.admission.verified != "size-only"  # checked by the new Content-MD5
    assert result.admission.version == new, f"listed {old}, cached {new}'s bytes"
