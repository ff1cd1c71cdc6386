"""What tests of several areas share and import: waiting on a condition, free ports, the S3 server
(moto in server mode) and objects to put in it. Plain functions and classes, imported as
``from common import ...``; the fixtures that use them are in conftest.py (pytest loads that file
itself: tests never import it).
"""

from __future__ import annotations

import contextlib
import http.server
import os
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
"""The helpers' folder: a test file run as a script (a rank's process) needs it on PYTHONPATH."""


PORT_FLOOR = 10_000
"""The lowest port :func:`free_port` hands out (below: well-known and registered services)."""
PORT_BLOCKS = 8
"""Blocks of the ports below the ephemeral range: one per xdist worker (gw0-gw6; more share),
the last one for a run without workers."""


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _port_block() -> range:
    """This worker's ports: a slice of [PORT_FLOOR, the ephemeral range's start), or, where that
    gap is too small, of the ports above the range; empty where there is neither."""
    low, high = _ephemeral_range()
    start, stop = (PORT_FLOOR, low) if low - PORT_FLOOR >= 1000 * PORT_BLOCKS else (high + 1, 65536)
    size = (stop - start) // PORT_BLOCKS
    if size < 100:
        return range(0)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) % (PORT_BLOCKS - 1) if worker[2:].isdigit() else PORT_BLOCKS - 1
    return range(start + index * size, start + (index + 1) * size)


_BLOCK = _port_block()
_next = random.SystemRandom().randrange(len(_BLOCK)) if _BLOCK else 0  # not the seeded random


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and that no other test worker is handed.

    Not a port bound to 0: the kernel picks those from its ephemeral range, as it does for every
    other bind to port 0 (the moto server, the tests' own HTTP servers, in every xdist worker) and
    for outgoing connections, so between this call and the caller's bind another worker could take
    the same port, and a wait for the port to answer then passed on the wrong server. The ports
    here lie outside that range, in a block of this worker's own, handed out in turn from a random
    start (a port is not handed out again before the block has gone round), each checked by a bind.
    """
    global _next
    for _ in range(len(_BLOCK)):
        port = _BLOCK[_next % len(_BLOCK)]
        _next += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or in TIME_WAIT from an earlier test
            return port
    with socket.socket() as s:  # no block on this machine, or every port of it taken: the kernel's
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving_http(handler: Callable[..., Any]) -> Iterator[str]:
    """``handler`` (a request handler class, or a callable making one) served on a port the system
    picks, each request on a thread of its own, for the duration of a ``with`` block: its URL,
    ``http://127.0.0.1:PORT``. Stopped, closed and its thread joined after."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


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


def signal_state(pid: int) -> str:
    """The signals ``pid`` blocks, ignores and has pending (``/proc/<pid>/status``'s masks): why a
    process a test signalled did not act on it."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as e:
        return f"no /proc/{pid}/status: {e.strerror}"
    return ", ".join(line.replace("\t", " ") for line in lines
                     if line.split(":")[0] in ("SigBlk", "SigIgn", "SigPnd", "ShdPnd"))


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


@contextlib.contextmanager
def moto_server(log: Path, env: dict[str, str] | None = None) -> Iterator[S3Server]:
    """A moto server on a free local port (its output in ``log``; ``env``: more variables, such as
    ``S3_UPLOAD_PART_MIN_SIZE``), stopped at the end."""
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    try:
        wait_until(lambda: port_open(port) or proc.poll() is not None, what="moto server")
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited: {log.read_text()[-2000:]}")
        yield S3Server(f"http://127.0.0.1:{port}", proc)
    finally:
        stop_process(proc)
