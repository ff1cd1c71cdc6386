"""A remote that cannot be reached is a transient failure, not a crash (issue 21).

A real ``epochfs sidecar`` against an endpoint that refuses connections (127.0.0.1 on a closed
port): the sampler exits 1 at each start and is started again with backoff. ``/healthz`` must stay
200 through those restarts (a liveness probe would otherwise restart the pod over a remote outage,
which a new pod would meet again), ``/readyz`` must say why it is not ready and when the next try
comes, and ``epochfs status`` must show the same line. The refusal case (exit 2, the sidecar
stops) is test_supervisor.py's ``test_a_remote_the_sampler_refuses_stops_the_sidecar_with_the_reason``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from common import S3Server, free_port, put_objects, random_objects, wait_until
from sidecar_helpers import EPOCHFS, Sidecar, running_sidecar

from epochfs.sidecar import status
from epochfs.sidecar.config import EXIT_RETRY
from epochfs.sidecar.supervisor import STATE_FILE_NAME, retry_reason

needs_fuse = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                reason="needs root and FUSE")

RETRY_LINE = re.compile(r"^remote unreachable: (?P<why>.+); retry (?P<n>\d+) (in \d+ s|running for \d+ s)$")


def _doc(car: Sidecar, path: str) -> tuple[int, dict[str, Any]]:
    code, body = car.get(path)
    return code, (json.loads(body) if body else {})


def _status_lines(*wheres: tuple[str, ...]) -> list[str]:
    """The ``sampler:`` line of ``epochfs status`` run as a user would (a process of its own) with
    each of ``wheres``' arguments; the processes run at once (each is mostly its start-up)."""
    procs = [subprocess.Popen([*EPOCHFS, "status", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for args in wheres]
    found = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == 0, err
            lines = [ln for ln in out.splitlines() if ln.startswith("sampler: ")]
            assert len(lines) == 1, out
            found.append(lines[0][len("sampler: "):])
    finally:
        for proc in procs:  # none left running when one failed
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return found


@pytest.mark.long
@pytest.mark.fuse
@needs_fuse
def test_an_unreachable_remote_keeps_health_and_says_why_it_is_not_ready(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Credentials so that botocore gets as far as connecting (none at all would be a refusal).
    for name, value in (("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "x"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there: connection refused
    with running_sidecar(tmp_path, remote="s3://data", endpoint=closed, expect_ready=False) as car:
        wait_until(lambda: car.get("/healthz")[0] == 200, timeout=30, what="/healthz 200 once mounted")
        codes: list[int] = []

        def past_five_exits() -> dict[str, Any] | None:
            """Polls /healthz, recording each answer, until the sampler has exited five times in a
            row and waits for its restart: before issue 21 its backoff (8 s) failed health then."""
            code, doc = _doc(car, "/healthz")
            codes.append(code)
            sampler = doc.get("children", {}).get("sampler", {})
            reaped = "pid" in sampler and sampler["pid"] is None  # exited, and the exit recorded
            if sampler.get("restarts", 0) >= 4 and reaped and sampler.get("last_exit") == EXIT_RETRY:
                return doc
            return None

        health = wait_until(past_five_exits, timeout=120, interval=0.2, what="five transient sampler exits")
        assert set(codes) == {200}, f"/healthz answered {sorted(set(codes))} while the remote was down"
        sampler = health["children"]["sampler"]
        assert sampler["crashes"] == 0, sampler
        assert RETRY_LINE.match(sampler["retrying"]), sampler

        code, ready = _doc(car, "/readyz")
        assert code == 503, ready
        m = RETRY_LINE.match(ready["reason"])
        assert m is not None, ready
        assert "Connection refused" in m["why"] and "cannot list s3://data" in m["why"], ready
        assert int(m["n"]) >= 5, ready  # the sixth start (the fifth retry) or later

        wheres = (("--cache", str(car.cache)), ("--mount", str(car.mount)))
        for where, line in zip(wheres, _status_lines(*wheres), strict=True):
            shown = RETRY_LINE.match(line)
            assert shown is not None, (where, line)
            assert shown["why"] == m["why"], (where, line, ready["reason"])
        assert (car.cache / STATE_FILE_NAME).is_file()
        assert "could not reach the remote" in car.log_text()
        assert "refused its settings" not in car.log_text()
    assert not (car.cache / STATE_FILE_NAME).exists(), "the state file outlived its supervisor"


@pytest.mark.long
@pytest.mark.fuse
@needs_fuse
def test_quick_crashes_still_fail_health(s3: S3Server, tmp_path: Path) -> None:
    """The other side of the rule: a sampler that dies without saying the remote is unreachable
    (here ``kill -9``, five times in a row, each within seconds of its start) is crashing, and
    /healthz fails after the fifth so that a liveness probe restarts the pod, as before issue 21."""
    put_objects(s3, "data", random_objects(8, 1024))
    with running_sidecar(tmp_path, remote="s3://data", endpoint=s3.endpoint) as car:
        for kill in range(1, 6):
            pid = wait_until(lambda: car.child_pid("sampler"), timeout=30, what=f"sampler run {kill}")
            os.kill(pid, signal.SIGKILL)

            def recorded(n: int = kill) -> dict[str, Any] | None:
                sampler = car.health().get("children", {}).get("sampler", {})
                return sampler if sampler.get("crashes") == n and sampler.get("pid") is None else None

            sampler = wait_until(recorded, timeout=30, what=f"crash {kill} recorded")
            assert "retrying" not in sampler, sampler
        code, doc = _doc(car, "/healthz")
        assert code == 503 and doc["children"]["sampler"]["crashes"] == 5, doc
        assert "could not reach the remote" not in car.log_text()


def test_the_samplers_last_line_gives_a_one_line_reason_without_secrets() -> None:
    line = ("epochfs sample: the remote cannot be reached now: cannot list s3://b: ConnectionRefusedError: "
            "[Errno 111] Connection refused (endpoint http://user:hunter2@10.0.0.1:9000/?X-Amz-Signature=abc)")
    reason = retry_reason(line, "sampler")
    assert reason.startswith("cannot list s3://b: ConnectionRefusedError"), reason  # said once, by the caller
    assert "hunter2" not in reason and "abc" not in reason, reason
    assert retry_reason("", "sampler") == f"sampler exited with status {EXIT_RETRY}"  # no line said why
    long = retry_reason("epochfs sample: " + "x" * 5000, "sampler")
    assert len(long) <= 300 and "\n" not in long


def test_status_and_the_supervisor_agree_on_the_state_file() -> None:
    """``epochfs status`` reads the file the supervisor writes (its name has one home, the
    store's stats, which both may import); its line uses /readyz's words."""
    now = time.time()
    waiting = {"pid": os.getpid(), "sampler": {"waiting": "remote unreachable: r", "retry": 3,
                                               "next_start": now + 8.2, "started": None}}
    assert status.retry_line(waiting, now) == "remote unreachable: r; retry 3 in 8 s"
    running = {"sampler": {"waiting": "remote unreachable: r", "retry": 3, "next_start": None,
                           "started": now - 1}}
    assert status.retry_line(running, now) == "remote unreachable: r; retry 3 running for 1 s"
    assert status.retry_line({}, now) is None


def test_a_dead_supervisors_state_file_is_not_shown(tmp_path: Path) -> None:
    """A supervisor killed with -9 leaves its file behind: status shows it only while it is fresh
    (a live supervisor rewrites it at least every 30 s). By its age, not its pid: the trainer's
    container, where ``epochfs status --mount`` runs, has another PID namespace."""
    doc = {"pid": 1, "mount": str(tmp_path / "mnt"),  # pid 1: alive anywhere, so proves nothing
           "sampler": {"waiting": "remote unreachable: r", "retry": 1, "next_start": time.time() + 5}}
    path = tmp_path / STATE_FILE_NAME
    path.write_text(json.dumps(doc))
    assert status.read_retrying(cache=tmp_path, mount=None) == "remote unreachable: r; retry 1 in 5 s"
    old = time.time() - status.STATE_MAX_AGE - 1
    os.utime(path, (old, old))
    assert status.read_retrying(cache=tmp_path, mount=None) is None
