"""The webhook against clients that stall or send what no API server sends: a stalled body holds no
review slot, a deeply nested body is a refusal, a bad certificate pair is read and logged once.

Before: a request took one of the in-flight slots before its body arrived and held it up to 30 s,
so 16 connections that sent headers and stalled made every pod creation answer 429 (with the
chart's ``failurePolicy: Fail``, every pod that asked for epochfs failed); ``[[[...`` nested
100,000 deep was a 500 with a traceback and no count; a certificate/key pair that did not match
was read again and logged for every connection.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from test_webhook_server import Served, docs, profiles, serve  # noqa: F401  (fixtures)
from webhook_helpers import SERVICE_DNS, admission_review, job, job_pod, make_ca, make_leaf

from epochfs.sidecar.webhook import server as server_mod
from epochfs.sidecar.webhook import serving
from epochfs.sidecar.webhook.profiles import Profile


@pytest.fixture
def served(profiles: dict[str, Profile], tmp_path: Path) -> Iterator[Served]:  # noqa: F811
    yield from serve(profiles, tmp_path)


def _stalled(served: Served, length: int = 1000) -> ssl.SSLSocket:
    """A connection that sent a POST's headers and part of its body, and then nothing."""
    sock = socket.create_connection(("127.0.0.1", served.server.server_address[1]), timeout=30)
    tls = served.client.context.wrap_socket(sock, server_hostname=SERVICE_DNS)
    tls.sendall(f"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {length}\r\n\r\n{{".encode())
    return tls


def test_clients_that_stall_in_their_body_take_no_review_slot(served: Served) -> None:
    stalled = [_stalled(served) for _ in range(served.server.max_in_flight + 4)]
    try:
        for _ in range(3):
            answer = served.client.review(job_pod(job()))
            assert answer["response"]["allowed"] is True, answer
    finally:
        for sock in stalled:
            sock.close()


def test_a_body_that_never_arrives_is_answered_408_and_counted(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert server_mod.BODY_TIMEOUT <= 30
    monkeypatch.setattr(server_mod, "BODY_TIMEOUT", 0.5)
    before = served.counts()
    with _stalled(served) as sock:
        # The answer is read whole by its Content-Length, not to the end of the connection: after
        # it, aiohttp lingers up to 10 s reading the body that never comes before it closes.
        response = http.client.HTTPResponse(sock)
        response.begin()
        answer = response.read()
    assert response.status == 408 and b"did not arrive within 0.5 s" in answer, answer
    assert response.getheader("Connection") == "close", response.getheaders()
    assert served.counts()["error"] - before["error"] == 1


def test_a_deeply_nested_body_is_refused_400_and_counted(served: Served) -> None:
    before = served.counts()
    status, body = served.client.post("/mutate", b'{"a":' * 100_000)
    assert status == 400, body
    assert b"nested too deeply" in body
    assert served.counts()["error"] - before["error"] == 1
    # A valid review still works on a fresh connection.
    review = admission_review(job_pod(job()))
    status, body = served.client.post("/mutate", json.dumps(review).encode())
    assert status == 200 and json.loads(body)["response"]["allowed"] is True


def test_a_pair_that_does_not_match_is_read_and_logged_once(
    profiles: dict[str, Profile], tmp_path: Path, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    ca = make_ca()
    for served in serve(profiles, tmp_path, ca):
        first = served.client.peer_serial()
        _, other_key, _ = make_leaf(ca, [SERVICE_DNS])
        caplog.set_level(logging.WARNING, logger="epochfs.webhook")
        (tmp_path / "tls.key").write_bytes(other_key)  # a key of another certificate
        for _ in range(5):
            assert served.client.peer_serial() == first  # the previous pair keeps serving
        warnings = [r for r in caplog.records if "cannot load" in r.getMessage()]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        cert, key, serial = make_leaf(ca, [SERVICE_DNS])
        (tmp_path / "tls.key").write_bytes(key)
        (tmp_path / "tls.crt").write_bytes(cert)
        assert served.client.peer_serial() == serial  # a pair that loads is served again


def test_bodies_being_read_are_bounded_in_bytes(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bodies are read before a review slot is taken, so their bytes are bounded on their own:
    clients that stalled near the largest body each held ~3.5 MiB, and about 50 of them took the
    webhook past the chart's 256 MiB."""
    review = json.dumps(admission_review(job_pod(job()))).encode()
    monkeypatch.setattr(server_mod, "MAX_READING_BYTES", len(review) + 500)
    assert served.client.review(job_pod(job()))["response"]["allowed"] is True  # alone: fits
    with _stalled(served, length=1000):
        before = served.counts()
        status, body = served.client.post("/mutate", review)
        assert status == 429 and b"bytes of request bodies being read" in body, body
        after = served.counts()
        assert (after["busy"] - before["busy"], after["error"] - before["error"]) == (1, 0)
    # The stalled body's bytes are given back once its connection is gone.
    wait_until(lambda: served.client.post("/mutate", review)[0] == 200, timeout=30,
               what="a review once the stalled body is dropped")


def test_a_stalled_client_answered_408_is_let_go_within_the_linger(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the 408, the server reads on for the body only ``LINGER_SECONDS`` before it closes the
    connection (aiohttp's default, 10 s, held each stalled client's socket that long)."""
    assert serving.LINGER_SECONDS <= 2
    monkeypatch.setattr(server_mod, "BODY_TIMEOUT", 0.5)
    with _stalled(served) as sock:
        response = http.client.HTTPResponse(sock)
        response.begin()
        response.read()
        assert response.status == 408
        sock.settimeout(6)  # the linger and a loaded machine's margin; aiohttp's default is 10 s
        assert sock.recv(1) == b"", "the server closed the connection"
