"""Where the torch client reports and asks for cuts: ``EPOCHFS_REPORT_URL``, else the ``report_url``
the mount's status.json names, else port 8080.

Why: a sidecar on another ``--health-port`` than 8080 beside a trainer without the variable got
no reports and no cut requests (on the folder view nothing else cuts an epoch). The sidecar now
records its URL in status.json; these check the client's order, its cache of the file (not read
per sample), and that a URL changed since (a sidecar restarted on another port) is taken at the next
report. Real HTTP servers (:class:`Collector`) and a folder shaped like the mount, its status.json
written with the layout's own formatter.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from common import free_port
from torchclient_helpers import Collector

from epochfs.torchclient import layout
from epochfs.torchclient.cutask import (
    REMEDY,
    URL_DEFAULT,
    URL_FROM_ENV,
    URL_FROM_STATUS,
    CutAsker,
    url_source,
)
from epochfs.torchclient.report import DEFAULT_URL, ClientReporter, report_url, report_url_from_env


@pytest.fixture
def collectors() -> Iterator[list[Collector]]:
    made: list[Collector] = []
    yield made
    for c in made:
        c.server.shutdown()
        c.server.server_close()


@pytest.fixture(autouse=True)
def no_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The case under test: a trainer without EPOCHFS_REPORT_URL (a test sets it where it needs it)."""
    monkeypatch.delenv("EPOCHFS_REPORT_URL", raising=False)


def write_status(root: Path, url: object | None) -> None:
    """``root/.epochfs/status.json`` as a sidecar renders it, naming ``url`` (None: an older
    sidecar's document, without the field)."""
    doc: dict[str, Any] = {"latest_epoch": None, "epochs": []}
    if url is not None:
        doc[layout.REPORT_URL_KEY] = url
    layout.control_dir(root).mkdir(parents=True, exist_ok=True)
    layout.status_path(root).write_text(layout.format_status(doc))


def dead_url() -> str:
    """A report URL on a loopback port nothing listens on."""
    return f"http://127.0.0.1:{free_port()}/v1/client-report"


# ---------------------------------------------------------------------------------- the order
def test_the_variable_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_status(tmp_path, "http://127.0.0.1:9/v1/client-report")
    monkeypatch.setenv("EPOCHFS_REPORT_URL", "http://10.1.2.3:7000/v1/client-report")
    assert report_url(tmp_path) == "http://10.1.2.3:7000/v1/client-report"
    assert url_source(tmp_path) == URL_FROM_ENV
    monkeypatch.setenv("EPOCHFS_REPORT_URL", "off")  # off is off, whatever status.json says
    assert report_url(tmp_path) is None
    assert CutAsker.for_mount(tmp_path) is None
    assert ClientReporter(url=report_url_from_env(), root=tmp_path).url is None
    monkeypatch.setenv("EPOCHFS_REPORT_URL", "127.0.0.1:8080")  # malformed: still an error, not skipped
    with pytest.raises(ValueError, match="EPOCHFS_REPORT_URL must be an http"):
        CutAsker.for_mount(tmp_path)


def test_status_json_comes_next(tmp_path: Path) -> None:
    write_status(tmp_path, "http://127.0.0.1:9123/v1/client-report")
    assert report_url(tmp_path) == "http://127.0.0.1:9123/v1/client-report"
    assert url_source(tmp_path) == URL_FROM_STATUS


@pytest.mark.parametrize("named", [None, "", "127.0.0.1:9123", "ftp://127.0.0.1/x", 9123, ["http://x"]])
def test_the_default_without_a_usable_url(tmp_path: Path, named: object) -> None:
    """An older sidecar's status.json (no field), or a value that is no http(s) URL: the default."""
    write_status(tmp_path, named)
    assert report_url(tmp_path) == DEFAULT_URL
    assert url_source(tmp_path) == URL_DEFAULT


def test_the_default_without_status_json(tmp_path: Path) -> None:
    assert report_url(tmp_path) == DEFAULT_URL  # a plain folder
    assert report_url(tmp_path / "not-there") == DEFAULT_URL
    layout.control_dir(tmp_path).mkdir()
    layout.status_path(tmp_path).write_text("not json")
    assert report_url(tmp_path) == DEFAULT_URL
    assert report_url(None) == DEFAULT_URL  # no mount given: the variable's order as before


# ---------------------------------------------------------------------------------- reports
def test_reports_go_where_status_json_says(tmp_path: Path, collectors: list[Collector]) -> None:
    sidecar = Collector()
    collectors.append(sidecar)
    write_status(tmp_path, sidecar.url)
    reporter = ClientReporter(url=report_url_from_env(), root=tmp_path, interval=3600)
    reporter.add(samples=3, nbytes=300, wait_seconds=0.0)
    assert reporter.flush(), reporter.failed_reports
    assert sidecar.total("samples") == 3
    assert reporter.url == sidecar.url


def test_status_json_is_read_once_not_per_report(tmp_path: Path, collectors: list[Collector]) -> None:
    """While reports succeed, status.json is not read again: a URL it names later waits for a
    failed report."""
    first, second = Collector(), Collector()
    collectors.extend([first, second])
    write_status(tmp_path, first.url)
    reporter = ClientReporter(url=report_url_from_env(), root=tmp_path, interval=3600)
    reporter.add(samples=1, nbytes=10, wait_seconds=0.0)
    assert reporter.flush()
    write_status(tmp_path, second.url)
    for _ in range(5):
        reporter.add(samples=1, nbytes=10, wait_seconds=0.0)
        assert reporter.flush()
    assert (first.total("samples"), second.total("samples")) == (6, 0)


def test_a_sidecar_restarted_on_another_port_is_found_at_the_next_report(
        tmp_path: Path, collectors: list[Collector]) -> None:
    old, new = Collector(), Collector()
    collectors.extend([old, new])
    write_status(tmp_path, old.url)
    reporter = ClientReporter(url=report_url_from_env(), root=tmp_path, interval=3600)
    reporter.add(samples=2, nbytes=20, wait_seconds=0.0)
    assert reporter.flush()
    old.server.shutdown()
    old.server.server_close()
    collectors.remove(old)
    write_status(tmp_path, new.url)  # the new sidecar renders its own URL
    reporter.add(samples=5, nbytes=50, wait_seconds=0.0)
    assert reporter.flush()  # the failed post read status.json again and went to the new one
    assert new.total("samples") == 5
    assert reporter.url == new.url


def test_a_failed_report_reads_status_json_again(tmp_path: Path, collectors: list[Collector]) -> None:
    """No status.json at the first report (the mount not up yet): the default, which fails; the
    next report reads the file again."""
    reporter = ClientReporter(url=dead_url(), root=tmp_path, interval=3600)  # the default stands in
    reporter.add(samples=4, nbytes=40, wait_seconds=0.0)
    assert not reporter.flush()
    sidecar = Collector()
    collectors.append(sidecar)
    write_status(tmp_path, sidecar.url)
    assert reporter.flush()  # what the failed report kept goes now
    assert sidecar.total("samples") == 4


def test_the_variable_is_not_overridden_by_status_json(tmp_path: Path, collectors: list[Collector],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    named, chosen = Collector(), Collector()
    collectors.extend([named, chosen])
    write_status(tmp_path, named.url)
    monkeypatch.setenv("EPOCHFS_REPORT_URL", chosen.url)
    reporter = ClientReporter(url=report_url_from_env(), root=tmp_path, interval=3600)
    reporter.add(samples=1, nbytes=1, wait_seconds=0.0)
    assert reporter.flush()
    assert (named.total("samples"), chosen.total("samples")) == (0, 1)


# ---------------------------------------------------------------------------------- cut requests
class _CutEndpoint(BaseHTTPRequestHandler):
    """A sidecar's /v1/cut, answering 202 "waiting" (its words for a queued cut)."""

    def do_POST(self) -> None:
        body = json.dumps({"state": "waiting", "message": "queued"}).encode()
        self.send_response(202)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads the client's answer."""


@pytest.fixture
def cut_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CutEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_cut_requests_go_where_status_json_says(tmp_path: Path, cut_server: str) -> None:
    write_status(tmp_path, f"{cut_server}/v1/client-report")
    asker = CutAsker.for_mount(tmp_path)
    assert asker is not None
    answer = asker.ask(0)
    assert answer is not None and answer.state == "waiting", asker.trouble()
    assert (asker.base_url, asker.source) == (cut_server, URL_FROM_STATUS)


def test_a_cut_asker_follows_a_changed_url_and_says_where_it_came_from(
        tmp_path: Path, cut_server: str) -> None:
    dead = dead_url()
    write_status(tmp_path, dead)
    asker = CutAsker.for_mount(tmp_path)
    assert asker is not None and asker.ask(0) is None
    assert dead.removesuffix("/v1/client-report") + "/v1/cut" in asker.trouble()
    assert REMEDY[URL_FROM_STATUS] in asker.trouble()  # names status.json, and the variable to override
    write_status(tmp_path, f"{cut_server}/v1/client-report")  # restarted on another port
    answer = asker.ask(0)
    assert answer is not None and answer.state == "waiting"
    assert asker.trouble() == ""
    write_status(tmp_path, None)  # an older sidecar took over: the default, after the next failure
    assert asker.ask(0) is not None  # cached: the working URL is kept while it answers
