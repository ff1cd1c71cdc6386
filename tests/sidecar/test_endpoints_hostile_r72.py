"""Hostile requests to the sidecar's HTTP endpoints that an exploratory run found mishandled:
an ``X-Epochfs-Cache`` header holding a newline (percent-encoded) was written raw into the log
(a forged log line, a NUL that made the log a binary file), and ``Expect: 100-Continue`` in
another case than lowercase got 417 (RFC 9110 compares it case-insensitively), and a request whose
target is in absolute form (``GET http://127.0.0.1:8080/healthz``, what a client sends through a
proxy, and which a server must accept: RFC 9112, 3.2.2) got 404: it is routed by its path. The
real endpoint server on a real socket, and its request parser on its own."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from epochfs.sidecar import metrics
from epochfs.sidecar.endpoints import CLIENT_REPORT_PATH, Endpoints, Limits
from epochfs.sidecar.endpoints.http11 import Request, parse_head

REPORT = b'{"samples": 1, "bytes": 10, "wait_seconds": 0.5}'


@pytest.fixture
def endpoints(tmp_path: Path) -> Iterator[Endpoints]:
    (tmp_path / "cache").mkdir()
    ep = Endpoints(host="127.0.0.1", port=0, health=lambda: (True, {}), ready=lambda: (True, {}),
                   registry=CollectorRegistry(), on_client_report=lambda report: None, limits=Limits(),
                   metrics=metrics.EndpointMetrics(registry=CollectorRegistry()), cache=tmp_path / "cache")
    ep.start()
    try:
        yield ep
    finally:
        ep.stop()


def _send(port: int, head: bytes, body: bytes = b"") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(head + body)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_a_header_with_a_newline_is_logged_on_one_line(endpoints: Endpoints,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    forged = "x%0a2099-01-01 00:00:00,000 epochfs.supervisor ERROR FORGED%00"
    head = (f"POST {CLIENT_REPORT_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(REPORT)}\r\n"
            f"X-Epochfs-Cache: {forged}\r\nConnection: close\r\n\r\n").encode()
    with caplog.at_level(logging.WARNING, logger="epochfs"):
        answer = _send(endpoints.port, head, REPORT)
    assert answer.startswith(b"HTTP/1.1 409 "), answer[:200]
    said = [r.getMessage() for r in caplog.records if "another cache" in r.getMessage()]
    assert len(said) == 1, said
    assert "\n" not in said[0] and "\x00" not in said[0], said
    assert "'x\\n2099-01-01 00:00:00,000 epochfs.supervisor ERROR FORGED\\x00'" in said[0], said


@pytest.mark.parametrize("expect", ["100-continue", "100-Continue", "100-CONTINUE"])
def test_expect_100_continue_is_taken_in_any_case(endpoints: Endpoints, expect: str) -> None:
    head = (f"POST {CLIENT_REPORT_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(REPORT)}\r\n"
            f"Expect: {expect}\r\nConnection: close\r\n\r\n").encode()
    answer = _send(endpoints.port, head, REPORT)
    assert answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 "), answer[:200]


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("GET", CLIENT_REPORT_PATH, "POST"), ("POST", "/healthz", "GET"), ("PUT", "/readyz", "GET"),
    ("DELETE", CLIENT_REPORT_PATH, "POST"),
])
def test_a_route_asked_with_another_method_answers_405_with_allow(endpoints: Endpoints, method: str,
                                                                  path: str, allowed: str) -> None:
    request = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
    answer = _send(endpoints.port, request.encode())
    head = answer.split(b"\r\n\r\n", 1)[0].decode()
    assert head.startswith("HTTP/1.1 405 "), answer[:200]
    assert f"\r\nAllow: {allowed}\r\n" in head + "\r\n", head
    for unknown in ("GET /nothing", "PUT /nothing"):  # no route: 404, and 501 for a method of none
        code = _send(endpoints.port, f"{unknown} HTTP/1.1\r\nHost: x\r\n\r\n".encode())[9:12]
        assert code == (b"404" if unknown.startswith("GET") else b"501"), unknown


@pytest.mark.parametrize("target, path, query", [
    (b"http://127.0.0.1:8080/healthz", "/healthz", ""),
    (b"HTTP://sidecar.example:80/v1/cut?epoch=3", "/v1/cut", "epoch=3"),
    (b"https://[::1]:8443/metrics", "/metrics", ""),
    (b"http://host?x=1", "/", "x=1"),
    (b"http://host", "/", ""),
    (b"/healthz", "/healthz", ""),  # the origin form, unchanged
    (b"/http://host/healthz", "/http://host/healthz", ""),  # a path, not a scheme
])
def test_an_absolute_target_is_routed_by_its_path(target: bytes, path: str, query: str) -> None:
    got = parse_head(b"GET " + target + b" HTTP/1.1\r\nHost: x", max_headers=10)
    assert isinstance(got, Request), got
    assert (got.path, got.query) == (path, query)


def test_the_server_answers_an_absolute_form_request(endpoints: Endpoints) -> None:
    head = f"GET http://127.0.0.1:{endpoints.port}/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", endpoints.port), timeout=5) as s:
        s.sendall(head.encode())
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
