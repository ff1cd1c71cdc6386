"""A trainer without ``EPOCHFS_REPORT_URL`` beside a sidecar on another ``--health-port`` than 8080:
its reports and cut requests reach the sidecar, found through the mount's status.json.

Why: the client knew the sidecar only from the variable (the Helm chart sets it), else port 8080;
a sidecar run by hand or by another chart with another port got nothing, and on the folder view no
epoch was ever cut. The sidecar now records its report URL in the index at its start and the
views render it into status.json (``report_url``). Real sidecars (the CLI in a subprocess) over a
file:// remote, each on a port of the tests' own (never 8080); the client reads the real mount or
published folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from common import wait_until
from sidecar_helpers import Sidecar, file_remote, running_sidecar

from epochfs.torchclient import layout
from epochfs.torchclient.cutask import URL_FROM_STATUS, CutAsker
from epochfs.torchclient.report import ClientReporter, report_url_from_env

needs_fuse = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                reason="needs root and FUSE")


@pytest.fixture(autouse=True)
def no_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EPOCHFS_REPORT_URL", raising=False)




def reported(car: Sidecar) -> float:
    return car.metric("epochfs_client_samples_total") or 0.0


def report_through(reporter: ClientReporter, car: Sidecar, samples: int, *, before: float = 0.0) -> None:
    """Count ``samples`` and post them; the sidecar must export them."""
    reporter.add(samples=samples, nbytes=samples * 512, wait_seconds=0.01)
    assert reporter.flush(), f"the report to {reporter.url} failed; the sidecar is on port {car.port}"
    wait_until(lambda: reported(car) == before + samples, timeout=10, what="the report in /metrics")


@pytest.mark.fuse
@needs_fuse
def test_reports_reach_a_sidecar_on_another_port_through_the_mount(tmp_path: Path) -> None:
    source = file_remote(tmp_path)
    with running_sidecar(tmp_path, remote=source, endpoint="", extra=("--kube-reporting", "0")) as car:
        assert car.port != 8080
        expected = f"http://127.0.0.1:{car.port}/v1/client-report"
        status = layout.read_status(car.mount)
        assert status is not None and status.get(layout.REPORT_URL_KEY) == expected, status
        reporter = ClientReporter(url=report_url_from_env(), root=car.mount, interval=3600)
        report_through(reporter, car, 5)
        assert reporter.url == expected and reporter.failed_reports == 0
    # The sidecar restarts on another port (same cache, same mount): the reporter's cached URL
    # fails once and the mount's new status.json sends the next report to the new sidecar.
    with running_sidecar(tmp_path, remote=source, endpoint="", extra=("--kube-reporting", "0")) as again:
        assert again.port != car.port
        before = reported(again)  # the totals carried over in the index
        report_through(reporter, again, 7, before=before)
        assert reporter.url == f"http://127.0.0.1:{again.port}/v1/client-report"
        reporter.close()


def test_cut_requests_reach_a_folder_view_sidecar_on_another_port(tmp_path: Path) -> None:
    """On the folder view nothing sees a lookup: only the client's request cuts epoch 0."""
    with running_sidecar(tmp_path, remote=file_remote(tmp_path), endpoint="", mount=tmp_path / "view",
                         extra=("--view", "folder", "--kube-reporting", "0")) as car:
        assert car.port != 8080
        asker = CutAsker.for_mount(car.mount)
        assert asker is not None
        answer = asker.ask(0)
        assert answer is not None, asker.trouble()
        assert (asker.source, asker.base_url) == (URL_FROM_STATUS, car.base)
        wait_until(lambda: layout.epoch_exists(car.mount, 0), timeout=30, what="epoch 0 published")
        reporter = ClientReporter(url=report_url_from_env(), root=car.mount, interval=3600)
        report_through(reporter, car, 3)
        reporter.close()
