"""The sidecar's endpoints answer on IPv6 as well as IPv4 (the kubelet probes an IPv6 pod's IPv6
address), and fall back to IPv4 where the kernel has no IPv6.

Real sockets throughout: the real sidecar answered on ``127.0.0.1`` and ``[::1]``; a real
:class:`Endpoints` on the same; and, for the fallback, a real :class:`Endpoints` in a child process
whose kernel calls refuse IPv6 sockets as a kernel booted with ``ipv6.disable=1`` does
(``EAFNOSUPPORT``, set by a seccomp filter: this machine has IPv6, so that is the way to get the
kernel's own answer rather than a stand-in for the code that reads it).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import S3Server, free_port, put_objects, random_objects
from sidecar_helpers import running_sidecar

from epochfs.sidecar.endpoints import CLIENT_REPORT_PATH, Endpoints

ALL_ADDRESSES = "::"
"""The sidecar's default host (:data:`epochfs.sidecar.endpoints.ALL_ADDRESSES`), spelled here so
that the test runs, and fails, against a sidecar from before the name existed."""

LOOPBACKS = ("127.0.0.1", "[::1]")
REPORT = b'{"samples": 1, "bytes": 10, "wait_seconds": 0.5}'


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not has_ipv6_loopback(), reason="needs IPv6 loopback (::1)")


def request(host: str, port: int, path: str, body: bytes | None = None) -> int:
    """The status of one request to ``http://host:port/path`` (0: no connection)."""
    req = urllib.request.Request(f"http://{host}:{port}{path}", data=body, method="POST" if body else "GET",
                                 headers={"Content-Type": "application/json"} if body else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code
    except urllib.error.URLError as e:
        assert isinstance(e.reason, ConnectionRefusedError), e
        return 0


@contextlib.contextmanager
def endpoints(host: str, port: int = 0) -> Iterator[Endpoints]:
    ep = Endpoints(host=host, port=port, health=lambda: (True, {}), ready=lambda: (True, {}),
                   registry=None, on_client_report=lambda r: None)
    ep.start()
    try:
        yield ep
    finally:
        ep.stop()


# ---------------------------------------------------------------------------------------- the sidecar
@needs_ipv6
@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE")
def test_the_sidecar_answers_probes_metrics_and_reports_on_ipv4_and_ipv6(
    s3: S3Server, tmp_path: Path
) -> None:
    put_objects(s3, "data", random_objects(3, 1024))
    metrics_port = free_port()
    extra = ("--min-samples", "1", "--metrics-port", str(metrics_port))
    with running_sidecar(tmp_path, remote="s3://data", endpoint=s3.endpoint, extra=extra) as car:
        answers = {host: (request(host, car.port, "/healthz"), request(host, car.port, "/readyz"),
                          request(host, metrics_port, "/metrics"),
                          request(host, car.port, CLIENT_REPORT_PATH, REPORT))  # loopback either way
                   for host in LOOPBACKS}
        assert answers == {host: (200, 200, 200, 204) for host in LOOPBACKS}
        log = car.log_text()
    for port in (car.port, metrics_port):
        assert f"on port {port} of all IPv6 and IPv4 addresses (dual stack)" in log, log[-3000:]


# ---------------------------------------------------------------------------------------- the server
@needs_ipv6
def test_all_addresses_is_one_socket_for_both_families() -> None:
    with endpoints(ALL_ADDRESSES) as ep:
        assert [request(h, ep.port, "/healthz") for h in LOOPBACKS] == [200, 200]
        assert ep.where == "all IPv6 and IPv4 addresses (dual stack)"


def test_an_address_given_is_still_one_family() -> None:
    with endpoints("127.0.0.1") as ep:
        assert [request(h, ep.port, "/healthz") for h in LOOPBACKS] == [200, 0]
        assert ep.where == "127.0.0.1 (IPv4 only)"


@needs_ipv6
def test_a_port_in_use_on_ipv4_is_an_error_not_a_fallback() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken, pytest.raises(OSError) as e:
        Endpoints(host=ALL_ADDRESSES, port=taken.getsockname()[1], health=lambda: (True, {}),
                  ready=lambda: (True, {}), registry=None, on_client_report=None)
    assert e.value.errno == errno.EADDRINUSE


# ---------------------------------------------------------------------------------------- no IPv6
SOCKET_SYSCALL = {"x86_64": (41, 0xC000003E), "aarch64": (198, 0xC00000B7)}
"""socket(2)'s number and the audit arch of the machines the filter is written for."""

NO_IPV6_CHILD = textwrap.dedent("""
    import ctypes, errno, json, socket, struct, sys

    nr, arch = int(sys.argv[1]), int(sys.argv[2])
    def op(code, k, jt=0, jf=0):
        return struct.pack("HBBI", code, jt, jf, k)
    LD, JEQ, RET = 0x20, 0x15, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_RET|K
    ALLOW, ERRNO = 0x7FFF0000, 0x00050000
    prog = b"".join([
        op(LD, 4), op(JEQ, arch, 0, 5),     # seccomp_data.arch: another ABI is let through
        op(LD, 0), op(JEQ, nr, 0, 3),       # .nr: socket(2)?
        op(LD, 16), op(JEQ, socket.AF_INET6, 0, 1),  # .args[0] (low half): AF_INET6?
        op(RET, ERRNO | errno.EAFNOSUPPORT),
        op(RET, ALLOW),
    ])
    buf = ctypes.create_string_buffer(prog)
    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    fprog = Fprog(len(prog) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0, ctypes.get_errno()  # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0, ctypes.get_errno()  # SECCOMP_MODE_FILTER
    try:
        socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        raise SystemExit("the filter let an IPv6 socket through")
    except OSError as e:
        assert e.errno == errno.EAFNOSUPPORT, e

    from epochfs.sidecar.endpoints import Endpoints
    ep = Endpoints(host="::", port=0, health=lambda: (True, {}), ready=lambda: (True, {}),
                   registry=None, on_client_report=None)
    ep.start()
    print(json.dumps({"port": ep.port, "where": ep.where}), flush=True)
    sys.stdin.read()  # until the test closes it
    ep.stop()
""")


@pytest.mark.skipif(platform.machine() not in SOCKET_SYSCALL, reason="a filter for x86_64 and aarch64 only")
def test_a_kernel_without_ipv6_gets_all_ipv4_addresses_and_says_so() -> None:
    nr, arch = SOCKET_SYSCALL[platform.machine()]
    proc = subprocess.Popen([sys.executable, "-c", NO_IPV6_CHILD, str(nr), str(arch)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        assert line, f"child exited {proc.wait()}"
        started = json.loads(line)
        no_ipv6 = f"all IPv4 addresses only (no IPv6 in this kernel: [Errno {errno.EAFNOSUPPORT}]"
        assert started["where"].startswith(no_ipv6), started
        assert request("127.0.0.1", started["port"], "/healthz") == 200
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
