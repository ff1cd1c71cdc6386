"""Azurite (the real Azure Blob emulator, npm's ``azurite-blob``) in a process of its own, for the
tests that run ``az://`` against it: the conformance suite and the start's refusals."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
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
