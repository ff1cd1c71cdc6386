"""A training script that never calls ``close()`` still reports every sample it got.

Why: the README's loop ends without ``loader.close()``, and the reporter posted only from a daemon
thread every 2 s, with ``close()`` the only flush: a short run's last deliveries (a whole short
epoch) never reached ``epochfs_client_samples_total``, which the dashboard's client panels and
``EpochfsTrainersWaitingForData`` read. Now an epoch's end posts at once and the interpreter's exit
posts what is left, within a bound, from the reporting process only (never a fork's copy). Real
processes throughout: a folder-view sidecar, trainer scripts run by the interpreter, an HTTP server.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from sidecar_helpers import file_remote, running_sidecar
from torchclient_helpers import Collector

from epochfs.torchclient import EpochLoader
from epochfs.torchclient.plainfolder import publish_epoch

README_STYLE = """
import sys
from epochfs.torchclient import EpochLoader
loader = EpochLoader(sys.argv[1], batch_size=4, num_workers=2, decode="bytes", progress=None)
delivered = sum(len(batch) for batch in loader.epoch(0))
print(delivered, flush=True)
"""
"""The README's loop over one epoch, with forked worker processes and no ``close()``."""

FORKS_THEN_EXITS = """
import os, sys
from epochfs.torchclient.report import ClientReporter
reporter = ClientReporter(url=sys.argv[1], interval=3600)
reporter.add(samples=5, nbytes=50, wait_seconds=0.5)
child = os.fork()
if child == 0:
    sys.exit(0)  # a normal exit: the child runs the atexit handlers it inherited
os.waitpid(child, 0)
"""

SILENT_SIDECAR = """
import sys, time
from epochfs.torchclient.report import ClientReporter
reporter = ClientReporter(url=sys.argv[1], interval=3600)
reporter.add(samples=1, nbytes=1, wait_seconds=0.0)
print(time.time(), flush=True)
"""


def run_script(source: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``source`` run by this interpreter in a process of its own, checked."""
    done = subprocess.run([sys.executable, "-c", source, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-5000:]
    return done


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.close()


@pytest.fixture(autouse=True)
def no_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reports go where the mount's status.json (or a test) says, not to an inherited variable."""
    monkeypatch.delenv("EPOCHFS_REPORT_URL", raising=False)


def test_a_script_without_close_reports_every_sample_to_the_sidecar(tmp_path: Path) -> None:
    with running_sidecar(tmp_path, remote=file_remote(tmp_path, count=48, size=256), endpoint="",
                         mount=tmp_path / "view", extra=("--view", "folder", "--kube-reporting", "0")) as car:
        assert car.metric("epochfs_client_samples_total") == 0
        delivered = int(run_script(README_STYLE, str(car.mount)).stdout.split()[-1])
        assert delivered > 0
        # The trainer has exited: what it reported is all there will be, checked at once.
        assert car.metric("epochfs_client_samples_total") == delivered


def test_an_epoch_end_posts_its_deliveries_at_once(tmp_path: Path, collector: Collector,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPOCHFS_REPORT_URL", collector.url)
    root, objects = tmp_path / "mnt", tmp_path / "objects"
    objects.mkdir()
    for i in range(7):
        (objects / f"{i}.bin").write_bytes(bytes([i]) * 10)
    publish_epoch(root, 0, {f"train/{i}.bin": objects / f"{i}.bin" for i in range(7)})
    loader = EpochLoader(root, batch_size=2, num_workers=0, decode="bytes", progress=None)
    try:
        loader.reporter.interval = 3600.0  # no periodic post: only the epoch's end can post in time
        assert sum(len(batch) for batch in loader.epoch(0)) == 7
        wait_until(lambda: collector.total("samples") == 7, timeout=10, what="the epoch's deliveries posted")
    finally:
        loader.close()
    assert collector.total("samples") == 7  # close() posts nothing twice


def test_a_fork_never_reports_its_parents_counts(collector: Collector) -> None:
    run_script(FORKS_THEN_EXITS, collector.url)
    assert collector.bodies == [{"samples": 5, "bytes": 50, "wait_seconds": 0.5}]


def test_a_sidecar_that_does_not_answer_holds_the_exit_briefly() -> None:
    with socket.socket() as silent:  # takes connections (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1/client-report"
        proc = subprocess.Popen([sys.executable, "-c", SILENT_SIDECAR, url], stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout is not None
        last_line = float(proc.stdout.readline())
        assert proc.wait(timeout=60) == 0
        took = time.time() - last_line
    assert took < 2.5, f"the exit took {took:.1f}s"  # the reporters' share: report.EXIT_SECONDS
