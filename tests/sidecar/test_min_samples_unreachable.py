"""A ``--min-samples`` that can never be met is said (or refused), never waited on in silence, and
no epoch is cut below it: a real ``epochfs sidecar`` over a ``file://`` remote of 40 x 4 KiB.

Before:

* ``--schedule initial=4,growth=2 --min-samples 10``: the sampler fetched the first two windows
  (8 keys) and idled; epoch 0 was never cut, ``/readyz`` said "epoch 0: 8/4 samples cached" and
  ``epochfs status`` that it is cut at the first lookup. Now refused at the start (exit 2).
* ``--capacity 64Ki`` (16 samples; an epoch, 75%, holds 12) with ``--min-samples 14``: epoch 0 was
  cut with 12 samples; with ``--min-samples 17`` the full cache waited for a cut for ever, the log
  saying only "waiting for a cut or an epoch to retire". Now neither is cut, and ``/readyz``,
  ``epochfs status`` and the log say that the epoch budget holds 12.
* The same capacity in schedule mode, ``initial=20`` and ``--min-samples 16``: the budget trims
  epoch 0's window to 12 keys, yet the look-ahead's samples counted towards the minimum and epoch 0
  was cut with 12. Now it is not, and the same three places say why.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from common import free_port, wait_until
from sidecar_helpers import EPOCHFS, Sidecar, running_sidecar, sidecar_argv


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    for i in range(40):
        folder = root / f"c{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:05d}.bin").write_bytes(os.urandom(4096))
    return root


def test_min_samples_above_the_schedules_initial_is_refused_at_the_start(tmp_path: Path,
                                                                          dataset: Path) -> None:
    (tmp_path / "mnt").mkdir()
    argv = sidecar_argv(remote=dataset.as_uri(), endpoint="", cache=tmp_path / "cache",
                        mount=tmp_path / "mnt", port=free_port(),
                        extra=("--capacity", "10Mi", "--schedule", "initial=4,growth=2",
                               "--min-samples", "10"))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # it started: stop it cleanly (it unmounts) and fail
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"the sidecar started with --min-samples above initial=: {err[-3000:]}")
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 2 and "Traceback" not in out + err, err
    assert lines == ["epochfs sidecar: --min-samples: 10 is more than --schedule's initial=4, the keys "
                     "of epoch 0's window: epoch 0 could never be cut; lower --min-samples or raise "
                     "initial="], lines


def _reason(car: Sidecar) -> str:
    code, body = car.get("/readyz")
    return "" if code != 503 or not body else str(json.loads(body).get("reason", ""))


def _looked_up_and_never_cut(car: Sidecar, warning: str) -> None:
    """Look up epoch-0 once the view is up (which queues its cut), wait for ``warning`` as
    /readyz's reason, then: still no epoch 0, ``epochfs status`` and the log say the same."""
    wait_until(lambda: (car.mount / ".epochfs").exists() or car.proc.poll() is not None, timeout=60,
               what="the view mounted")
    with pytest.raises(FileNotFoundError):
        os.stat(car.mount / "epoch-0")
    wait_until(lambda: warning in _reason(car) or car.get("/readyz")[0] == 200, timeout=60,
               what="/readyz's reason")
    assert warning in _reason(car), car.get("/readyz")
    with pytest.raises(FileNotFoundError):
        os.stat(car.mount / "epoch-0")
    status = subprocess.run([*EPOCHFS, "status", "--cache", str(car.cache)], capture_output=True, text=True,
                            timeout=60)
    assert status.returncode == 0, status.stderr
    assert f"WARNING: {warning}" in status.stdout, status.stdout
    wait_until(lambda: warning in car.log_text(), timeout=30, what="the log's warning")
    said = [line for line in car.log_text().splitlines() if warning in line]
    assert len(said) == 1 and " WARNING epoch 0: " in said[0], said  # once, at WARNING


@pytest.mark.fuse
@pytest.mark.parametrize("min_samples", [14, 17])
def test_min_samples_above_what_the_epoch_budget_holds_is_never_cut_and_said(
        tmp_path: Path, dataset: Path, min_samples: int) -> None:
    with running_sidecar(tmp_path, remote=dataset.as_uri(), endpoint="", expect_ready=False,
                         extra=("--capacity", "64Ki", "--min-samples", str(min_samples))) as car:
        _looked_up_and_never_cut(car, (
            f"--min-samples {min_samples} is more than the 12 samples an epoch holds: --capacity 64.0 KiB "
            "less --headroom 25% leaves 48.0 KiB for an epoch, and the cache is full with nothing "
            "evictable: epoch 0 is never cut; lower --min-samples or raise --capacity"))


@pytest.mark.fuse
def test_a_schedule_window_the_budget_trims_below_min_samples_is_never_cut_and_said(
        tmp_path: Path, dataset: Path) -> None:
    with running_sidecar(tmp_path, remote=dataset.as_uri(), endpoint="", expect_ready=False,
                         extra=("--capacity", "64Ki", "--schedule", "initial=20,growth=2",
                                "--min-samples", "16")) as car:
        _looked_up_and_never_cut(car, (
            "--min-samples 16 is more than the 12 samples epoch 0's window holds (the epoch budget "
            "(48.0 KiB: --capacity less --headroom) holds 12 of its first 20 keys): it is never cut; "
            "lower --min-samples"))

