"""Each botocore client of an ``s3://`` remote comes from a session of its own (so a rotated
credentials file is read at the next client), and every such session of the process shares one
loader of botocore's data files: a new session would otherwise parse S3's service model again,
0.14 s of CPU a client (:func:`epochfs.sidecar.remote.s3client.share_loader`)."""

from __future__ import annotations

from pathlib import Path

import botocore.session
import pytest

from epochfs.sidecar.remote.s3client import new_client


def _client(region: str = "us-east-1"):
    return new_client(botocore.session.get_session(), region, "http://127.0.0.1:9", None)


def _credentials_file(path: Path, key: str) -> None:
    path.write_text(f"[default]\naws_access_key_id = {key}\naws_secret_access_key = secret-{key}\n")


def test_clients_of_new_sessions_share_the_loader_and_read_the_credentials_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_DATA_PATH"):
        monkeypatch.delenv(name, raising=False)
    credentials = tmp_path / "credentials"
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    _credentials_file(credentials, "first")
    first = _client()
    _credentials_file(credentials, "second")  # rotated between the two clients
    second = _client()
    assert first._loader is second._loader
    assert first._request_signer._credentials.access_key == "first"
    assert second._request_signer._credentials.access_key == "second"


def test_another_data_path_has_a_loader_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_DATA_PATH", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    default = _client()
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path / "models"))  # empty: botocore's own files still load
    other = _client()
    assert other._loader is not default._loader
    assert _client()._loader is other._loader
    assert "models" in " ".join(str(p) for p in other._loader.search_paths)
