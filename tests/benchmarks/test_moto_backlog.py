"""The benchmarks' moto listens with a backlog of :data:`harness.MOTO_LISTEN_BACKLOG`, not
werkzeug's 128: s5cmd opens a connection per object at once, and at 128 the kernel dropped some of
its SYNs in a third of its runs, each retried a second later, so the baseline's time was the
store's stall. The listening socket's backlog is read from the kernel (``ss``: a listening
socket's Send-Q is its backlog), with and without the request log's wrapper."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from epochfs.benchmarks import harness


def _backlog(port: int) -> int:
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True,
                         check=True).stdout.split()
    return int(out[2])  # State Recv-Q Send-Q Local Peer: Send-Q is the backlog of a listener


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
@pytest.mark.parametrize("with_log", [False, True])
def test_moto_listens_with_a_large_backlog(tmp_path: Path, with_log: bool) -> None:
    requests = tmp_path / "requests.log" if with_log else None
    with harness.moto_server(tmp_path / "moto.log", requests=requests) as moto:
        port = int(moto.endpoint.rsplit(":", 1)[1])
        assert _backlog(port) == harness.MOTO_LISTEN_BACKLOG
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert s.recv(12) == b"HTTP/1.1 200"
    if with_log:
        assert requests is not None and " GET /" in requests.read_text()
