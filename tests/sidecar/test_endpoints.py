"""The sidecar's HTTP endpoints under hostile load (issue 11, item 3).

Real sockets on 127.0.0.1 against a real :class:`Endpoints` (and, at the end, the real sidecar):
thousands of idle connections, slowloris heads, oversized bodies, deep JSON, 500 concurrent
reports, a hung check; then ``/healthz`` must answer within a second, the thread count and the
memory stay bounded, and ``stop()`` (SIGTERM for the sidecar) returns at once. Waits are bounded
polls of an observable condition (``wait_until``) or socket timeouts, never sleeps.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import http.client
import json
import os
import resource
import selectors
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from sidecar_helpers import running_sidecar

from epochfs.sidecar import metrics
from epochfs.sidecar.endpoints import CLIENT_REPORT_PATH, ClientReport, Endpoints, Limits
from epochfs.torchclient.report import ClientReporter

REPORT = b'{"samples": 1, "bytes": 10, "wait_seconds": 0.5}'


# ---------------------------------------------------------------------------------------- helpers
def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def many_files() -> Iterator[None]:
    """Room for thousands of sockets on both ends (the soft limit, up to the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 32768 if hard == resource.RLIM_INFINITY else min(hard, 32768)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class Server:
    """An Endpoints with its own metrics registry, stopped at the end of the test."""

    def __init__(self, ep: Endpoints, registry: CollectorRegistry, reports: list[ClientReport]) -> None:
        self.ep = ep
        self.registry = registry
        self.reports = reports

    @property
    def port(self) -> int:
        return self.ep.port

    def rejected(self, reason: str) -> float:
        return self.registry.get_sample_value("epochfs_http_rejected_total", {"reason": reason}) or 0.0

    def open_connections(self) -> float:
        return self.registry.get_sample_value("epochfs_http_connections") or 0.0


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    started: list[Endpoints] = []

    def make(*, health: Callable[[], tuple[bool, dict[str, Any]]] | None = None,
             ready: Callable[[], tuple[bool, dict[str, Any]]] | None = None,
             on_report: Callable[[ClientReport], None] | None = None, host: str = "127.0.0.1",
             **limits: Any) -> Server:
        registry = CollectorRegistry()
        reports: list[ClientReport] = []
        sidecar = metrics.SidecarMetrics(registry=CollectorRegistry())
        ep = Endpoints(
            host=host, port=0,
            health=health or (lambda: (True, {"mount": "ok"})),
            ready=ready or (lambda: (True, {"samples": 3})),
            registry=sidecar.registry,
            on_client_report=on_report or reports.append,
            limits=Limits(**limits), metrics=metrics.EndpointMetrics(registry=registry),
        )
        ep.start()
        started.append(ep)
        return Server(ep, registry, reports)

    yield make
    for ep in started:
        ep.stop()


def get(port: int, path: str, *, timeout: float = 1.0) -> tuple[int, bytes, float]:
    """GET on a fresh connection: status, body, seconds taken (fails past ``timeout``)."""
    started = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read(), time.monotonic() - started
    finally:
        c.close()


def post(port: int, body: bytes, *, timeout: float = 5.0) -> tuple[int, bytes, dict[str, str]]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{CLIENT_REPORT_PATH}", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return int(r.status), r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def connect(port: int, timeout: float = 3.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.settimeout(timeout)
    return s


def refused_or_closed(port: int, timeout: float) -> bool:
    """A new connection that the server closes (FIN or RST) within ``timeout`` seconds; on a loaded
    machine its reset can end the handshake itself (``connect`` raises ConnectionResetError), which
    is the same answer."""
    try:
        s = connect(port)
    except ConnectionResetError:
        return True
    try:
        return closed_by_peer(s, timeout)
    finally:
        s.close()


def read_response(f: Any) -> tuple[int, dict[str, str], bytes]:
    """One response from a buffered socket file (several may follow on a keep-alive connection)."""
    status = f.readline()
    assert status.startswith(b"HTTP/1.1 "), status
    headers: dict[str, str] = {}
    while (line := f.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    return int(status.split()[1]), headers, f.read(length) if length else b""


def exchange(port: int, data: bytes, *, timeout: float = 3.0) -> tuple[int, dict[str, str], bytes]:
    with connect(port, timeout) as s:
        s.sendall(data)
        return read_response(s.makefile("rb"))


def closed_by_peer(s: socket.socket, timeout: float) -> bool:
    """True when the server closes ``s`` (FIN or RST) within ``timeout`` seconds (data is drained)."""
    s.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not s.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return False


def open_load(port: int, *, idle: int, busy: int, deadline: float = 20.0) -> tuple[list[socket.socket], int]:
    """``idle`` connections that send nothing and ``busy`` ones that do harm: slowloris heads,
    oversized bodies (a 10 MB Content-Length, the first 64 KiB sent), 4,000-deep JSON reports.
    Returns the sockets and how many could not be opened before ``deadline`` seconds passed."""
    socks: list[socket.socket] = []
    failed = 0
    end = time.monotonic() + deadline
    harm = [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ",
        b"POST /v1/client-report HTTP/1.1\r\nContent-Length: 10000000\r\n\r\n" + b"0" * 65536,
        b"POST /v1/client-report HTTP/1.1\r\nContent-Length: 4000\r\n\r\n" + b"[" * 4000,
    ]
    for i in range(idle + busy):
        if time.monotonic() > end:
            failed += idle + busy - i
            break
        try:
            s = connect(port, timeout=2.0)
            if i >= idle:
                s.setblocking(False)
                with contextlib.suppress(BlockingIOError, ConnectionError):
                    s.send(harm[i % len(harm)])
            socks.append(s)
        except OSError:
            failed += 1
    return socks, failed


def assert_responsive(port: int) -> float:
    """/healthz, /readyz and /metrics each answer within a second; returns the slowest."""
    slowest = 0.0
    for path in ("/healthz", "/readyz", "/metrics", "/healthz"):
        code, body, took = get(port, path, timeout=1.0)
        assert code == 200, (path, body)
        assert took < 1.0, f"{path} took {took:.2f}s"
        slowest = max(slowest, took)
    return slowest


# ---------------------------------------------------------------------------------------- load
def flood(port: int, stop: threading.Event, counts: dict[str, int]) -> None:
    """Probes, scrapes and reports as fast as one thread can send them, until ``stop``."""
    while not stop.is_set():
        for path in ("/healthz", "/metrics"):
            try:
                counts[str(get(port, path, timeout=5)[0])] += 1
            except OSError as e:
                counts[type(e).__name__] += 1
        try:
            counts[str(post(port, REPORT)[0])] += 1
        except OSError as e:
            counts[type(e).__name__] += 1


def run_load(serve: Callable[..., Server], *, idle: int, busy: int, rounds: int, flooders: int = 0) -> None:
    """``rounds`` times: open ``idle`` + ``busy`` connections (kept open, or closed all at once
    after the round when there are several rounds), then /healthz, /readyz and /metrics must each
    answer within a second, with the thread count and the memory bounded; finally ``stop()`` with
    every connection open returns within two seconds. ``flooders`` threads send probes, scrapes
    and reports throughout."""
    threads_before = threading.active_count()
    rss_before = rss_bytes()
    srv = serve()
    threads_cap = threads_before + flooders + 6  # I/O thread, healthz, readyz, metrics, reports, cuts
    stop = threading.Event()
    counts: dict[str, int] = collections.Counter()
    workers = [threading.Thread(target=flood, args=(srv.port, stop, counts), daemon=True)
               for _ in range(flooders)]
    for w in workers:
        w.start()
    socks: list[socket.socket] = []
    opened = 0
    try:
        for round_ in range(rounds):
            closed_before = srv.rejected("evicted") + srv.rejected("capacity")
            socks, failed = open_load(srv.port, idle=idle, busy=busy)
            opened += len(socks)
            assert failed == 0, f"{failed} of {idle + busy} connections could not be opened"
            # The server has seen them all: every one beyond its cap was closed.
            beyond_cap = closed_before + len(socks) - srv.ep.limits.max_connections - busy

            def accepted(beyond_cap: float = beyond_cap) -> bool:
                return srv.rejected("evicted") + srv.rejected("capacity") >= beyond_cap

            wait_until(accepted, timeout=20, what="the load accepted")
            slowest = assert_responsive(srv.port)
            threads = threading.active_count()
            assert threads <= threads_cap, f"{threads} threads under load (cap {threads_cap})"
            assert srv.ep.connections <= srv.ep.limits.max_connections
            growth = rss_bytes() - rss_before
            assert growth < 48 * 2**20, f"RSS grew {growth / 2**20:.0f} MB"
            print(f"{opened} connections opened: /healthz etc. within {slowest * 1000:.0f} ms, "
                  f"{threads} threads, RSS +{growth / 2**20:.1f} MB, server holds {srv.ep.connections}")
            if round_ < rounds - 1:  # all at once, as a crashed client pool would
                for sock in socks:
                    sock.close()
                assert_responsive(srv.port)
        stop.set()
        for w in workers:
            w.join(10)
        started = time.monotonic()
        srv.ep.stop()  # with every client socket of the last round still open
        took = time.monotonic() - started
        assert took < 2.0, f"stop() took {took:.2f}s under load"
    finally:
        stop.set()
        for sock in socks:
            sock.close()
        for w in workers:
            w.join(10)
    if flooders:
        print(f"flood answers: {dict(counts)}")
        assert set(counts) == {"200", "204"}, counts  # no error, no refusal, no reset


def test_probes_answer_within_a_second_under_thousands_of_idle_and_busy_connections(
    serve: Callable[..., Server], many_files: None
) -> None:
    run_load(serve, idle=3000, busy=300, rounds=1)


@pytest.mark.slow
def test_probes_answer_within_a_second_under_waves_of_connections_and_a_request_flood(
    serve: Callable[..., Server], many_files: None
) -> None:
    run_load(serve, idle=4000, busy=1000, rounds=10, flooders=4)


# ---------------------------------------------------------------------------------------- bodies
def test_deep_json_gets_400_and_the_server_keeps_serving(serve: Callable[..., Server]) -> None:
    srv = serve()
    for body in (b"[" * 4000, b"[" * 2000 + b"]" * 2000, b'{"a":' * 800, b'{"samples": [[[[[1]]]]]}'):
        code, text, _ = post(srv.port, body)
        assert code == 400 and b"nested" in text, (code, text)
    assert post(srv.port, REPORT)[0] == 204
    assert srv.reports == [ClientReport(1, 10, 0.5)]
    assert get(srv.port, "/healthz")[0] == 200
    assert srv.rejected("bad_request") == 4
    # The parser on its own refuses any depth cleanly, however large the text.
    for deep in (b"[" * 100_000, b'{"x":' * 50_000 + b"1" + b"}" * 50_000):
        with pytest.raises(ValueError, match="nested"):
            ClientReport.parse(deep)
    assert ClientReport.parse(b'{"samples": 2, "bytes": 3}') == ClientReport(2, 3, 0.0)


def test_a_body_over_the_limit_gets_413(serve: Callable[..., Server]) -> None:
    srv = serve()
    code, text, _ = post(srv.port, b" " * 60_000 + REPORT)
    assert code == 413, (code, text)
    assert post(srv.port, b" " * (4097 - len(REPORT)) + REPORT)[0] == 413
    assert post(srv.port, b" " * (4096 - len(REPORT)) + REPORT)[0] == 204
    # Refused from the head alone: the client need not send a gigabyte to learn it.
    code, headers, _ = exchange(srv.port, b"POST /v1/client-report HTTP/1.1\r\n"
                                          b"Content-Length: 1000000000\r\n\r\n")
    assert code == 413 and headers["connection"] == "close"
    # With Expect: 100-continue, the refusal comes instead of the 100.
    code, _, _ = exchange(srv.port, b"POST /v1/client-report HTTP/1.1\r\nContent-Length: 5000\r\n"
                                    b"Expect: 100-continue\r\n\r\n")
    assert code == 413
    assert srv.rejected("too_large") == 4
    assert get(srv.port, "/healthz")[0] == 200


# ---------------------------------------------------------------------------------------- reports
def test_500_concurrent_client_reports_are_all_answered(
    serve: Callable[..., Server], many_files: None
) -> None:
    srv = serve()
    sel = selectors.DefaultSelector()
    request = (f"POST {CLIENT_REPORT_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(REPORT)}\r\nConnection: close\r\n\r\n").encode() + REPORT
    answers: dict[int, bytes] = {}
    errors: list[str] = []
    socks = []
    for i in range(500):  # all connects in flight at once
        s = socket.socket()
        s.setblocking(False)
        assert s.connect_ex(("127.0.0.1", srv.port)) in (0, errno.EINPROGRESS)
        sel.register(s, selectors.EVENT_WRITE, (i, bytearray()))
        socks.append(s)
    deadline = time.monotonic() + 20
    try:
        while len(answers) + len(errors) < 500 and time.monotonic() < deadline:
            for key, events in sel.select(0.5):
                s, (i, buf) = key.fileobj, key.data
                assert isinstance(s, socket.socket)
                try:
                    if events & selectors.EVENT_WRITE:
                        s.sendall(request)  # a few hundred bytes into an empty buffer
                        sel.modify(s, selectors.EVENT_READ, (i, buf))
                        continue
                    data = s.recv(4096)
                except OSError as e:
                    errors.append(f"{i}: {e!r}")
                    sel.unregister(s)
                    continue
                if data:
                    buf += data
                else:
                    answers[i] = bytes(buf)
                    sel.unregister(s)
    finally:
        for s in socks:
            s.close()
    assert not errors, f"{len(errors)} errors, e.g. {errors[:3]}"
    assert len(answers) == 500, f"only {len(answers)} of 500 answered within 20 s"
    codes = [int(a.split(b" ", 2)[1]) if a.startswith(b"HTTP/1.1 ") else 0 for a in answers.values()]
    assert set(codes) <= {204, 503}, sorted(set(codes))
    for a in answers.values():
        if b" 503 " in a.split(b"\r\n", 1)[0]:
            assert b"Retry-After: 1" in a
    assert len(srv.reports) == codes.count(204)
    print(f"500 concurrent reports: {codes.count(204)} accepted, {codes.count(503)} told to retry")


def test_the_torch_reporter_keeps_its_counts_through_a_503(serve: Callable[..., Server]) -> None:
    entered, release = threading.Event(), threading.Event()
    seen: list[ClientReport] = []

    def slow(report: ClientReport) -> None:
        seen.append(report)
        entered.set()
        release.wait(30)

    srv = serve(on_report=slow, report_queue=1, check_timeout=30)
    blocking = connect(srv.port)
    queued = connect(srv.port)
    try:
        head = f"POST {CLIENT_REPORT_PATH} HTTP/1.1\r\nContent-Length: {len(REPORT)}\r\n\r\n".encode()
        blocking.sendall(head + REPORT)
        wait_until(entered.is_set, timeout=5, what="the report thread busy")
        queued.sendall(head + REPORT)
        wait_until(lambda: srv.ep._reports._jobs.full(), timeout=5, what="the report queue full")
        code, _, headers = post(srv.port, REPORT)
        assert code == 503 and headers["Retry-After"] == "1"
        assert srv.rejected("busy") == 1
        reporter = ClientReporter(url=f"http://127.0.0.1:{srv.port}{CLIENT_REPORT_PATH}", timeout=5)
        reporter.add(samples=7, nbytes=700, wait_seconds=0.25)
        reporter._stop.set()  # no background thread: the test calls flush itself
        assert reporter.flush() is False and reporter.failed_reports == 1  # 503: kept for later
        release.set()
        assert read_response(blocking.makefile("rb"))[0] == 204
        assert read_response(queued.makefile("rb"))[0] == 204
        assert reporter.flush() is True
        assert seen[-1] == ClientReport(7, 700, 0.25, client=reporter.client)  # they survived the 503
    finally:
        release.set()
        blocking.close()
        queued.close()


# ---------------------------------------------------------------------------------------- limits
def test_slow_and_idle_connections_are_closed_at_their_deadline(serve: Callable[..., Server]) -> None:
    srv = serve(request_timeout=0.5)
    slowloris = connect(srv.port)
    slowloris.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    silent = connect(srv.port)
    kept = connect(srv.port)
    kept.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
    assert read_response(kept.makefile("rb"))[0] == 200
    started = time.monotonic()
    for s in (slowloris, silent, kept):
        assert closed_by_peer(s, timeout=5), "still open after 5 s"
        s.close()
    assert time.monotonic() - started < 3
    assert srv.rejected("timeout") == 2  # an idle keep-alive connection is closed but not counted
    wait_until(lambda: srv.open_connections() == 0, timeout=5, what="no connection left")


def test_excess_connections_close_the_oldest_idle_and_probes_get_in(serve: Callable[..., Server]) -> None:
    srv = serve(max_connections=16)
    idle = [connect(srv.port) for _ in range(100)]
    try:
        wait_until(lambda: srv.rejected("evicted") >= 84, timeout=10, what="84 evictions")
        assert srv.ep.connections <= 16
        code, _, took = get(srv.port, "/healthz")
        assert code == 200 and took < 1.0
        assert closed_by_peer(idle[0], timeout=2)  # the oldest went first
        idle[-1].setblocking(False)
        with pytest.raises(BlockingIOError):  # the newest is still open
            idle[-1].recv(1)
    finally:
        for s in idle:
            s.close()


def test_when_every_slot_has_a_request_in_progress_a_new_connection_is_closed(
    serve: Callable[..., Server]
) -> None:
    release = threading.Event()
    srv = serve(max_connections=8, health=lambda: (release.wait(30), {}))
    waiting = [connect(srv.port) for _ in range(8)]
    try:
        for s in waiting:
            s.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
        wait_until(lambda: len(srv.ep._flights["/healthz"].waiters) == 8, timeout=5, what="8 probes waiting")
        assert refused_or_closed(srv.port, timeout=2)
        assert srv.rejected("capacity") == 1
        release.set()
        for s in waiting:
            assert read_response(s.makefile("rb"))[0] == 200
    finally:
        release.set()
        for s in waiting:
            s.close()


def test_a_hung_check_answers_503_at_its_deadline_and_stop_is_prompt(serve: Callable[..., Server]) -> None:
    release = threading.Event()
    calls: list[float] = []

    def hung() -> tuple[bool, dict[str, Any]]:
        calls.append(time.monotonic())
        release.wait(60)
        return True, {}

    srv = serve(health=hung, check_timeout=0.5)
    try:
        probes = [connect(srv.port) for _ in range(20)]
        for s in probes:
            s.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
        for s in probes:  # all answered at the deadline, by one call of the check (single flight)
            code, headers, body = read_response(s.makefile("rb"))
            assert code == 503 and json.loads(body)["ok"] is False, body
            assert headers["content-type"] == "application/json"
            s.close()
        assert len(calls) == 1
        # Still stuck: the next probe is answered at once; the other check is not held up.
        code, _, took = get(srv.port, "/healthz")
        assert code == 503 and took < 0.4
        assert get(srv.port, "/readyz")[0] == 200
        started = time.monotonic()
        srv.ep.stop()
        assert time.monotonic() - started < 1.0
    finally:
        release.set()


def test_protocol_limits_and_keep_alive(serve: Callable[..., Server]) -> None:
    srv = serve(max_requests_per_connection=3, host="0.0.0.0")
    port = srv.port
    assert exchange(port, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n")[0] == 414
    assert exchange(port, b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * 100 + b"\r\n")[0] == 431
    assert exchange(port, b"GET / HTTP/1.1\r\nX-A: " + b"b" * 9000 + b"\r\n\r\n")[0] == 431
    assert exchange(port, b"POST /v1/client-report HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")[0] == 501
    assert exchange(port, b"HELLO\r\n\r\n")[0] == 400
    assert exchange(port, b"GET /healthz HTTP/2.0\r\n\r\n")[0] == 505
    assert exchange(port, b"PUT /healthz HTTP/1.1\r\n\r\n")[0] == 405  # a route of GET: 405, Allow: GET
    assert exchange(port, b"PUT /nothing HTTP/1.1\r\n\r\n")[0] == 501
    assert exchange(port, b"GET /nothing HTTP/1.1\r\n\r\n")[0] == 404
    assert exchange(port, b"POST /healthz HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")[0] == 405
    assert exchange(port, b"POST /v1/client-report HTTP/1.1\r\n\r\n")[0] == 400
    assert exchange(port, b"POST /v1/client-report HTTP/1.1\r\nContent-Length: x\r\n\r\n")[0] == 400
    # Keep-alive, pipelined: three requests in one write, three answers, then the server closes.
    with connect(port) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\n\r\nGET /readyz HTTP/1.1\r\n\r\n"
                  b"POST /v1/client-report HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(REPORT), REPORT))
        f = s.makefile("rb")
        first, second, third = read_response(f), read_response(f), read_response(f)
        assert [first[0], second[0], third[0]] == [200, 200, 204]
        assert "connection" not in first[1] and third[1]["connection"] == "close"
        assert json.loads(second[2]) == {"ok": True, "samples": 3}
        assert closed_by_peer(s, timeout=2)
    # The same bodies and types as before for the probes and /metrics.
    code, body, _ = get(port, "/healthz")
    assert code == 200 and json.loads(body) == {"ok": True, "mount": "ok"}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.headers["Content-Type"] == CONTENT_TYPE_LATEST
        assert b"# TYPE epochfs_client_samples_total counter" in r.read()
    assert srv.reports == [ClientReport(1, 10, 0.5)]
    assert srv.rejected("too_large") == 3 and srv.rejected("bad_request") == 8  # the 405s too
    # Reports only from the loopback (403 from the machine's own non-loopback address).
    address = own_address()
    if address is not None:
        with socket.create_connection((address, port), timeout=3) as s:
            s.sendall(b"POST /v1/client-report HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s"
                      % (len(REPORT), REPORT))
            assert read_response(s.makefile("rb"))[0] == 403
        assert srv.reports == [ClientReport(1, 10, 0.5)]


def own_address() -> str | None:
    """A non-loopback IPv4 address of this machine (the one its default route uses), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # a route lookup only: UDP connect sends nothing
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if address.startswith("127.") else address


# ---------------------------------------------------------------------------------------- the sidecar
@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE")
def test_the_sidecar_answers_probes_and_exits_0_on_sigterm_under_thousands_of_connections(
    s3: S3Server, tmp_path: Path, many_files: None
) -> None:
    put_objects(s3, "data", random_objects(5, 4096))
    extra = ("--min-samples", "1")
    with running_sidecar(tmp_path, remote="s3://data", endpoint=s3.endpoint, extra=extra) as car:
        socks, failed = open_load(car.port, idle=3000, busy=300)
        try:
            assert failed == 0, f"{failed} connections could not be opened"
            slowest = 0.0
            for _ in range(3):
                code, body, took = get(car.port, "/healthz", timeout=1.0)
                assert code == 200 and took < 1.0, (code, body, took)
                slowest = max(slowest, took)
            rejected = car.metric("epochfs_http_rejected_total", reason="evicted") or 0
            assert rejected > 0
            started = time.monotonic()
            code = car.stop()  # SIGTERM with every connection still open
            took = time.monotonic() - started
            print(f"/healthz within {slowest * 1000:.0f} ms; SIGTERM: exit {code} in {took:.2f}s")
            assert code == 0 and took < 10
        finally:
            for s in socks:
                s.close()
