"""Issue 21, the way to epoch 0: a plain ``epochfs status`` and ``/readyz``'s reason say how long
until epoch 0 ("epoch 0: 54/200 samples cached (27%), ~20 s at 2.7 samples/s (2.1 MiB/s)"), not
only how far it is. Before the change only ``status --watch`` (two readings) gave an estimate.

A real sampler fetches from a folder at a limited rate (``--max-rate``) toward a ``--min-samples``
it cannot reach soon, so that the estimate is read while fetches go on.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from sidecar_helpers import running_sidecar

from epochfs.sidecar.status_estimate import FetchRate, estimate
from epochfs.sidecar.store import INDEX_NAME, Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
OBJECTS = 2000
MIN_SAMPLES = OBJECTS
LIMITS = ("--min-samples", str(MIN_SAMPLES), "--max-rate", "16Ki")
"""About 16 samples of 1 KiB a second: fetching all 2,000 takes ~125 s, well past each test's wait
of at most 60 s with the start-up in it (with 400, fetching ended after ~25 s, and on a loaded
machine could end before the estimate was read: no fetches in the last seconds, no estimate), and
epoch 0 comes only with the last of them. More objects, not a lower rate: the first fetches come
as soon as before. Not more samples than objects: that epoch 0 would never come, which the
status says instead of an estimate (tests/store/test_first_epoch_unreachable.py)."""
ESTIMATE = re.compile(r", ~\d+ s at \d+\.\d samples/s \(\d+(\.\d)? (B|KiB|MiB)/s\)")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    for i in range(OBJECTS):
        (root / f"{i:04d}.bin").write_bytes(os.urandom(1024))
    return root


def _fetched(cache: Path) -> int:
    if not (cache / INDEX_NAME).exists():
        return 0
    with Store(cache) as store:
        return store.stats().fetched_total


@pytest.fixture
def sampling(folder: Path, tmp_path: Path) -> Iterator[Path]:
    """An ``epochfs sample`` fetching ``folder`` at the limited rate; yields its cache once a few
    samples are in."""
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    proc = subprocess.Popen([EPOCHFS, "sample", "--cache", str(cache), "--remote", folder.as_uri(), *LIMITS],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _fetched(cache) >= 5 or proc.poll() is not None, timeout=60,
                   what="the sampler's first fetches")
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        yield cache
        assert proc.poll() is None, "the sampler ended while the test read its status"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]


def test_plain_status_says_when_epoch_0_comes(sampling: Path) -> None:
    r = subprocess.run([EPOCHFS, "status", "--cache", str(sampling)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    line = next((ln for ln in r.stdout.splitlines() if "no epoch cut yet" in ln), "")
    m = re.search(rf"epoch 0: (\d+)/{MIN_SAMPLES} samples cached \(\d+%\)(?P<eta>.*)\)$", line)
    assert m is not None, r.stdout
    assert ESTIMATE.fullmatch(m["eta"]), line


@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE")
def test_readyz_says_when_epoch_0_comes(folder: Path, tmp_path: Path) -> None:
    with running_sidecar(tmp_path, remote=folder.as_uri(), endpoint="", expect_ready=False,
                         extra=LIMITS) as car:
        def reason() -> str | None:
            code, body = car.get("/readyz")
            why = str(json.loads(body).get("reason", "")) if code == 503 and body else ""
            return why if re.fullmatch(rf"epoch 0: \d+/{MIN_SAMPLES} samples cached" + ESTIMATE.pattern,
                                       why) else None

        wait_until(reason, timeout=60, interval=0.3, what="/readyz's reason with epoch 0's estimate")


def test_the_estimate_is_the_time_left_at_the_rate() -> None:
    assert estimate(54, 200, 2.0, 2048.0) == ", ~73 s at 2.0 samples/s (2.0 KiB/s)"
    assert estimate(54, 200, None, None) == ""  # one reading: no rate
    assert estimate(54, 200, 0.0, 0.0) == ""  # nothing fetched lately: no time can be said
    assert estimate(200, 200, 5.0, 5.0) == ""


def test_the_fetch_rate_spans_its_window_and_starts_over_on_a_reset() -> None:
    rate = FetchRate()
    assert rate.record(0.0, 0, 0) is None
    assert rate.record(0.5, 5, 500) is None  # closer than MIN_SPAN
    assert rate.record(2.0, 20, 2000) == (10.0, 1000.0)
    # Probes 10 s apart (a kubelet's default) still give a rate; older readings drop out.
    assert rate.record(12.0, 40, 4000) == (2.0, 200.0)  # since the reading at 2.0 s
    assert rate.record(22.0, 40, 4000) == (0.0, 0.0)  # since 12.0 s: nothing fetched
    assert rate.record(23.0, 3, 300) is None  # a wiped cache's counters: start over
    assert rate.record(25.0, 13, 1300) == (5.0, 500.0)


def test_a_reading_older_than_the_newest_keeps_the_rate() -> None:
    """Two /readyz answers at once read the counters before taking the lock, so one may come in
    after a newer one: it is left out instead of clearing the history (the estimate went missing
    from the next second's answers)."""
    rate = FetchRate()
    rate.record(0.0, 0, 0)
    assert rate.record(4.0, 40, 4000) == (10.0, 1000.0)
    assert rate.record(3.0, 30, 3000) == (10.0, 1000.0), "left out, the rate kept"
    assert rate.record(6.0, 60, 6000) == (10.0, 1000.0), "the history kept"
