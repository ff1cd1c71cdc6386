"""Each botocore client of an ``s3://`` remote comes from a session of its own (so a rotated
credentials file is read at the next client), and every such session of the process shares one
loader of botocore's data files: a new session would otherwise parse S3's service model again,
0.14 s of CPU a client (:func:`epochfs.sidecar.remote.s3client.share_loader`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import botocore.session
import pytest

from epochfs.sidecar.remote.s3client import botocore_config, new_client


def _client() -> tuple[Any, Any]:
    """A new session and the client :func:`new_client` makes from it, configured as the remote's."""
    session = botocore.session.get_session()
    return session, new_client(session, "us-east-1", "http://127.0.0.1:9", botocore_config((5.0, 5.0), 4))


def _signed_by(client: Any) -> str:
    """The access key a presigned URL of ``client`` names (SigV4: ``X-Amz-Credential=KEY/...``)."""
    url = client.generate_presigned_url("get_object", Params={"Bucket": "b", "Key": "k"})
    credential = parse_qs(urlsplit(url).query)["X-Amz-Credential"][0]
    return credential.split("/", 1)[0]


@pytest.fixture
def aws_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No AWS setting from the environment: a credentials file (returned) and no config file."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_DEFAULT_PROFILE", "AWS_DATA_PATH"):
        monkeypatch.delenv(name, raising=False)
    credentials = tmp_path / "credentials"
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    return credentials


def _write_key(credentials: Path, key: str) -> None:
    credentials.write_text(f"[default]\naws_access_key_id = {key}\naws_secret_access_key = secret-{key}\n")


def test_clients_of_new_sessions_share_the_loader_and_read_the_credentials_again(aws_files: Path) -> None:
    _write_key(aws_files, "first")
    first_session, first = _client()
    _write_key(aws_files, "second")  # rotated between the two clients
    second_session, second = _client()
    assert first_session is not second_session
    assert first_session.get_component("data_loader") is second_session.get_component("data_loader")
    assert (_signed_by(first), _signed_by(second)) == ("first", "second")


def test_another_data_path_has_a_loader_of_its_own(
        aws_files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_key(aws_files, "testing")
    default = _client()[0].get_component("data_loader")
    models = tmp_path / "models"
    models.mkdir()  # an extra folder botocore looks in first; its own files still load after it
    monkeypatch.setenv("AWS_DATA_PATH", str(models))
    other = _client()[0].get_component("data_loader")
    assert other is not default
    assert _client()[0].get_component("data_loader") is other
    assert str(models) in other.search_paths
