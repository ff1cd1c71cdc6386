"""What tests of several areas share and import: waiting on a condition, free ports, the S3 server
(moto in server mode) and objects to put in it. Plain functions and classes, imported as
``from common import ...``; the fixtures that use them are in conftest.py (pytest loads that file
itself: tests never import it).
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
"""The helpers' folder: a test file run as a script (a rank's process) needs it on PYTHONPATH."""


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


def stop_process(proc: subprocess.Popen[bytes], *, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout``: a test's server never
    outlives its fixture."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


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
