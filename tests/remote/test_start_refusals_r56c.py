"""Refusals at the start that do not heal end ``epochfs sample`` with one line and exit 2:

- an ``https://`` remote whose certificate does not verify: the line that names the certificate
  crashed with ``AttributeError: ... 'verify_message'`` (aiohttp's certificate error is an
  ``ssl.CertificateError`` without ssl's attributes), a traceback and exit 1;
- an ``az://`` endpoint whose certificate does not verify was typed an outage (the SDK's
  ``ServiceRequestError`` over the certificate error): exit 75, which makes Kubernetes start the
  sidecar again for ever, where the same server as a gs:// endpoint exits 2;
- an ``az://`` container name Azure cannot hold (``gz``: too short; ``My_Data``) was refused by
  Azure with a 400 read as a credential's refusal: the line named the credentials, not the name.

Against a real TLS server with a throw-away self-signed certificate (tests/proxy_helpers.py), run
as a user runs the console script.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from emulators import ACCOUNT, KEY
from proxy_helpers import StaticServer, make_tls

from epochfs.sidecar.remote import RemoteError, open_remote
from epochfs.sidecar.remote.base import Denied
from epochfs.sidecar.remote.errors import azure_kind, may_answer_later, translate

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))


@pytest.fixture
def untrusted(tmp_path: Path) -> Iterator[StaticServer]:
    """An https server whose self-signed certificate nothing here trusts."""
    server = StaticServer(tls=make_tls(tmp_path).server_context())
    try:
        yield server
    finally:
        server.close()


def _sample(tmp_path: Path, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The real ``epochfs sample``, without any CA bundle that would trust the test's certificate."""
    trusting = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")
    environ = {k: v for k, v in os.environ.items() if k not in trusting and not k.startswith("AZURE_")}
    return subprocess.run([EPOCHFS, "sample", "--cache", str(tmp_path / "cache"), "--capacity", "1Mi",
                           "--read-timeout", "10", *flags], capture_output=True, text=True, timeout=120,
                          env={**environ, **env})


def _one_line_refusal(run: subprocess.CompletedProcess[str]) -> str:
    """The refusal line of a run that exited 2 without a traceback."""
    assert "Traceback" not in run.stderr, run.stderr
    assert run.returncode == 2, run.stderr
    [line] = [line for line in run.stderr.splitlines() if line.startswith("epochfs sample:")]
    return line


def test_an_https_remote_with_a_certificate_that_does_not_verify_is_refused_in_one_line(
        untrusted: StaticServer, tmp_path: Path) -> None:
    with pytest.raises(RemoteError, match="TLS certificate refused"):
        open_remote(f"{untrusted.url}/data", read_timeout=10).probe()
    line = _one_line_refusal(_sample(tmp_path, "--remote", f"{untrusted.url}/data"))
    assert "certificate" in line


def test_an_azure_endpoint_with_a_certificate_that_does_not_verify_is_denied_not_down(
        untrusted: StaticServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN", "SSL_CERT_FILE",
                 "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", KEY)
    endpoint = f"{untrusted.url}/{ACCOUNT}"
    remote = open_remote("az://bad/data", endpoint_url=endpoint, read_timeout=10)
    with pytest.raises(RemoteError) as refused:
        remote.probe()
    assert not may_answer_later(refused.value)
    failure = translate(refused.value, azure_kind)
    assert isinstance(failure, Denied)

    run = _sample(tmp_path, "--remote", "az://bad/data", "--endpoint-url", endpoint,
                  AZURE_STORAGE_ACCOUNT_NAME=ACCOUNT, AZURE_STORAGE_ACCOUNT_KEY=KEY)
    assert "certificate" in _one_line_refusal(run)


@pytest.mark.parametrize("container", ["gz", "My_Data", "a--b"])
def test_a_container_name_azure_cannot_hold_is_refused_by_its_rule(container: str, tmp_path: Path) -> None:
    """Refused before any request (the endpoint answers nothing): no credential is blamed."""
    run = _sample(tmp_path, "--remote", f"az://{container}/data", "--endpoint-url",
                  f"http://127.0.0.1:9/{ACCOUNT}", AZURE_STORAGE_ACCOUNT_NAME=ACCOUNT,
                  AZURE_STORAGE_ACCOUNT_KEY=KEY)
    line = _one_line_refusal(run)
    assert f"{container!r} is not an Azure container name" in line
    assert "3 to 63 lower-case letters, digits and single hyphens" in line
    assert "credentials" not in line
