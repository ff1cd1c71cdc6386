"""The sampler's progress line writes its byte rate in the unit that fits (issue 21): a slow
remote fetching 40 KiB a second printed "0.0 MB/s", which reads as nothing coming at all."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from epochfs.sidecar.sampler.progress import Rates
from epochfs.sidecar.store import Policy, Store


@pytest.mark.parametrize(
    ("nbytes", "seconds", "shown"),
    [
        (40 * 1024 * 5, 5.0, "(1/s, 40.0 KiB/s)"),
        (300, 1.0, "(1/s, 300 B/s)"),
        (int(2.5 * 1024 * 1024) * 2, 2.0, "(1/s, 2.5 MiB/s)"),
    ],
)
def test_the_progress_line_gives_the_byte_rate_in_a_unit_that_fits(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, nbytes: int, seconds: float, shown: str
) -> None:
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=1 << 20))
        stats = store.stats()
    rates = Rates(started=0.0, samples=int(seconds), nbytes=nbytes)
    with caplog.at_level(logging.INFO, logger="epochfs.sampler"):
        rates.log_progress(seconds, state="fetching", inflight=0, retried=0, stats=stats)
    line = caplog.records[-1].getMessage()
    assert f"fetched this run {shown}, " in line, line
    assert "MB/s" not in line
