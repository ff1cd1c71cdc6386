"""``gs://`` and ``az://`` give up on an endpoint that accepts and never answers within about
``--read-timeout``, as ``s3://`` does: the sampler's start ends with exit 75 (the remote cannot
be reached now; the sidecar starts it again), not a process waiting on the probe's first request
for minutes (gcsfs set no timeout at all; the Azure SDK's is 300 s, whatever the flag said).

Run as a user would: the console script in a process of its own, against a real TCP server (a
thread here) that accepts every connection and never writes a byte. A process that outlives
the bound is killed and the test fails.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from emulators import ACCOUNT as AZURITE_ACCOUNT
from emulators import KEY as AZURITE_KEY

from epochfs.sidecar.config import EXIT_RETRY

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
S3_KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}
"""Keys an s3:// remote signs with (the silent server reads nothing of them)."""
READ_TIMEOUT = 2
"""``--read-timeout`` given to the sampler, in seconds."""
BOUND = 25.0
"""Seconds within which the sampler must have exited: the read timeout, the start's own work
(imports, the cache's check) on a loaded 2-core machine, and room; before the fix it ran on."""


class Silent:
    """A TCP server on 127.0.0.1 that accepts every connection and never answers (a store whose
    front end hangs); the accepted sockets are held open until :meth:`close`."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:  # closed
                return
            self._held.append(conn)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (close alone does not)
        self._server.close()
        for conn in self._held:
            conn.close()
        self._thread.join(timeout=10)


def _installed(module: str) -> None:
    """Skip unless ``module`` is installed. A test whose sampler runs in a process of its own only
    looks for the module: importing gcsfs here would cost this process more than half a second
    of CPU for nothing."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")


@pytest.fixture
def silent() -> Iterator[Silent]:
    server = Silent()
    try:
        yield server
    finally:
        server.close()


def _env(azure: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("EPOCHFS_", "AWS_", "AZURE_", "GOOGLE_", "GCE_", "STORAGE_EMULATOR"))}
    if azure:
        env.update(AZURE_STORAGE_ACCOUNT_NAME=AZURITE_ACCOUNT, AZURE_STORAGE_ACCOUNT_KEY=AZURITE_KEY)
    return env


@pytest.mark.parametrize("scheme", ["gs", "az"])
def test_a_silent_endpoint_ends_the_start_with_75_within_the_read_timeout(
        scheme: str, silent: Silent, tmp_path: Path) -> None:
    _installed({"gs": "gcsfs", "az": "adlfs"}[scheme])
    endpoint = f"http://127.0.0.1:{silent.port}"
    if scheme == "az":
        endpoint += f"/{AZURITE_ACCOUNT}"  # the emulator's path-style account endpoint
    proc = subprocess.Popen(
        [EPOCHFS, "sample", "--cache", str(tmp_path / "cache"), "--remote", f"{scheme}://bkt/train",
         "--endpoint-url", endpoint, "--read-timeout", str(READ_TIMEOUT)],
        env=_env(scheme == "az"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    try:
        try:
            _, err = proc.communicate(timeout=BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"epochfs sample still waited on the silent endpoint after {BOUND:.0f} s")
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == EXIT_RETRY, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert lines[-1].startswith("epochfs sample: the remote cannot be reached now: "), lines[-1]
    assert not lines[-1].rstrip().endswith(":"), "the line says why: " + lines[-1]
    assert took < BOUND


def _ends_within(call: Callable[[], object], bound: float) -> tuple[BaseException | None, float]:
    """Run ``call`` in a thread; (what it raised, seconds it took), or fail the test when it is
    still running after ``bound`` seconds (the caller's fixture then closes the silent server,
    which ends the call with the connection)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as e:  # handed to the test
            outcome.append(e)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(timeout=bound)
    if thread.is_alive():
        pytest.fail(f"still waiting on the silent endpoint after {bound:.0f} s")
    return outcome[0], time.monotonic() - started


@pytest.mark.parametrize("scheme", ["gs", "az"])
def test_a_read_from_a_silent_endpoint_is_unavailable_within_the_read_timeout(
        scheme: str, silent: Silent, monkeypatch: pytest.MonkeyPatch) -> None:
    """The downloader's reads as the start's listing: an outage (retried with the downloader's
    own backoff) after about ``read_timeout``, not the library's own minutes."""
    pytest.importorskip({"gs": "gcsfs", "az": "adlfs"}[scheme])
    from epochfs.sidecar.remote.base import Unavailable
    from epochfs.sidecar.remote.registry import open_remote

    endpoint = f"http://127.0.0.1:{silent.port}"
    for name in [k for k in os.environ if k.startswith(("AZURE_", "STORAGE_EMULATOR"))]:
        monkeypatch.delenv(name)
    if scheme == "az":
        monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", AZURITE_ACCOUNT)
        monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY)
        endpoint += f"/{AZURITE_ACCOUNT}"
    remote = open_remote(f"{scheme}://bkt/train", endpoint_url=endpoint, read_timeout=1)
    try:
        for call in (lambda: remote.read_range("a.bin", 0, 10), lambda: remote.open("a.bin").read(1)):
            raised, took = _ends_within(call, 15.0)
            assert isinstance(raised, Unavailable), repr(raised)
            assert took < 15.0
    finally:
        remote.close()


@pytest.mark.parametrize("scheme", ["gs", "az", "s3"])
def test_sigterm_while_the_start_probe_waits_stops_at_once(scheme: str, tmp_path: Path) -> None:
    """A stop (the pod's SIGTERM) while the start's first listing request waits for a store that
    accepted the connection and never answers: a clean exit 0 at once, not after the request's
    ``--read-timeout`` (two minutes here, longer than a pod's termination grace: the kubelet
    would SIGKILL the sampler first)."""
    _installed({"gs": "gcsfs", "az": "adlfs", "s3": "botocore"}[scheme])
    accepted = threading.Event()
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed
                return
            held.append(conn)
            accepted.set()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.getsockname()[1]}"
    if scheme == "az":
        endpoint += f"/{AZURITE_ACCOUNT}"
    proc = subprocess.Popen(
        [EPOCHFS, "sample", "--cache", str(tmp_path / "cache"), "--remote", f"{scheme}://bkt/train",
         "--endpoint-url", endpoint, "--read-timeout", "120"],
        env={**_env(scheme == "az"), **S3_KEYS} if scheme == "s3" else _env(scheme == "az"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert accepted.wait(BOUND), "the sampler never sent its first request"
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"epochfs sample still waited on the silent endpoint {BOUND:.0f} s after SIGTERM")
        assert proc.returncode == 0, err[-3000:]
        assert "Traceback" not in err, err[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_RDWR)
        server.close()
        for conn in held:
            conn.close()
        thread.join(timeout=10)
