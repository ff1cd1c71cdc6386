"""Legacy sidecar mode (sidecar.native=false): the rendered shell wrappers, run for real.

The trainer's wrapper is the container's first process, PID 1 of its PID namespace: the kernel
delivers the pod's SIGTERM to PID 1 only through a handler, so the wrapper must trap it and
forward it to the trainer. And a sidecar that exits before it mounts the view must end the
trainer's wait with a clear error, not leave it waiting for ever under restartPolicy Never.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from common import wait_until
from helm_helpers import pod_spec, render, saving_trainer, with_remote

CONTROL = "/var/run/epochfs-control"


@pytest.fixture(scope="module")
def scripts(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(the sidecar's wrapper, the trainer's wrapper) of the chart's legacy Job."""
    objs = render(helm_bin, with_remote({"sidecar": {"native": False}}), tmp_path_factory.mktemp("legacy"))
    side, trainer = pod_spec(objs)["containers"]
    assert side["name"] == "epochfs" and trainer["name"] == "trainer"
    assert trainer["command"][:2] == ["/bin/sh", "-c"] and side["command"][:2] == ["/bin/sh", "-c"]
    return side["command"][2], trainer["command"][2]


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _mounted(tmp_path: Path) -> tuple[Path, Path]:
    """(the control folder, a mount point whose view is up: its status.json is there, and the
    sidecar's wrapper has left its ready file)."""
    control = tmp_path / "control"
    control.mkdir()
    (control / "ready").touch()
    mount = tmp_path / "mnt"
    (mount / ".epochfs").mkdir(parents=True)
    (mount / ".epochfs" / "status.json").write_text("{}")
    return control, mount


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    """The wrapper's whole process group, whether the wrapper itself is still there or not: a
    trainer left behind by a wrapper that exited first kept running after the test."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0,
                    reason="needs unshare and root for a PID namespace")
def test_the_trainer_gets_the_pods_sigterm_as_pid_1(scripts: tuple[str, str], tmp_path: Path) -> None:
    """The wrapper runs as PID 1 of a new PID namespace, as in a container; SIGTERM sent to it
    from outside must reach the trainer, whose handler records it, and the wrapper exits with the
    trainer's status and leaves the exit file for the sidecar."""
    _, trainer_script = scripts
    control, mount = _mounted(tmp_path)
    record = tmp_path / "record"
    trainer = tmp_path / "trainer.sh"
    trainer.write_text(
        "#!/bin/sh\n"
        f"trap 'echo got-TERM >> {record}; exit 5' TERM\n"
        f"echo started >> {record}\n"
        "while :; do sleep 0.05; done\n")
    trainer.chmod(0o755)
    script = trainer_script.replace(CONTROL, str(control))
    env = {**os.environ, "EPOCHFS_MOUNT": str(mount)}
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "/bin/sh", "-c", script,
                             "epochfs-trainer", str(trainer)], env=env, start_new_session=True)
    try:
        wait_until(lambda: record.exists() and "started" in record.read_text(), what="the trainer's start")
        [pid1] = wait_until(lambda: _children(proc.pid), what="the namespace's PID 1")
        os.kill(pid1, signal.SIGTERM)
        wait_until(lambda: "got-TERM" in record.read_text(), timeout=15, what="the trainer's SIGTERM")
        assert proc.wait(timeout=30) == 5  # the trainer's own status
        assert (control / "trainer-exited").exists()
    finally:
        _kill_group(proc)


def test_the_trainer_keeps_running_to_its_end_after_a_forwarded_sigterm(scripts: tuple[str, str],
                                                                       tmp_path: Path) -> None:
    """A trainer that saves a checkpoint on SIGTERM takes its time: the wrapper waits for it (a
    trapped signal interrupts `wait`) and exits with its status, not the signal's."""
    _, trainer_script = scripts
    control, mount = _mounted(tmp_path)
    trainer, record, go = saving_trainer(tmp_path)
    script = trainer_script.replace(CONTROL, str(control))
    env = {**os.environ, "EPOCHFS_MOUNT": str(mount)}
    proc = subprocess.Popen(["/bin/sh", "-c", script, "epochfs-trainer", str(trainer)], env=env,
                            start_new_session=True)
    try:
        wait_until(lambda: record.exists() and "started" in record.read_text(), what="the trainer's start")
        os.kill(proc.pid, signal.SIGTERM)
        wait_until(lambda: "got-TERM" in record.read_text(), timeout=15, what="the trainer's SIGTERM")
        assert proc.poll() is None and not (control / "trainer-exited").exists()
        go.touch()
        assert proc.wait(timeout=30) == 0
        assert record.read_text().split() == ["started", "got-TERM", "saved"]
        assert (control / "trainer-exited").exists()
    finally:
        _kill_group(proc)


def test_a_sidecar_that_exits_before_mounting_ends_the_trainers_wait(scripts: tuple[str, str],
                                                                    tmp_path: Path) -> None:
    """`epochfs sidecar` refuses its settings and exits 2 (no such bucket): the sidecar's wrapper
    leaves its status in the control folder, and the trainer's wrapper, still waiting for the
    view, stops waiting and exits non-zero with a message that says why, without running the
    trainer."""
    side_script, trainer_script = scripts
    control = tmp_path / "control"
    control.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "epochfs"
    fake.write_text("#!/bin/sh\necho 'epochfs sidecar: no such bucket s3://b/p' >&2\nexit 2\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "EPOCHFS_MOUNT": str(tmp_path / "mnt")}
    ran = tmp_path / "ran"
    trainer = subprocess.Popen(["/bin/sh", "-c", trainer_script.replace(CONTROL, str(control)),
                                "epochfs-trainer", "touch", str(ran)],
                               env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    sidecar = subprocess.Popen(["/bin/sh", "-c", side_script.replace(CONTROL, str(control))], env=env,
                               start_new_session=True)
    try:
        assert sidecar.wait(timeout=30) == 2
        wait_until(lambda: trainer.poll() is not None, timeout=15, what="the trainer's wrapper to give up")
        assert trainer.returncode == 2
        assert trainer.stderr is not None
        err = trainer.stderr.read()
        assert "sidecar exited with status 2 before" in err and "kubectl logs" in err, err
        assert not ran.exists() and not (control / "trainer-exited").exists()
    finally:
        _kill_group(trainer)
        _kill_group(sidecar)


def test_a_stale_exit_record_of_an_earlier_sidecar_is_cleared(scripts: tuple[str, str],
                                                              tmp_path: Path) -> None:
    """A sidecar container restarted in place (a parent's restartPolicy OnFailure) starts with the
    control folder of its predecessor: its wrapper removes the old record first, so a trainer
    started meanwhile waits for the new sidecar's view."""
    side_script, _ = scripts
    control = tmp_path / "control"
    control.mkdir()
    (control / "sidecar-exited").write_text("2\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "log"
    fake = bindir / "epochfs"
    fake.write_text(f"#!/bin/sh\necho started >> {log}\ntrap 'exit 0' TERM\nwhile :; do sleep 0.05; done\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    sidecar = subprocess.Popen(["/bin/sh", "-c", side_script.replace(CONTROL, str(control))], env=env,
                               start_new_session=True)
    try:
        wait_until(lambda: log.exists() and "started" in log.read_text(), what="the stand-in's start")
        assert not (control / "sidecar-exited").exists()
        (control / "trainer-exited").touch()
        assert sidecar.wait(timeout=30) == 0
        assert (control / "sidecar-exited").read_text().strip() == "0"
    finally:
        _kill_group(sidecar)


def test_the_sidecar_may_write_the_control_folder(helm_bin: Path, tmp_path: Path) -> None:
    """The sidecar's wrapper writes its exit record there: its mount is read-write."""
    objs = render(helm_bin, with_remote({"sidecar": {"native": False}}), tmp_path)
    side = pod_spec(objs)["containers"][0]
    [mount] = [m for m in side["volumeMounts"] if m["mountPath"] == CONTROL]
    assert not mount.get("readOnly")
