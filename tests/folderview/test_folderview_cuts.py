"""Cuts asked for over HTTP (``POST /v1/cut``, sidecar/cutrequest.py) and epochs reported in use
(``/v1/client-report?epoch=N``): the rule over a real store, then through a real
:class:`Endpoints` on 127.0.0.1 (loopback only, no body, bad queries, a hung store answered 503).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fuse_helpers import admit, make_objects, open_store
from prometheus_client import CollectorRegistry

from epochfs.sidecar import cutrequest, metrics
from epochfs.sidecar.cutrequest import CutRequest
from epochfs.sidecar.endpoints import ClientReport, Endpoints, Limits
from epochfs.sidecar.store import Store
from epochfs.torchclient import layout


def last_read(store: Store, n: int) -> float:
    return float(store._ix.query("SELECT last_read FROM epochs WHERE n=?", (n,))[0][0])


def rows(store: Store) -> tuple[int, int]:
    """(epoch rows, queued requests): what a stray request must never add to."""
    return (int(store._ix.query("SELECT COUNT(*) FROM epochs")[0][0]),
            int(store._ix.query("SELECT COUNT(*) FROM cut_requests")[0][0]))


@pytest.mark.parametrize("query,expected", [
    ("epoch=0", CutRequest(0)), ("epoch=12&jump=1", CutRequest(12, True)),
    ("jump=0&epoch=7", CutRequest(7)), (f"epoch={layout.MAX_EPOCH}", CutRequest(layout.MAX_EPOCH)),
])
def test_parse(query: str, expected: CutRequest) -> None:
    assert CutRequest.parse(query) == expected
    assert CutRequest.parse(expected.query()) == expected


@pytest.mark.parametrize("query", [
    "", "epoch=", "epoch=007", "epoch=-1", "epoch=1e3", "epoch=%D9%A3", f"epoch={layout.MAX_EPOCH + 1}",
    "epoch=1&epoch=2", "epoch=1&jump=yes", "epoch=1&jump=1&jump=1", "epoch=1&force=1", "epoch=1&&",
])
def test_parse_refuses(query: str) -> None:
    with pytest.raises(ValueError):
        CutRequest.parse(query)


def test_the_rule_next_only_queued_jump_gone(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", min_samples=3, keep_epochs=1, in_use_seconds=100)
    admit(store, make_objects(2, 10))
    # Not enough samples: the next epoch (0) is queued; one far ahead is refused, leaving nothing.
    code, doc = cutrequest.answer(store, CutRequest(0))
    assert (code, doc["state"]) == (202, "waiting") and [n for n, _ in store.pending_cuts()] == [0]
    before = rows(store)
    for n in (1, 5, 999_999):
        code, doc = cutrequest.answer(store, CutRequest(n))
        assert (code, doc["state"]) == (409, "refused") and "jump=1" in doc["message"], doc
    assert rows(store) == before
    # A jump whose condition does not hold yet: 202, nothing queued or cut.
    code, doc = cutrequest.answer(store, CutRequest(5, jump=True))
    assert (code, doc["state"]) == (202, "waiting") and rows(store) == before
    admit(store, make_objects(2, 10, start=2))
    code, doc = cutrequest.answer(store, CutRequest(0))
    assert (code, doc["state"], doc["epoch"]) == (200, "live", 0)
    assert [e.epoch for e in store.epochs()] == [0] and last_read(store, 0) > 0
    # A resumed trainer jumps to 5 explicitly; 1-4 are then gone for good (never cut, below).
    code, doc = cutrequest.answer(store, CutRequest(5, jump=True))
    assert (code, doc["state"]) == (200, "live") and store.newest_epoch() == 5
    code, doc = cutrequest.answer(store, CutRequest(3))
    assert (code, doc["state"]) == (410, "gone"), doc
    # A live epoch asked for again is a read of it: it stays pinned past keep_epochs.
    stamp = last_read(store, 0)
    code, doc = cutrequest.answer(store, CutRequest(0))
    assert code == 200 and last_read(store, 0) >= stamp
    assert store.retire() == []  # 0 was read just now: in use
    assert store.retire(now=time.time() + 1000) == [0]
    assert cutrequest.answer(store, CutRequest(0))[0] == 410  # retired
    # The next epoch (6) is cut at once now that the condition holds.
    assert cutrequest.answer(store, CutRequest(6))[0] == 200 and store.newest_epoch() == 6
    store.close()


def test_a_far_jump_is_refused_for_good_and_an_epoch_past_the_limit_is_a_bad_request(
        tmp_path: Path, endpoints: Callable[..., Any]) -> None:
    """One loopback request used to end the view for the cache's life (``epoch=2147483648&jump=1``
    answered 200 live, the epoch had no inode numbers, every later epoch was invisible): a number
    above MAX_EPOCH is a 400 naming the limit; a jump of more than MAX_JUMP is a 409 the client
    does not ask again after; nothing is cut."""
    from epochfs.sidecar.store import MAX_JUMP
    from epochfs.torchclient.cutask import ask_cut

    store = open_store(tmp_path / "cache")
    admit(store, make_objects(3, 10))
    ep, _ = endpoints(lambda req: cutrequest.answer(store, req))
    code, body = request(ep.port, "POST", "/v1/cut?epoch=2147483648&jump=1")
    assert code == 400 and b"536870910" in body, body
    code, body = request(ep.port, "POST", f"/v1/cut?epoch={MAX_JUMP + 1}&jump=1")
    doc = json.loads(body)
    assert (code, doc["state"], doc["final"]) == (409, "refused", True), doc
    assert "--far" in doc["message"] and store.newest_epoch() is None
    answer = ask_cut(f"http://127.0.0.1:{ep.port}", MAX_JUMP + 1, jump=True)
    assert answer is not None and answer.final, answer
    code, body = request(ep.port, "POST", f"/v1/cut?epoch={MAX_JUMP}&jump=1")  # at the limit
    assert code == 200 and store.newest_epoch() == MAX_JUMP, body
    store.close()


def test_many_ranks_asking_for_one_epoch_get_one_cut(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache")
    admit(store, make_objects(4, 10))
    answers: list[int] = []
    threads = [threading.Thread(target=lambda: answers.append(cutrequest.answer(store, CutRequest(0))[0]))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [200] * 8 and [e.epoch for e in store.epochs()] == [0]
    assert store.stats().cuts_total == 1
    store.close()


# ---------------------------------------------------------------------------------------- HTTP
@pytest.fixture
def endpoints() -> Iterator[Callable[..., tuple[Endpoints, list[ClientReport]]]]:
    started: list[Endpoints] = []

    def make(on_cut: Callable[[CutRequest], tuple[int, dict[str, Any]]] | None,
             **limits: Any) -> tuple[Endpoints, list[ClientReport]]:
        reports: list[ClientReport] = []
        ep = Endpoints(host="127.0.0.1", port=0, health=lambda: (True, {}), ready=lambda: (True, {}),
                       registry=None, on_client_report=reports.append, limits=Limits(**limits),
                       metrics=metrics.EndpointMetrics(registry=CollectorRegistry()),
                       on_cut=on_cut)
        ep.start()
        started.append(ep)
        return ep, reports

    yield make
    for ep in started:
        ep.stop()


def request(port: int, method: str, path: str, body: bytes | None = None,
            timeout: float = 5.0) -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {} if body is None else {"Content-Type": "application/json"}
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def test_cut_requests_over_http(tmp_path: Path, endpoints: Callable[..., Any]) -> None:
    store = open_store(tmp_path / "cache")
    admit(store, make_objects(3, 10))
    ep, _ = endpoints(lambda req: cutrequest.answer(store, req))
    code, body = request(ep.port, "POST", "/v1/cut?epoch=0")
    doc = json.loads(body)
    assert (code, doc["state"], doc["epoch"]) == (200, "live", 0) and store.newest_epoch() == 0
    assert request(ep.port, "POST", "/v1/cut?epoch=4")[0] == 409
    assert request(ep.port, "POST", "/v1/cut?epoch=4&jump=1")[0] == 200 and store.newest_epoch() == 4
    for bad in ("/v1/cut", "/v1/cut?epoch=x", "/v1/cut?epoch=1&jump=2"):
        code, body = request(ep.port, "POST", bad)
        assert code == 400, (bad, body)
    assert request(ep.port, "POST", "/v1/cut?epoch=5", body=b"{}")[0] == 400  # no body
    assert request(ep.port, "GET", "/v1/cut?epoch=5")[0] == 405  # a route of POST
    assert store.newest_epoch() == 4
    store.close()


def test_cut_requests_only_on_loopback_and_only_when_served(endpoints: Callable[..., Any]) -> None:
    asked: list[CutRequest] = []

    def on_cut(req: CutRequest) -> tuple[int, dict[str, Any]]:
        asked.append(req)
        return 200, {}

    ep, _ = endpoints(on_cut)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            address = str(s.getsockname()[0])
        except OSError:
            address = "127.0.0.1"
    if not address.startswith("127."):
        ep2 = Endpoints(host="0.0.0.0", port=0, health=lambda: (True, {}), ready=lambda: (True, {}),
                        registry=None, on_client_report=None, on_cut=on_cut,
                        metrics=metrics.EndpointMetrics(registry=CollectorRegistry()))
        ep2.start()
        try:
            c = http.client.HTTPConnection(address, ep2.port, timeout=5)
            c.request("POST", "/v1/cut?epoch=0")
            assert c.getresponse().status == 403
            c.close()
        finally:
            ep2.stop()
        assert asked == []
    none, _ = endpoints(None)
    assert request(none.port, "POST", "/v1/cut?epoch=0")[0] == 404
    assert request(ep.port, "POST", "/v1/cut?epoch=0")[0] == 200 and asked == [CutRequest(0)]


def test_a_store_that_hangs_gets_503_and_probes_still_answer(endpoints: Callable[..., Any]) -> None:
    release = threading.Event()

    def hang(req: CutRequest) -> tuple[int, dict[str, Any]]:
        release.wait(10)
        return 200, {}

    ep, _ = endpoints(hang, check_timeout=0.5)
    try:
        started = time.monotonic()
        assert request(ep.port, "POST", "/v1/cut?epoch=0")[0] == 503
        assert time.monotonic() - started < 3
        assert request(ep.port, "GET", "/healthz")[0] == 200
    finally:
        release.set()


def test_reports_name_the_epochs_in_use(endpoints: Callable[..., Any]) -> None:
    ep, reports = endpoints(None)
    body = b'{"samples": 2, "bytes": 20, "wait_seconds": 0.1}'
    assert request(ep.port, "POST", "/v1/client-report?epoch=3&epoch=4&epoch=3", body)[0] == 204
    assert request(ep.port, "POST", "/v1/client-report", body)[0] == 204
    for bad in ("?epoch=03", "?epoch=x", "?foo=1", "?" + "&".join(f"epoch={i}" for i in range(9))):
        assert request(ep.port, "POST", "/v1/client-report" + bad, body)[0] == 400, bad
    assert reports == [ClientReport(2, 20, 0.1, (3, 4)), ClientReport(2, 20, 0.1)]
