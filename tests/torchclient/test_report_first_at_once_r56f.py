"""The first report naming an epoch goes at once, not an ``interval`` later.

Why: on the folder view a new epoch is held by the publisher's grace alone until a report names it
(``--in-use-seconds`` from its showing); a window shorter than the report interval ended before the
first report, and the epoch retired under the reader. One report more per epoch begun; the others
keep their interval. A real HTTP server records the posts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from torchclient_helpers import Collector

from epochfs.torchclient import EpochLoader
from epochfs.torchclient.plainfolder import publish_epoch
from epochfs.torchclient.report import ClientReporter


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.close()


def test_a_new_epoch_is_named_at_once_and_only_once(collector: Collector) -> None:
    reporter = ClientReporter(url=collector.url, interval=3600)  # no periodic post in this test
    try:
        reporter.reading(5)
        assert collector.wait_named(5, timeout=10), "the first report waited for the interval"
        assert len(collector.bodies) == 1 and collector.bodies[0]["samples"] == 0
        reporter.reading(5)  # a second reader of the same epoch: nothing new to name
        reporter.reading(6)
        assert collector.wait_named(6, timeout=10)
        wait_until(lambda: reporter.sent_reports == 2, timeout=10, what="the second post counted")
        assert len(collector.bodies) == 2, collector.bodies
    finally:
        reporter.close()


def test_a_loader_names_its_epoch_before_its_first_interval(tmp_path: Path, collector: Collector,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPOCHFS_REPORT_URL", collector.url)
    root, objects = tmp_path / "mnt", tmp_path / "objects"
    objects.mkdir()
    for i in range(4):
        (objects / f"{i}.bin").write_bytes(bytes([i]) * 10)
    publish_epoch(root, 0, {f"train/{i}.bin": objects / f"{i}.bin" for i in range(4)})
    with EpochLoader(root, batch_size=2, num_workers=0, decode="bytes", progress=None) as loader:
        loader.reporter.interval = 3600.0  # only the post for the new epoch can name it in time
        batches = iter(loader.epoch(0))
        next(batches)
        assert collector.wait_named(0, timeout=10), "epoch 0 was not named before the interval"
        assert sum(1 for _ in batches) == 1
