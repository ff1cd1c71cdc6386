"""The served-opens counter reads a reader's opens in batches, not one wake-up per open.

A trainer decoding images opens a sample every millisecond or so. The counter (fanotify, in the
supervisor) used to wake up, read and count each open on its own: about 50 us of the supervisor's
CPU per open, taken from the decoding workers on a small node (the images benchmark, issue 22).
It now lets the events of a moment queue in the kernel and reads them all at once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from common import wait_until

from epochfs.sidecar.served import GATHER_SECONDS, OpenCounter


@pytest.mark.skipif(os.geteuid() != 0, reason="fanotify needs CAP_SYS_ADMIN")
def test_opens_spread_over_a_moment_are_counted_in_one_batch(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    (objects / "ab").mkdir(parents=True)
    files = [objects / "ab" / f"ab{i:030d}" for i in range(40)]
    for i, path in enumerate(files):
        path.write_bytes(b"x" * (100 + i))
    calls: list[int] = []
    counter = OpenCounter(objects_dir=objects, on_open=lambda samples, _nbytes: calls.append(samples),
                          precreate=False, gather_seconds=2.0)
    assert counter.start()
    try:
        # A reader's pace, one open every 5 ms (the shape of the load, not a synchronization):
        # without gathering each open is its own wake-up and its own batch.
        started = time.monotonic()
        for path in files:
            path.read_bytes()
            time.sleep(0.005)
        took = time.monotonic() - started
        wait_until(lambda: sum(calls) >= len(files), timeout=20, what="every open counted")
        assert sum(calls) == len(files)
        # One batch per gather the opens spanned (however slow a loaded machine made them), not one
        # an open: 40 without gathering.
        assert len(calls) <= int(took / 2.0) + 2, f"{len(calls)} batches, {len(files)} opens, {took:.1f} s"
    finally:
        counter.stop()


def test_the_counts_lag_by_a_small_fraction_of_a_second() -> None:
    # What the metrics may lag behind the opens: well below a Prometheus scrape interval.
    assert 0 < GATHER_SECONDS <= 0.1
