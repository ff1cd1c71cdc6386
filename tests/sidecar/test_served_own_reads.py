"""epochfs's own reads of the cache are not samples served to trainers.

The supervisor counts opens of object files with fanotify (``epochfs_served_samples_total``, the
dashboard's "Served to trainers", ``epochfs status``'s "served N sample opens"). The sampler's
background scrub and ``epochfs verify`` open every object too. Before: the counter ignored the
event's pid, so an idle sidecar nothing read "served" 3.95 opens/s (the scrub at its default
8 MiB/s) and ``epochfs verify`` added exactly its 125 objects. Now the opens of the supervisor's
descendants and of epochfs commands are left out (``served.OwnProcesses``).

A real sidecar (supervisor, sampler with its scrub, FUSE server) against moto, the real
``epochfs verify`` console script, and reads through the mount as a trainer makes them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from sampler_helpers import index_rows
from sidecar_helpers import running_sidecar

from epochfs.sidecar.served import OwnProcesses, is_epochfs_command

EPOCHFS_SCRIPT = str(Path(sys.executable).with_name("epochfs"))
FENCE = 1 << 40
WRITE_SYSCALL = {"x86_64": 1, "aarch64": 64}.get(platform.machine())


def _blocked_writing_stdout(pid: int) -> bool:
    """``pid`` sits in write(1, ...) (/proc/<pid>/syscall: the number, then the arguments)."""
    try:
        fields = Path(f"/proc/{pid}/syscall").read_text().split()
    except OSError:
        return False
    return len(fields) > 1 and fields[0] == str(WRITE_SYSCALL) and fields[1] == "0x1"


def _full_pipe() -> tuple[int, int]:
    """A pipe whose buffer is full: a process writing to it blocks until the other end is read."""
    r, w = os.pipe()
    flags = fcntl.fcntl(w, fcntl.F_GETFL)
    fcntl.fcntl(w, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(w, b"\0" * 4096)
    fcntl.fcntl(w, fcntl.F_SETFL, flags)  # the writer it is handed to blocks, as on any pipe
    return r, w


@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                    reason="needs root (fanotify, FUSE) and /dev/fuse")
@pytest.mark.skipif(WRITE_SYSCALL is None, reason="write(2)'s number on this machine is not known here")
def test_the_scrub_and_epochfs_verify_are_not_counted_as_served(s3: S3Server, tmp_path: Path) -> None:
    objects = random_objects(20, 64 * 1024)
    put_objects(s3, "data", objects)
    extra = ("--capacity", "64Mi", "--min-samples", "1", "--concurrency", "4")
    with running_sidecar(tmp_path, remote="s3://data", endpoint=s3.endpoint, extra=extra) as car:
        wait_until(lambda: index_rows(car.cache, "SELECT COUNT(*) FROM samples")[0][0] == len(objects),
                   timeout=60, what="every object cached")
        epoch = car.mount / "epoch-0"
        keys = sorted(str(p.relative_to(epoch)) for p in epoch.rglob("*") if p.is_file())
        assert keys, "epoch 0 holds the cached samples"

        # The scrub reads every object, pass after pass: damage the newest one (the last of a pass,
        # in admission order) and wait for the scrub to find it, so it has opened them all.
        [(victim_sid, victim_key)] = index_rows(
            car.cache, "SELECT sid, key FROM samples ORDER BY id DESC LIMIT 1")
        victim = car.cache / "objects" / str(victim_sid)[:2] / str(victim_sid)
        victim_size = victim.stat().st_size
        with open(victim, "r+b") as f:  # this open is a reader's (the test's): it counts
            first = f.read(1)
            f.seek(0)
            f.write(bytes([first[0] ^ 0xFF]))
        wait_until(lambda: car.metric("epochfs_corrupt_objects_total") == 1, timeout=60,
                   what="the scrub to find the damaged object")

        # `epochfs verify` opens every object, then prints its report and exits: its stdout, a full
        # pipe, holds it there (alive) until the counter has read its opens.
        r, w = _full_pipe()
        with open(tmp_path / "verify.err", "wb") as err:
            verify = subprocess.Popen([EPOCHFS_SCRIPT, "verify", "--cache", str(car.cache),
                                       "--progress-seconds", "0"], stdout=w, stderr=err)
        os.close(w)
        try:
            wait_until(lambda: _blocked_writing_stdout(verify.pid) or verify.poll() is not None,
                       timeout=60, what="epochfs verify done with the objects")
            assert verify.poll() is None, (tmp_path / "verify.err").read_text()

            # The trainer: every sample of epoch 0 but the damaged one, read through the mount.
            read = [k for k in keys if k != victim_key]
            nbytes = sum(len((epoch / k).read_bytes()) for k in read)
            # A fence: a sparse file of 1 TiB moved into a watched folder and opened. Opens are read
            # in the order they were made, so once its bytes are counted every open before it (the
            # scrub's, verify's, the trainer's) has been looked at.
            with open(tmp_path / "fence", "wb") as f:
                f.truncate(FENCE)
            fence = car.cache / "objects" / "ff" / "fence"
            os.rename(tmp_path / "fence", fence)  # no open: a rename
            fence.open("rb").close()
            wait_until(lambda: (car.metric("epochfs_served_bytes_total") or 0) >= FENCE,
                       timeout=30, what="the fence's open counted")
            fence.unlink()
            # The damaging open, the trainer's and the fence's: nothing of the scrub nor of verify.
            assert car.metric("epochfs_served_samples_total") == 1 + len(read) + 1
            assert car.metric("epochfs_served_bytes_total") == victim_size + nbytes + FENCE
        finally:
            if verify.poll() is None and not _blocked_writing_stdout(verify.pid):
                verify.send_signal(signal.SIGKILL)
            with os.fdopen(r, "rb") as out:
                report = out.read()  # the filler, then the report, until verify exits
            verify.wait(timeout=60)
        assert verify.returncode == 0, (tmp_path / "verify.err").read_text()
        assert b"damaged, " in report


def test_own_processes_are_the_descendants_and_epochfs_commands() -> None:
    own = OwnProcesses()
    assert not own.ours(os.getpid()), "the watcher's own process may be a reader (a benchmark)"
    assert not own.ours(0), "a process of another PID namespace (a trainer container's) counts"
    assert not own.ours(os.getppid()), "nor its parent"
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert own.ours(child.pid), "a child (the sampler, the FUSE server) is epochfs's"
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
    assert own.ours(child.pid), "opens it queued before it exited keep the verdict it had alive"
    assert own.exited() == {child.pid}
    own.forget({child.pid})
    assert not own.ours(child.pid), "an exited process nobody saw alive counts"


@pytest.mark.parametrize(("comm", "argv", "ours"), [
    ("epochfs", ["/venv/bin/python", "/venv/bin/epochfs", "verify", "--cache", "/c"], True),
    ("python", ["/venv/bin/python", "-P", "-m", "epochfs.sidecar.cli", "verify"], True),
    ("python3", ["python3", "-X", "dev", "-m", "epochfs.sidecar.cli", "status"], True),
    ("epochfs-listing", ["/venv/bin/python", "-P", "-c", "...", "123"], True),
    ("python", ["/venv/bin/python", "train.py", "--data", "/mnt/epochfs"], False),
    ("python", ["python", "-m", "epochfs.benchmarks.loader"], False),
    ("python", ["python", "-c", "import epochfs", "-m", "epochfs.sidecar.cli"], False),
    ("pt_main_thread", ["torchrun", "--nproc-per-node", "8", "train.py"], False),
])
def test_epochfs_commands_are_told_by_their_name_and_command_line(
        comm: str, argv: list[str], ours: bool) -> None:
    assert is_epochfs_command(comm, argv) is ours
