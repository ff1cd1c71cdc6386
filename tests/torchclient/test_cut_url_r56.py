"""A wait whose cut requests get no answer says where they went, why they failed and what to set.

Why: the client finds the sidecar only through ``EPOCHFS_REPORT_URL`` (default
``http://127.0.0.1:8080``). A sidecar started with another ``--health-port`` never heard the cut
requests; on the folder view nothing else cuts an epoch, so a trainer waited out its whole timeout
while its waiting line said epoch 0 was 100 % cached. Real parts, in-process: a store and its
folder view published in a thread; the cut URL is a closed loopback port, or a real HTTP server
that is not the sidecar.
"""

from __future__ import annotations

import http.server
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, open_store

from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.store import Store
from epochfs.torchclient import EpochDataset, wait_for_epoch


@pytest.fixture
def view(tmp_path: Path) -> Iterator[Path]:
    """A folder view whose sidecar endpoints are nowhere the client looks: epoch 0 is never cut."""
    store: Store = open_store(tmp_path / "cache", min_samples=3, keep_epochs=2, in_use_seconds=300)
    admit(store, make_objects(6, 100))
    folder = tmp_path / "shared" / "view"
    folder.parent.mkdir()
    publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir, grace=False)
    publisher.recover()
    publisher.step()
    try:
        yield folder
    finally:
        store.close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_timeout_names_the_url_the_reason_and_the_variable(
        view: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("EPOCHFS_REPORT_URL", f"{url}/v1/client-report")
    lines: list[str] = []
    caplog.set_level(logging.WARNING, logger="epochfs.torchclient")
    with pytest.raises(TimeoutError) as caught:
        wait_for_epoch(view, 0, timeout=3, progress=lines.append, progress_every=0.5)  # several asks
    said = str(caught.value)
    expected = f"cut requests to {url}/v1/cut fail (connection refused): check EPOCHFS_REPORT_URL"
    assert expected in said, said
    assert lines and all(expected in line for line in lines), lines
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and expected in warnings[0], warnings  # once, not once a second
    with pytest.raises(TimeoutError) as again:
        EpochDataset(view, 0, timeout=1, progress=None)
    assert expected in str(again.value), again.value
    with pytest.raises(FileNotFoundError) as at_once:
        wait_for_epoch(view, 0, wait=False, progress=None)
    assert expected in str(at_once.value), at_once.value
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_unset_variable_says_the_default_was_tried(view: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 8080)) == 0:
            pytest.skip("something listens on 127.0.0.1:8080 here: the default URL is not refused")
    monkeypatch.delenv("EPOCHFS_REPORT_URL", raising=False)
    with pytest.raises(TimeoutError) as caught:
        wait_for_epoch(view, 0, timeout=1, progress=None)
    said = str(caught.value)
    assert "cut requests to http://127.0.0.1:8080/v1/cut fail (connection refused)" in said, said
    assert "EPOCHFS_REPORT_URL is unset" in said and "--health-port" in said, said


class _NotTheSidecar(http.server.BaseHTTPRequestHandler):
    """Another server on the port: a 404 page, as any web server answers an unknown path."""

    def do_POST(self) -> None:
        self.send_error(404)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads the client's words, not the server's log."""


def test_another_server_on_the_port_is_named_too(view: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotTheSidecar)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(TimeoutError) as caught:
            wait_for_epoch(view, 0, timeout=1, progress=None, sidecar_url=url)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    said = str(caught.value)
    assert f"cut requests to {url}/v1/cut fail (HTTP 404 without an epochfs cut answer)" in said, said
    assert "check the sidecar_url passed" in said, said
