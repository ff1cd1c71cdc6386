"""Legacy sidecar mode (sidecar.native=false) keeps the native sidecar's two promises, checked by
running the chart's rendered shell wrappers for real on this machine, with a stand-in
`epochfs sidecar` that serves /readyz on EPOCHFS_HEALTH_PORT as the real one does:

* the trainer starts only once the sidecar is ready (the view mounted and epoch 0 ready to cut),
  not as soon as the view is mounted: a plain read of epoch-0/ at the trainer's start would get
  ENOENT (a native sidecar's startupProbe holds the trainer back until /readyz answers 200);
* on the pod's SIGTERM, which the kubelet sends to both regular containers at once, the view
  stays up while the trainer shuts down (it may be saving a checkpoint through it), up to the
  grace period less a margin, and the sidecar stops as soon as the trainer has exited.

The same pod under a real container engine: tests/deploy/test_container_pod.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from common import free_port, wait_until
from helm_helpers import pod_spec, render, saving_trainer, with_remote

CONTROL = "/var/run/epochfs-control"
GRACE = 16
WAIT = GRACE - 5  # the chart's margin: 5 s to unmount in, at most half the grace period
SHORT_GRACE = 10  # for the test that waits the whole stop wait out: still the 5 s margin
SHORT_WAIT = SHORT_GRACE - 5

# The stand-in `epochfs`: /readyz answers 503 until the file READY exists, each answer logged;
# SIGTERM is logged and ends it with status 0, as the real sidecar's clean stop does.
STAND_IN = '''\
import http.server, os, signal, sys, time
log, ready = sys.argv[2], sys.argv[3]
def note(what):
    with open(log, "a") as f:
        f.write(f"{time.monotonic()} {what}\\n")
def term(*_):
    note("TERM")
    os._exit(0)
signal.signal(signal.SIGTERM, term)
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        code = 200 if os.path.exists(ready) else 503
        note(f"readyz {code}")
        self.send_response(code)
        self.end_headers()
    def log_message(self, *_):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(os.environ["EPOCHFS_HEALTH_PORT"])), Handler)
note("started")
server.serve_forever()
'''


@dataclass
class Legacy:
    """The two wrappers of one legacy pod, and the stand-in's files."""

    control: Path
    mount: Path
    log: Path
    ready: Path
    env: dict[str, str]
    sidecar_script: str
    trainer_script: str

    def notes(self) -> list[tuple[float, str]]:
        if not self.log.exists():
            return []
        return [(float(t), what) for t, what in
                (line.split(" ", 1) for line in self.log.read_text().splitlines())]

    def answered(self, code: int) -> int:
        return sum(1 for _, what in self.notes() if what == f"readyz {code}")

    def term_at(self) -> float | None:
        return next((t for t, what in self.notes() if what == "TERM"), None)

    def sidecar(self) -> subprocess.Popen[Any]:
        return subprocess.Popen(["/bin/sh", "-c", self.sidecar_script], env=self.env, start_new_session=True)

    def trainer(self, *argv: str) -> subprocess.Popen[Any]:
        return subprocess.Popen(["/bin/sh", "-c", self.trainer_script, "epochfs-trainer", *argv],
                                env=self.env, start_new_session=True)


@pytest.fixture
def legacy(helm_bin: Path, tmp_path: Path) -> Legacy:
    """The chart's legacy Job (terminationGracePeriodSeconds GRACE) with its control folder here and
    the stand-in first on PATH; every process group started is killed by the test."""
    return _legacy(helm_bin, tmp_path, GRACE)


def _legacy(helm_bin: Path, tmp_path: Path, grace: int) -> Legacy:
    """The legacy pod of a chart rendered with terminationGracePeriodSeconds ``grace``."""
    values = with_remote({"sidecar": {"native": False}, "terminationGracePeriodSeconds": grace})
    side, trainer = pod_spec(render(helm_bin, values, tmp_path))["containers"]
    control, mount, bindir = tmp_path / "control", tmp_path / "mnt", tmp_path / "bin"
    for folder in (control, mount / ".epochfs", bindir):
        folder.mkdir(parents=True)
    # The view is mounted from the start (its status file is there); readiness is /readyz's.
    (mount / ".epochfs" / "status.json").write_text("{}")
    log, ready = tmp_path / "stand-in.log", tmp_path / "is-ready"
    (tmp_path / "stand_in.py").write_text(STAND_IN)
    fake = bindir / "epochfs"
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'stand_in.py'} \"$1\" {log} {ready}\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "EPOCHFS_MOUNT": str(mount),
           "EPOCHFS_HEALTH_PORT": str(free_port())}
    return Legacy(control, mount, log, ready, env, side["command"][2].replace(CONTROL, str(control)),
                 trainer["command"][2].replace(CONTROL, str(control)))


def _kill(*procs: subprocess.Popen[Any]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_the_trainer_starts_only_once_the_sidecar_is_ready(legacy: Legacy, tmp_path: Path) -> None:
    """Mounted but not ready (/readyz 503): the trainer has not started after the sidecar's
    wrapper asked twice; once /readyz answers 200 it starts, and its wrapper keeps its status."""
    ran = tmp_path / "ran"
    sidecar = legacy.sidecar()
    trainer = legacy.trainer("sh", "-c", f"touch {ran}; exit 7")
    try:
        wait_until(lambda: ran.exists() or legacy.answered(503) >= 2, timeout=30,
                   what="two 503 answers of /readyz")
        assert not ran.exists(), "the trainer started before the sidecar was ready"
        assert not (legacy.control / "ready").exists()
        legacy.ready.touch()
        assert trainer.wait(timeout=30) == 7 and ran.exists()
        assert (legacy.control / "ready").exists() and legacy.answered(200) == 1
        assert sidecar.wait(timeout=30) == 0  # the trainer's exit file stops it
        assert legacy.term_at() is not None
    finally:
        _kill(trainer, sidecar)


def test_a_stale_ready_file_of_an_earlier_sidecar_is_cleared(legacy: Legacy) -> None:
    """A sidecar container restarted in place starts with its predecessor's control folder:
    a trainer started meanwhile waits for the new sidecar's readiness."""
    (legacy.control / "ready").touch()
    sidecar = legacy.sidecar()
    try:
        wait_until(lambda: legacy.answered(503) >= 1, what="a 503 answer of /readyz")
        assert not (legacy.control / "ready").exists()
    finally:
        _kill(sidecar)


def test_on_sigterm_the_sidecar_stops_once_the_trainer_has_saved(legacy: Legacy, tmp_path: Path) -> None:
    """The pod's SIGTERM to both containers; the trainer saves, then exits 0: the sidecar is
    stopped after that, within a check of the exit file, not at the end of the grace period."""
    script, record, go = saving_trainer(tmp_path)
    legacy.ready.touch()
    sidecar = legacy.sidecar()
    trainer = legacy.trainer(str(script))
    try:
        wait_until(lambda: record.exists() and "started" in record.read_text(), what="the trainer's start")
        os.kill(sidecar.pid, signal.SIGTERM)
        os.kill(trainer.pid, signal.SIGTERM)
        wait_until(lambda: "got-TERM" in record.read_text(), what="the trainer's SIGTERM")
        go.touch()
        saved = time.monotonic()
        assert trainer.wait(timeout=30) == 0 and (legacy.control / "trainer-exited").exists()
        assert sidecar.wait(timeout=30) == 0
        term = legacy.term_at()
        assert term is not None and term < saved + 5, (term, saved)
        assert (legacy.control / "sidecar-exited").read_text().strip() == "0"
    finally:
        _kill(trainer, sidecar)


@pytest.mark.long
def test_on_sigterm_a_trainer_that_never_exits_is_given_the_grace_period(helm_bin: Path,
                                                                         tmp_path: Path) -> None:
    """No exit file ever comes (a trainer still saving at SIGKILL time): the sidecar is stopped
    after the grace period less its margin, in time to unmount before the kubelet's SIGKILL.
    The shortest grace period whose margin is still the full 5 s: the test waits it out."""
    legacy = _legacy(helm_bin, tmp_path, SHORT_GRACE)
    script, record, _ = saving_trainer(tmp_path)
    legacy.ready.touch()
    sidecar = legacy.sidecar()
    trainer = legacy.trainer(str(script))
    try:
        wait_until(lambda: record.exists() and "started" in record.read_text(), what="the trainer's start")
        sent = time.monotonic()
        os.kill(sidecar.pid, signal.SIGTERM)
        os.kill(trainer.pid, signal.SIGTERM)
        assert sidecar.wait(timeout=SHORT_GRACE + 10) == 0
        term = legacy.term_at()
        assert term is not None, "the sidecar was never stopped"
        assert SHORT_WAIT - 1 <= term - sent <= SHORT_GRACE - 1, term - sent
        assert trainer.poll() is None  # still saving: the kubelet's SIGKILL ends it
    finally:
        _kill(trainer, sidecar)
