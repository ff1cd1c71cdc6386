"""The torch client's reports to the sidecar: counted right, posted from a thread, never in the way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from common import free_port, wait_until
from torchclient_helpers import Collector

from epochfs.torchclient import EpochLoader
from epochfs.torchclient.plainfolder import publish_epoch
from epochfs.torchclient.report import ClientReporter, report_url_from_env


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.server.shutdown()
    c.server.server_close()


def make_epoch(root: Path, count: int, size: int) -> None:
    objects = root.parent / "objects"
    objects.mkdir()
    files = {}
    for i in range(count):
        (objects / f"{i}.bin").write_bytes(bytes([i % 256]) * size)
        files[f"train/{i:03d}.bin"] = objects / f"{i}.bin"
    publish_epoch(root, 0, files)


def test_loader_reports_what_it_delivered(tmp_path: Path, collector: Collector,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPOCHFS_REPORT_URL", collector.url)
    root = tmp_path / "mnt"
    make_epoch(root, 10, 1000)
    loader = EpochLoader(root, batch_size=3, num_workers=0, decode="bytes", progress=None)
    batches = sum(1 for _ in loader.epoch(0))
    loader.close()  # posts what is left
    assert batches == 4
    assert collector.total("samples") == 10
    assert collector.total("bytes") == 10_000
    assert collector.total("wait_seconds") > 0
    assert loader.reporter.failed_reports == 0


def test_a_missing_sidecar_never_breaks_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPOCHFS_REPORT_URL", f"http://127.0.0.1:{free_port()}/v1/client-report")
    root = tmp_path / "mnt"
    make_epoch(root, 5, 100)
    loader = EpochLoader(root, batch_size=2, num_workers=0, decode="bytes", progress=None)
    assert sum(len(b) for b in loader.epoch(0)) == 5
    loader.close()
    assert loader.reporter.failed_reports >= 1 and loader.reporter.sent_reports == 0


def test_reporter_keeps_increments_until_a_post_succeeds(collector: Collector) -> None:
    dead = ClientReporter(url=f"http://127.0.0.1:{free_port()}/v1/client-report", interval=60)
    dead.add(samples=2, nbytes=20, wait_seconds=0.5)
    assert dead.flush() is False
    dead.url = collector.url  # the sidecar came up
    dead.add(samples=1, nbytes=10, wait_seconds=0.25)
    assert dead.flush() is True
    assert collector.bodies == [{"samples": 3, "bytes": 30, "wait_seconds": 0.75}]
    dead.close()


def test_report_thread_posts_periodically(collector: Collector) -> None:
    reporter = ClientReporter(url=collector.url, interval=0.05)
    reporter.add(samples=4, nbytes=40, wait_seconds=0.0)
    wait_until(lambda: collector.bodies, what="a periodic report")
    reporter.close()
    assert collector.total("samples") == 4


def test_a_closed_loader_reports_again_when_it_goes_on(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A loader closed on a dead worker goes on training: its next epoch must be reported (and named,
    the folder view's only sign of a reader), not silently dropped by a reporter left stopped."""
    watch = Collector()
    monkeypatch.setenv("EPOCHFS_REPORT_URL", watch.url)
    root = tmp_path / "mnt"
    make_epoch(root, 6, 10)
    publish_epoch(root, 1, {f"train/{i:03d}.bin": root.parent / "objects" / f"{i}.bin" for i in range(6)})
    loader = EpochLoader(root, batch_size=2, num_workers=0, decode="bytes", progress=None)
    loader.reporter.interval = 0.05
    try:
        for epoch in (0, 1):
            batches = iter(loader.epoch(epoch))
            next(batches)  # a pause mid-epoch: the reports must name the epoch meanwhile
            assert watch.wait_named(epoch, timeout=10), f"no report named epoch {epoch}"
            assert sum(1 for _ in batches) == 2
            loader.close()  # what a dead worker does; the loader goes on with the next epoch
    finally:
        loader.close()
        watch.close()
    assert loader.reporter.failed_reports == 0


@pytest.mark.parametrize("value,expected", [
    ("off", None), ("", None), ("http://127.0.0.1:9/v1/client-report", "http://127.0.0.1:9/v1/client-report"),
])
def test_report_url_from_env(monkeypatch: pytest.MonkeyPatch, value: str, expected: str | None) -> None:
    monkeypatch.setenv("EPOCHFS_REPORT_URL", value)
    assert report_url_from_env() == expected


def test_a_bad_report_url_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPOCHFS_REPORT_URL", "ftp://x")
    with pytest.raises(ValueError, match="EPOCHFS_REPORT_URL"):
        report_url_from_env()
