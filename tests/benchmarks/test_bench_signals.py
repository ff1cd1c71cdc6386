"""Signals and benchmarks: SIGTERM (``kill PID``, as a scheduler or a wrapper stops a job) makes a
benchmark clean up as Ctrl-C does, and ``epochfs bench`` counts a benchmark a signal ended as a
failure.

SIGTERM's default action skipped every ``finally``: the mount benchmark left its ``epochfs mount``
running (reparented to pid 1), its FUSE mount and read-only bind, and its scratch on disk. A
benchmark killed by a signal has a negative returncode, which ``epochfs bench`` took for success.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from bench_helpers import bench

from epochfs.benchmarks import harness
from epochfs.fuse.mounting import mount_table

needs_fuse = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                reason="the mount benchmark mounts: needs root and /dev/fuse")


def processes_naming(text: str) -> list[int]:
    """Processes whose command line mentions ``text`` (the benchmark's folder), this one aside."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def mounts_below(folder: Path) -> list[str]:
    return [m.mount_point for m in mount_table() if m.mount_point.startswith(str(folder) + os.sep)]


def stop_leftovers(folder: Path) -> None:
    """What a benchmark that did not clean up left (before the fix): its processes stopped by their
    ids (SIGTERM: an ``epochfs mount`` unmounts; SIGKILL past a minute), its mounts detached, its
    folder removed."""
    for pid in processes_naming(str(folder)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while (left := processes_naming(str(folder))) and time.monotonic() < deadline:
        time.sleep(0.1)  # not our children (reparented to pid 1): no wait() to block on
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    harness.unmount_below(folder)
    shutil.rmtree(folder, ignore_errors=True)


def test_a_benchmark_a_signal_ended_fails_epochfs_bench(tmp_path: Path) -> None:
    """A real benchmark process killed by SIGKILL as it starts (a sitecustomize on PYTHONPATH that
    kills only the benchmark's process, not ``epochfs bench`` itself)."""
    (tmp_path / "kill").mkdir()
    (tmp_path / "kill" / "sitecustomize.py").write_text(textwrap.dedent("""
        import os, signal
        if b"epochfs.benchmarks." in open("/proc/self/cmdline", "rb").read():
            os.kill(os.getpid(), signal.SIGKILL)
    """))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "kill")}
    result = bench("members_files", "--args", "--members", "100", cwd=tmp_path, env=env)
    assert result.returncode == 128 + signal.SIGKILL, result.stdout + result.stderr
    assert "epochfs bench: members_files was killed by SIGKILL" in result.stderr


ENTRY = """
import sys
from pathlib import Path
from epochfs.benchmarks import harness

def main() -> int:
    with harness.work_dir(Path(sys.argv[1])) as scratch, \\
            harness.running(["sleep", "1000"], what="sleep") as child:
        print(scratch, child.pid, flush=True)
        child.wait()
    return 0

harness.entry(main, "probe")
"""


def test_sigterm_runs_a_benchmarks_clean_up_and_fails_it(tmp_path: Path) -> None:
    """:func:`harness.entry`: the ``with`` blocks run on SIGTERM (the child stopped, the scratch
    removed), one line says so, and the status is 128 + SIGTERM."""
    parent = tmp_path / "dir"
    proc = subprocess.Popen([*harness.PYTHON, "-c", ENTRY, str(parent)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        scratch, child = proc.stdout.readline().split()
        assert Path(scratch).is_dir()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "probe: interrupted by SIGTERM" in err and "Traceback" not in err, err
    assert not Path(scratch).exists() and not parent.exists()
    assert not Path(f"/proc/{child}").exists()  # stopped and reaped by harness.running


@needs_fuse
def test_sigterm_to_the_mount_benchmark_leaves_nothing(tmp_path: Path) -> None:
    """The reviewer's case: ``kill PID`` while the mount benchmark reads through its mount."""
    work = tmp_path / "work"
    work.mkdir()
    cmd = [*harness.PYTHON, "-m", "epochfs.benchmarks.mount", "--dir", str(work), "--big", "1",
           "--small", "4", "--procs", "1", "--repeat", "100000", "--pace", "0", "--no-drop"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        harness.wait_ready(proc, lambda: any(harness.mounted(Path(m)) for m in mounts_below(work)),
                           what="the mount benchmark's mount", timeout=120)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + signal.SIGTERM, out + err
        assert "mount: interrupted by SIGTERM" in err, err
        assert mounts_below(work) == []
        assert processes_naming(str(work)) == []  # no orphaned epochfs mount
        assert list(work.iterdir()) == []  # the scratch removed; --dir itself kept
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stop_leftovers(work)

