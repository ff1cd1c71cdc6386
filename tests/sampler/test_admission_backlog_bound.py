"""Verified downloads waiting for admission are bounded: while the admitter's backlog is full the
loop starts no download, the progress line counts the waiting ones, and the stop says it admits
them. Tiny objects download faster than batches commit, and without the bound 23,000 verified
downloads sat in ``tmp/`` while the log said "24 in flight", in no epoch and no count."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from common import wait_until
from inprocess import objects_of, sampling, settings_for

from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.sampler import admitter, shutdown
from epochfs.sidecar.sampler.progress import Rates
from epochfs.sidecar.store import Admission, Policy, Store

BOUND = 8
CONCURRENCY = 4


class _Lines(logging.Handler):
    """The sampler's log lines; opens ``gate`` at the stop's line about the samples it admits."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if "before stopping" in record.getMessage():
            self.gate.set()


def test_a_slow_admission_holds_the_downloads_back_and_the_stop_admits_the_backlog(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(admitter, "ADMIT_BACKLOG", BOUND)
    monkeypatch.setattr(shutdown, "ADMITTING_SAID_AT", BOUND)
    gate = threading.Event()
    admit = Reservations.admit

    def held(self: Reservations, items: list[Admission]) -> None:
        assert gate.wait(60), "the admission was never let through"
        admit(self, items)

    monkeypatch.setattr(Reservations, "admit", held)  # a commit slower than the downloads
    caplog.set_level(logging.INFO, logger="epochfs.sampler")
    lines = _Lines(gate)
    logging.getLogger("epochfs.sampler").addHandler(lines)
    cache = tmp_path / "cache"
    remote = MemoryRemote(objects_of(120, size=16))
    try:
        with sampling(cache, remote, settings_for(cache, "--concurrency", str(CONCURRENCY))) as (
                store, sampler):
            wait_until(lambda: sampler.admitter.backlog() >= BOUND and not sampler._inflight, timeout=30,
                       what="the backlog at its bound and nothing in flight")
            opened = sum(remote.opens.values())
            assert opened <= BOUND + CONCURRENCY, f"{opened} downloads started past a backlog of {BOUND}"
            assert len(list((cache / "tmp").iterdir())) <= BOUND + CONCURRENCY
            sampler.stop.set()
            try:
                wait_until(gate.is_set, timeout=20, what="the stop's line about the samples it admits")
            finally:
                gate.set()
    finally:
        logging.getLogger("epochfs.sampler").removeHandler(lines)
    said = [line for line in lines.lines if "before stopping" in line]
    assert said == [f"admitting {opened} downloaded sample(s) before stopping"], lines.lines
    with Store(cache) as store:
        assert store.stats().samples == opened, "every verified download admitted at the stop"
    assert list((cache / "tmp").iterdir()) == []


def test_the_backlog_drains_and_every_object_comes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Held back at the bound, the loop starts downloads again as batches commit: all arrive."""
    monkeypatch.setattr(admitter, "ADMIT_BACKLOG", BOUND)
    cache = tmp_path / "cache"
    objects = objects_of(300, size=16)
    with sampling(cache, MemoryRemote(objects), settings_for(cache, "--concurrency", str(CONCURRENCY))) as (
            store, sampler):
        wait_until(lambda: store.stats().samples == len(objects), timeout=60, what="every object admitted")
        wait_until(lambda: sampler.admitter.backlog() == 0, what="the backlog empty")


def test_the_progress_line_counts_the_downloads_waiting_for_admission(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=1 << 20))
        stats = store.stats()
    with caplog.at_level(logging.INFO, logger="epochfs.sampler"):
        Rates(started=0.0).log_progress(5.0, state="fetching", inflight=24, retried=0, stats=stats,
                                        window=(32, 32), admitting=1024)
    line = caplog.records[-1].getMessage()
    assert "24 in flight (window 32/32), 1024 downloaded waiting for admission, " in line, line

