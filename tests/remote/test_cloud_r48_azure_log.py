"""An ``az://`` remote does not log each of the Azure SDK's requests and answers.

azure-core's HTTP logging policy writes every request and every response (URL, headers, a
dozen lines each) at INFO, which the sampler's log shows: a run of 19 samples wrote 1,435 lines,
the sampler's own a dozen of them. The remote is used here as the sampler uses it (the start's
probe, the listing, reads) against Azurite, with the log at INFO as the sampler writes it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest
from emulators import ACCOUNT as AZURITE_ACCOUNT
from emulators import KEY as AZURITE_KEY
from emulators import running_azurite

from epochfs.sidecar.remote.registry import open_remote

AZURE_VARIABLES = ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_NAME",
                   "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CLIENT_ID",
                   "AZURE_STORAGE_ANON")
OBJECTS = {"train/a/0.bin": b"x" * 64, "train/b/1.bin": b"y" * 32}


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(Azurite's account endpoint, a container holding :data:`OBJECTS`)."""
    with running_azurite(tmp_path_factory.mktemp("azurite")) as endpoint:
        from azure.storage.blob import BlobServiceClient

        name = f"quiet-{uuid.uuid4().hex[:12]}"
        with BlobServiceClient(endpoint, credential={"account_name": AZURITE_ACCOUNT,
                                                     "account_key": AZURITE_KEY}) as service:
            container = service.create_container(name)
            for key, body in OBJECTS.items():
                container.get_blob_client(key).upload_blob(body)
        yield endpoint, name


def test_an_azure_remote_logs_no_sdk_request_at_info(
        azurite: tuple[str, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    endpoint, container = azurite
    for name in AZURE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", AZURITE_ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY)
    caplog.set_level(logging.INFO)
    remote = open_remote(f"az://{container}/train", endpoint_url=endpoint, read_timeout=10)
    try:
        remote.probe()
        listed = {str(o.key): o.size for o in remote.list()}
        reader = remote.open("a/0.bin", checksum=True)
        try:
            body = reader.read(100)
        finally:
            reader.close()
    finally:
        remote.close()
    assert listed == {"a/0.bin": 64, "b/1.bin": 32}
    assert body == OBJECTS["train/a/0.bin"]
    chatty = [r for r in caplog.records if r.name.startswith("azure.") and r.levelno < logging.WARNING]
    assert not chatty, f"{len(chatty)} record(s), the first: {chatty[0].name}: {chatty[0].getMessage()[:300]}"
