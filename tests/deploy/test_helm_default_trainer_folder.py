"""The chart's default trainer command (a smoke test) against a real folder-view sidecar.

Why: on the folder view a lookup of ``epoch-0`` cuts nothing (epochs are cut when the torch client
asks, every cutInterval, or by ``epochfs cut``), so a default that only lists ``epoch-0/`` failed
at once with FileNotFoundError, and a default install with ``sidecar.view=folder`` never worked.
The command the chart (and the example parent chart) renders must ask for the cut as the torch
client does. Rendered by the real helm binary, run against a real ``epochfs sidecar --view
folder`` on a ``file://`` remote, with the trainer environment the chart renders (the sidecar's
port and the view's path moved to the test's own).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from folderview_helpers import folder_sidecar, owned_dir, write_remote
from helm_helpers import container, env_of, pod_spec, render, render_example, with_remote, workload_of

FOLDER = {"sidecar": {"view": "folder"}}
OBJECTS = {f"train/{i:02d}.npy": bytes([i]) * 64 for i in range(6)}


def trainer_of(helm_bin: Path, tmp: Path, where: str) -> dict[str, Any]:
    """The trainer container of the chart's Job or of the example chart's Pod, folder view."""
    if where == "chart":
        return container(pod_spec(render(helm_bin, with_remote(FOLDER), tmp)), "trainer")
    return container(workload_of(render_example(helm_bin, "pod", FOLDER, tmp), "Pod")["spec"], "trainer")


@pytest.mark.parametrize("where", ["chart", "example"])
def test_default_trainer_gets_epoch_0_on_the_folder_view(helm_bin: Path, tmp_path: Path, where: str) -> None:
    trainer = trainer_of(helm_bin, tmp_path, where)
    command = trainer["command"]
    assert isinstance(command, list) and command[:2] == ["python", "-c"], command
    env = env_of(trainer)
    with owned_dir() as base:
        remote = base / "remote"
        write_remote(remote, OBJECTS)
        with folder_sidecar(base, remote) as car:
            assert not (car.mount / "epoch-0").exists()  # nothing cut yet: the command must ask
            report = urlsplit(str(env["EPOCHFS_REPORT_URL"]))
            report = report._replace(netloc=f"127.0.0.1:{car.port}")
            run_env = {**os.environ, "HOME": str(base), "EPOCHFS_MOUNT": str(car.mount),
                       "EPOCHFS_REPORT_URL": urlunsplit(report)}
            proc = subprocess.run([sys.executable, "-c", str(command[2])], capture_output=True, text=True,
                                  timeout=120, env=run_env)
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.startswith(f"{car.mount} "), proc.stdout
            assert "'epoch-0'" in proc.stdout and "['train']" in proc.stdout, proc.stdout


@pytest.mark.parametrize("where", ["chart", "example"])
def test_default_trainer_says_why_when_the_sidecar_cannot_be_reached(helm_bin: Path, tmp_path: Path,
                                                                     where: str) -> None:
    """No sidecar behind EPOCHFS_REPORT_URL and no epoch-0: the command ends with a line that says
    so (not a FileNotFoundError traceback after its wait). Its 10-minute limit is cut to 2 s here
    (the only change to the rendered text): a limit of wall time, whatever each try takes."""
    command = str(trainer_of(helm_bin, tmp_path, where)["command"][2])
    assert command.count("+ 600") == 1, command
    view = tmp_path / "view"
    view.mkdir()
    run_env = {**os.environ, "EPOCHFS_MOUNT": str(view),
               "EPOCHFS_REPORT_URL": "http://127.0.0.1:1/v1/client-report"}
    proc = subprocess.run([sys.executable, "-c", command.replace("+ 600", "+ 2")], capture_output=True,
                          text=True, timeout=60, env=run_env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "no " in proc.stderr and "epoch-0 after 10 minutes" in proc.stderr, proc.stderr
    assert "the sidecar could not be reached" in proc.stderr, proc.stderr
