"""A plain ``epochfs status`` shows the rates (``rates: fetch ...``) once epochs exist, as before
the first cut: the EpochfsSamplerStalled runbook (docs/metrics.md) sends the operator to
``epochfs status --mount "$EPOCHFS_MOUNT"`` for the fetch rate, and that alert fires only once
epochs exist, when the one-shot status printed no rates (only ``--watch`` did).

A real sidecar (the FUSE view and the folder view) with epoch 0 cut; the real console script,
``--mount`` and ``--cache``, and the runbook's own command, read out of docs/metrics.md."""

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
from folderview_helpers import cut
from sidecar_helpers import Sidecar, file_remote, running_sidecar

from epochfs.sidecar.status import read_stats
from epochfs.sidecar.status_estimate import ESTIMATE_SECONDS
from epochfs.torchclient import layout

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
METRICS_MD = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

@pytest.fixture(params=[pytest.param("fuse", marks=pytest.mark.fuse), "folder"])
def sidecar_with_epoch(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sidecar]:
    """A running sidecar whose epoch 0 is cut (and shown in its view)."""
    folder = request.param == "folder"
    if not folder and (os.geteuid() != 0 or not os.path.exists("/dev/fuse")):
        pytest.skip("the FUSE view needs root and /dev/fuse")
    extra = ("--kube-reporting", "0", *(("--view", "folder") if folder else ()))
    with running_sidecar(tmp_path, remote=file_remote(tmp_path), endpoint="", extra=extra,
                         mount=tmp_path / "view" if folder else None) as car:
        if folder:  # nothing sees a lookup there: the torch client's request cuts
            code, answer = cut(car, "epoch=0")
            assert code in (200, 202), answer
        # On the FUSE view the lookup itself cuts.
        wait_until(lambda: layout.epoch_exists(car.mount, 0), timeout=60, what="epoch 0 in the view")
        yield car


def _status(*args: str, env: dict[str, str] | None = None) -> str:
    r = subprocess.run([EPOCHFS, "status", *args], capture_output=True, text=True, timeout=60,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def _rates_line(shown: str) -> str:
    assert "no epoch cut yet" not in shown, shown
    lines = [line for line in shown.splitlines() if line.startswith("rates: ")]
    assert len(lines) == 1, f"no rates line in a plain status after the first cut:\n{shown}"
    return lines[0]


@pytest.mark.parametrize("where", ["--mount", "--cache"])
def test_a_plain_status_after_the_first_cut_shows_the_rates(sidecar_with_epoch: Sidecar, where: str) -> None:
    car = sidecar_with_epoch
    shown = _status(where, str(car.mount if where == "--mount" else car.cache))
    line = _rates_line(shown)
    assert re.match(r"rates: fetch \d+(\.\d)? (B|KiB|MiB)/s  fetch samples/s \d+\.\d", line), shown
    # --json stays one reading's counters, those the rates are drawn from.
    doc = json.loads(_status(where, str(car.mount if where == "--mount" else car.cache), "--json"))
    assert {"fetched_total", "fetched_bytes_total", "skipped_total"} <= doc.keys() and "rates" not in doc


def _runbook_commands(alert: str) -> list[str]:
    """The ``epochfs ...`` commands of ``alert``'s "What to check" in docs/metrics.md (those run
    in the sidecar's container with ``kubectl exec POD -c epochfs -- sh -c '...'``)."""
    text = METRICS_MD.read_text()
    section = text.split(f"### {alert}\n", 1)[1].split("\n### ", 1)[0]
    return re.findall(r"sh -c '(epochfs [^']*)'", " ".join(section.split()))


def test_the_stalled_sampler_runbook_command_shows_what_it_promises(sidecar_with_epoch: Sidecar) -> None:
    """Its first check promises "fetch rate, skipped objects, backpressure"."""
    car = sidecar_with_epoch
    commands = _runbook_commands("EpochfsSamplerStalled")
    assert commands, "the runbook names no epochfs command"
    # The sidecar's container: its variables, and epochfs on the PATH.
    env = {**os.environ, "EPOCHFS_MOUNT": str(car.mount), "EPOCHFS_CACHE": str(car.cache),
           "PATH": f"{Path(EPOCHFS).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for command in commands:
        r = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0, (command, r.stderr[-3000:])
        assert _rates_line(r.stdout).startswith("rates: fetch "), r.stdout
        assert "object(s) skipped" in r.stdout and "backpressure: " in r.stdout, r.stdout


def test_the_second_reading_waits_a_bounded_pause(tmp_path: Path) -> None:
    """One pause of :data:`ESTIMATE_SECONDS` between the readings, on real documents of a store
    whose sampler is not known to be stopped (``--mount`` never knows)."""
    from fuse_helpers import admit, make_objects, open_store

    from epochfs.sidecar.status import one_shot_view

    with open_store(tmp_path / "cache") as store:
        admit(store, make_objects(4, 64))
        assert store.cut(0) == 0
        first = store.stats().to_json()
        admit(store, make_objects(2, 500_000, start=10))
        later = store.stats().to_json()
    readings, pauses, ticks = iter([later]), [], iter([0.0, 2.0])
    shown = one_shot_view(lambda: next(readings), first, sleep=pauses.append, clock=lambda: next(ticks))
    assert pauses == [ESTIMATE_SECONDS]
    assert "fetch samples/s 1.0" in _rates_line(shown), shown  # 2 samples over 2 s
    # With no sampler (known with --cache), nothing fetches: one reading, no pause.
    stopped = read_stats(cache=tmp_path / "cache", mount=None)
    assert stopped["sampler_running"] is False
    assert "rates:" not in one_shot_view(lambda: stopped, stopped, sleep=pauses.append)
    assert pauses == [ESTIMATE_SECONDS]
