"""Shared fixtures: a real S3 server (moto in server mode) on 127.0.0.1, and cache folders.

Area-specific fixtures live beside their tests (tests/<area>_helpers.py); this file holds only
what several areas share.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port that was free a moment ago (bind to port 0 and read it back)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate, *, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; fail the test with ``what`` on timeout.

    This waits for an observable condition (a port answering, a file appearing), never for a fixed
    time, so it is not a sleep used as synchronization.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@dataclass
class S3Server:
    """A moto S3 server process speaking the real protocol on 127.0.0.1."""

    endpoint: str
    process: subprocess.Popen[bytes]

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

    def reset(self) -> None:
        """Drop every bucket (moto's reset API), so each test starts empty."""
        req = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        urllib.request.urlopen(req, timeout=10).read()


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One moto server for the session; tests use ``s3`` (function scope) which resets it."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: _port_open(port) or proc.poll() is not None, what="moto server")
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited: {log.read_text()[-2000:]}")
        yield S3Server(f"http://127.0.0.1:{port}", proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The S3 server, emptied, with AWS credentials for it in the environment."""
    s3_server.reset()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return s3_server


def put_objects(server: S3Server, bucket: str, objects: dict[str, bytes]) -> None:
    """Create ``bucket`` and upload ``objects`` (key -> bytes)."""
    client = server.client()
    client.create_bucket(Bucket=bucket)
    for key, body in objects.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)


def random_objects(count: int, size: int, *, prefix: str = "train/", seed: int = 0) -> dict[str, bytes]:
    """Incompressible objects with distinct contents, named like a dataset's files."""
    import random

    rng = random.Random(seed)
    return {f"{prefix}{i:05d}.bin": rng.randbytes(size) for i in range(count)}


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


os.environ.setdefault("EPOCHFS_TESTING", "1")
