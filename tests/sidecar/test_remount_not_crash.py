"""A remount is not a crash: a FUSE server the supervisor killed itself (its view lost or hung), or
one that exited 0 by itself once its mount went away, is said as such in the log, counts no quick
crash in /healthz and does not grow the restart backoff (the reviewer saw "killed by signal 9
(SIGKILL: a kill from outside, or the kernel's OOM killer ...)" and crashes counted after an
``epochfs unmount`` of the view, and after a hung server). Real sidecar, real mounts, moto S3."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from sidecar_helpers import EPOCHFS, Sidecar, running_sidecar

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

BUCKET = "data"
OUTSIDE_KILL = "a kill from outside, or the kernel's OOM killer"


def _replaced(car: Sidecar, old: int) -> bool:
    """A new FUSE server runs and the view answers again."""
    pid = car.child_pid("fuse")
    return pid not in (None, old) and car.get("/readyz")[0] == 200


def _assert_remount_not_crash(car: Sidecar) -> None:
    log = car.log_text()
    assert "FUSE view lost" in log
    assert "a remount, not a crash" in log, log[-3000:]
    assert OUTSIDE_KILL not in log, log[-3000:]
    fuse = car.health()["children"]["fuse"]
    assert fuse["crashes"] == 0, fuse
    assert fuse["restarts"] == 1, fuse


def test_view_unmounted_from_outside_is_a_remount_not_a_crash(s3: S3Server, tmp_path: Path) -> None:
    put_objects(s3, BUCKET, random_objects(8, 4 * 1024))
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint,
                         extra=("--min-samples", "3")) as car:
        old = car.child_pid("fuse")
        assert old is not None
        r = subprocess.run([*EPOCHFS, "unmount", "--mount", str(car.mount)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        wait_until(lambda: _replaced(car, old), timeout=30, what="a new FUSE server after the unmount")
        _assert_remount_not_crash(car)


def test_hung_fuse_server_killed_by_the_supervisor_is_not_a_crash(s3: S3Server, tmp_path: Path) -> None:
    put_objects(s3, BUCKET, random_objects(8, 4 * 1024))
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint,
                         extra=("--min-samples", "3")) as car:
        old = car.child_pid("fuse")
        assert old is not None
        os.kill(old, signal.SIGSTOP)  # alive but answering nothing: the probes time out
        try:
            wait_until(lambda: _replaced(car, old), timeout=30, what="a new FUSE server after the hang")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(old, signal.SIGCONT)
        _assert_remount_not_crash(car)
        assert "fuse was killed by the supervisor" in car.log_text()
        assert "the view was hung (mount answered hung)" in car.log_text()
