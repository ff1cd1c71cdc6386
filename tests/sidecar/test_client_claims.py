"""The torch client's reports pin the epochs it reads now, not every epoch it read for 40 s.

Review II F1: with reads dated a heartbeat ahead (40 s), epochs shorter than that all stayed live
with ``--in-use-seconds 0``, the full cache stopped turning over and the demo trained on a frozen
third of its data. A report names its client; its epochs are that client's claim, renewed while it
names them and released by its next report that does not (sidecar/served_pins.py).
"""

from __future__ import annotations

import http.server
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from prometheus_client import CollectorRegistry
from store_helpers import put

from epochfs.sidecar import metrics
from epochfs.sidecar.endpoints import ClientReport, Endpoints
from epochfs.sidecar.served_pins import CLAIM_SECONDS, RENEW_AHEAD, ReadRecords
from epochfs.sidecar.store import Policy, Store
from epochfs.torchclient.report import ClientReporter


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """Epochs 0 and 1, the newest one kept, no in-use window: only a read record pins epoch 0."""
    s = Store(tmp_path / "cache", create=True)
    s.configure(Policy(capacity=1000, keep_epochs=1, headroom=0.3, in_use_seconds=0.0))
    for i in range(4):
        put(s, f"k{i}")
    assert s.cut(0) == 0
    put(s, "k4")
    assert s.cut(1) == 1
    yield s
    s.close()


def _last_read(store: Store, n: int) -> float:
    with sqlite3.connect(store.root / "index.sqlite") as db:
        return float(db.execute("SELECT last_read FROM epochs WHERE n=?", (n,)).fetchone()[0])


def test_an_epoch_the_client_moved_on_from_retires_within_seconds(store: Store) -> None:
    """A real reporter posting to the sidecar's endpoint: the epoch it reads stays pinned while
    it reads it; once its loop ends that epoch and begins the next, the old one retires a few
    seconds later (RENEW_AHEAD), not 40 s later."""
    reads = ReadRecords(store, renew_every=None)  # renewed by the test, on its own clock

    def on_report(r: ClientReport) -> None:  # what the supervisor does with a report
        reads.client_epochs(r.epochs, client=r.client)

    ep = Endpoints(host="127.0.0.1", port=0, health=lambda: (True, {}), ready=lambda: (True, {}),
                   registry=None, on_client_report=on_report, on_cut=None,
                   metrics=metrics.EndpointMetrics(registry=CollectorRegistry()))
    ep.start()
    reporter = ClientReporter(url=f"http://127.0.0.1:{ep.port}/v1/client-report", interval=0.05)
    try:
        reporter.reading(0)
        wait_until(lambda: reads.claimed() == [0], timeout=10, what="the client's claim on epoch 0")
        assert _last_read(store, 0) > time.time()  # pinned while read, whatever the window
        assert store.retire(now=time.time()) == []
        assert reads.renew() == [0]
        reporter.done(0)
        reporter.reading(1)
        wait_until(lambda: reads.claimed() == [1], timeout=10, what="the report that moved on to epoch 1")
        assert reads.renew() == [1]
        assert _last_read(store, 0) <= time.time() + RENEW_AHEAD
        assert store.retire(now=time.time() + RENEW_AHEAD + 1.0) == [0]
    finally:
        reporter.close()
        ep.stop()


def test_a_paused_client_keeps_its_epoch_until_its_claim_lapses(store: Store) -> None:
    """A client pausing between two heartbeats (a checkpoint) keeps its epoch pinned with no
    in-use window: the renewer dates its read ahead at every turn. A client silent for longer than
    a heartbeat and a debounce (it died) loses its claim, and the epoch retires."""
    now = [1000.0]
    reads = ReadRecords(store, clock=lambda: now[0], renew_every=None)
    reads.client_epochs((0,), client="a1")
    now[0] += CLAIM_SECONDS - 1.0  # the next heartbeat not there yet
    assert reads.renew() == [0]
    assert store.retire(now=time.time() + 1.0) == []
    now[0] += 2.0
    assert reads.renew() == []
    assert store.retire(now=time.time() + RENEW_AHEAD + 1.0) == [0]


def test_an_epoch_two_clients_read_stays_until_both_moved_on(store: Store) -> None:
    reads = ReadRecords(store, renew_every=None)
    reads.client_epochs((0,), client="a1")
    reads.client_epochs((0,), client="b2")
    reads.client_epochs((1,), client="a1")  # a1 moved on; b2 still reads epoch 0
    assert reads.renew() == [0, 1]
    reads.client_epochs((), client="b2")  # b2 ended its epoch and reads nothing now
    assert reads.renew() == [1]
    assert store.retire(now=time.time() + RENEW_AHEAD + 1.0) == [0]


def test_the_renewer_runs_while_a_client_claims_an_epoch(store: Store) -> None:
    """With the renewer thread: the claimed epoch's record moves ahead at each turn; the thread
    ends once no client claims anything."""
    reads = ReadRecords(store, renew_every=0.05)
    reads.client_epochs((0,), client="a1")
    first = _last_read(store, 0)
    wait_until(lambda: _last_read(store, 0) > first, timeout=10, what="a renewal of epoch 0's read")
    reads.client_epochs((), client="a1")
    wait_until(lambda: reads._renewer is None, timeout=10, what="the renewer to end")


def test_a_sidecar_refusing_the_client_parameter_still_gets_the_epochs() -> None:
    """An older sidecar answers 400 to a query with ``client=``: the reporter sends its reports
    without it from then on, so the epochs it reads are still named (and pinned that sidecar's way)."""
    queries: list[str] = []

    class OldSidecar(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            query = self.path.partition("?")[2]
            queries.append(query)
            self.send_response(400 if "client=" in query else 204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), OldSidecar)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    reporter = ClientReporter(url=f"http://127.0.0.1:{server.server_port}/v1/client-report", interval=0.05)
    try:
        reporter.reading(3)
        wait_until(lambda: "epoch=3" in queries, timeout=10, what="a report the old sidecar takes")
        assert queries[0].startswith("epoch=3&client=") and reporter.failed_reports == 0
    finally:
        reporter.close()
        server.shutdown()
        server.server_close()
