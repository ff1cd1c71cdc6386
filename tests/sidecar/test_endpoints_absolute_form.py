"""A request whose target is in absolute form (``GET http://127.0.0.1:8080/healthz HTTP/1.1``,
what a client sends through a proxy, and which a server must accept: RFC 9112, 3.2.2) is routed
by its path, as the origin form is; it answered 404. The parser on its own, and the real endpoint
server on a real socket."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from epochfs.sidecar import metrics
from epochfs.sidecar.endpoints import Endpoints, Limits
from epochfs.sidecar.endpoints.http11 import Request, parse_head


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


def test_the_server_answers_an_absolute_form_request(endpoints: Endpoints) -> None:
    head = f"GET http://127.0.0.1:{endpoints.port}/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", endpoints.port), timeout=5) as s:
        s.sendall(head.encode())
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
