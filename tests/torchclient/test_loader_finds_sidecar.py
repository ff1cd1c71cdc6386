"""The loaders and the wait without ``EPOCHFS_REPORT_URL``, beside a sidecar on another
``--health-port`` than 8080: reports and cut requests reach it through the mount's status.json.

Why: the client found the sidecar only through the variable (the Helm chart sets it), else port
8080: a sidecar on another port got no reports, and on the folder view no epoch was ever cut. Real
sidecars (the CLI in a subprocess) over a file:// remote, on ports of the tests' own.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from common import wait_until
from sidecar_helpers import file_remote, running_sidecar

from epochfs.torchclient import EpochLoader, wait_for_epoch


@pytest.fixture(autouse=True)
def no_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EPOCHFS_REPORT_URL", raising=False)




@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE")
def test_epoch_loader_reports_to_a_sidecar_on_another_port(tmp_path: Path) -> None:
    source = file_remote(tmp_path)
    with running_sidecar(tmp_path, remote=source, endpoint="", extra=("--kube-reporting", "0")) as car:
        assert car.port != 8080
        loader = EpochLoader(car.mount, batch_size=2, num_workers=0, decode="bytes", progress=None)
        delivered = sum(len(batch) for batch in loader.epoch(0))
        loader.close()  # posts what is left
        assert delivered > 0 and loader.reporter.failed_reports == 0, loader.reporter.url
        wait_until(lambda: car.metric("epochfs_client_samples_total") == delivered, timeout=10,
                   what="the loader's report in /metrics")


def test_the_wait_cuts_on_a_folder_view_sidecar_on_another_port(tmp_path: Path) -> None:
    with running_sidecar(tmp_path, remote=file_remote(tmp_path), endpoint="", mount=tmp_path / "view",
                         extra=("--view", "folder", "--kube-reporting", "0")) as car:
        assert car.port != 8080
        wait_for_epoch(car.mount, 0, timeout=30, progress=None)  # only the cut request cuts it here
