"""Shared fixtures: a real S3 server (moto in server mode) on 127.0.0.1, cache folders, and the
helm binary of the chart tests.

The helpers these fixtures use, and that tests import, live in tests/common.py (and the area
helpers beside their tests); tests never import this file.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path

import kubernetes_validate.utils
import pytest
from common import S3Server, moto_server

# kubernetes-validate reads and parses a version's whole schema (its _definitions.json, some MB)
# at every validate(); the chart and webhook tests validate hundreds of objects, which cost the
# suite tens of seconds of CPU. The files never change during a run and the validator does not
# change what it is given, so each is parsed once a process.
kubernetes_validate.utils.schema_contents = functools.lru_cache(maxsize=None)(
    kubernetes_validate.utils.schema_contents)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One moto server for the session; tests use ``s3`` (function scope) which resets it."""
    with moto_server(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The S3 server, emptied, with AWS credentials for it in the environment."""
    s3_server.reset()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return s3_server


@pytest.fixture
def signed_here(s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keys in the environment and no AWS config file: the URLs are signed without botocore."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """The real helm binary (tests/helm_helpers.py: scripts/get-helm.py), for every chart test.

    Here, not in each module: nine modules (tests/deploy/, tests/webhook/) had the same fixture,
    and pytest finds a conftest fixture without an import (importing one into a module that
    names it as a parameter is a redefinition to ruff). Session scope: one look-up a run."""
    from helm_helpers import helm_binary

    return helm_binary()


os.environ.setdefault("EPOCHFS_TESTING", "1")


LONG_CALL = 6.0
"""Seconds of a test's own call at or over which it belongs with the long tests (``@pytest.mark.long``,
``make test-long``): ``make test`` ends within 10 minutes on 2 cores only while they stay out of it."""

_UNMARKED_LONG: list[tuple[float, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Note a test whose call ran :data:`LONG_CALL` or more without the ``long`` or ``slow`` marker
    (run by the controller for every worker's reports too)."""
    if (report.when == "call" and report.duration >= LONG_CALL
            and not {"long", "slow"} & set(report.keywords)):
        _UNMARKED_LONG.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Name the tests :func:`pytest_runtest_logreport` noted: candidates for ``@pytest.mark.long``
    (a test that ran long once under load only need not be one)."""
    if _UNMARKED_LONG:
        terminalreporter.section(f"tests of {LONG_CALL:.0f} s or more without the long marker")
        for took, nodeid in sorted(_UNMARKED_LONG, reverse=True):
            terminalreporter.write_line(f"{took:6.1f} s  {nodeid}")
