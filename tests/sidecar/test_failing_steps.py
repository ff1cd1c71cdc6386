"""The supervisor survives a step that fails for the node's reasons, not its own.

Two failures a real node gives, each under a real ``epochfs sidecar``:

* the cache's volume goes read-only under it (ext4 ``errors=remount-ro``, made here with a
  read-only bind over the cache folder): the sampler exits 1, a crash, and the supervisor's removal
  of its metric files (on that volume) fails too. Before, that removal's ``OSError`` ended the
  supervisor with a traceback and the mount went with it; now the sampler is restarted with
  backoff (its crashes counted in ``/healthz``), the mount serves on, and the sampler says why in
  lines, not tracebacks from its temp files' removal.
* a process or thread cannot be had (a pod's pids limit, reached by the trainer's DataLoader
  workers; a pids cgroup at 0 here): a child's restart fails with ``EAGAIN`` and the mount's probe
  cannot start its thread. Before, that ended the supervisor; now both are logged and tried again,
  and the children come back once the limit is lifted.

And, in process, a start whose process came up but whose log thread could not: the process is
killed and waited for (no child runs unwatched) and the start is tried again after the backoff.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from sidecar_helpers import Sidecar, running_sidecar

from epochfs.sidecar.store import Store
from epochfs.sidecar.supervisor.children import Child, ChildProcesses

BUCKET = "bkt"
PIDS_ROOT = Path("/sys/fs/cgroup/pids")  # cgroup v1's pids hierarchy (this image's layout)

needs_root_fuse = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                     reason="needs root and FUSE")
needs_pids_cgroup = pytest.mark.skipif(os.geteuid() != 0 or not (PIDS_ROOT / "cgroup.procs").exists(),
                                       reason="needs root and a cgroup v1 pids hierarchy")


def _serves(car: Sidecar, objects: dict[str, bytes]) -> bool:
    """The mount answers: a file of its newest epoch (epoch 0 before any is cut: its lookup cuts
    it) reads as the remote object. False while the epoch has no file yet."""
    latest = car.mount / "latest"
    root = car.mount / (os.readlink(latest) if latest.is_symlink() else "epoch-0")
    files = sorted(p for p in root.rglob("*") if p.is_file())
    if not files:
        return False
    assert files[0].read_bytes() == objects[str(files[0].relative_to(root))]
    return True


def _remount_read_only(folder: Path) -> bool:
    done = subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True, text=True)
    if done.returncode != 0 and "busy" not in done.stderr:
        raise RuntimeError(f"remount read-only: {done.stderr.strip()}")
    return done.returncode == 0


@contextlib.contextmanager
def _read_only(folder: Path) -> Iterator[None]:
    """``folder`` read-only for every process that reaches it by its path, as a volume remounted
    read-only is (the read-only bind of ``objects/`` under it is carried along: --rbind)."""
    subprocess.run(["mount", "--rbind", str(folder), str(folder)], check=True)
    try:
        # The kernel refuses to make a mount read-only while a file is open for writing through it
        # (EBUSY, "mount point is busy"): the sampler's downloads write through the new bind from
        # the moment it exists, so the remount is tried until it finds a moment between two.
        wait_until(lambda: _remount_read_only(folder), timeout=60, what="the cache remounted read-only")
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.mark.long
@needs_root_fuse
def test_a_cache_volume_gone_read_only_keeps_the_supervisor_and_the_mount(
        s3: S3Server, tmp_path: Path) -> None:
    objects = random_objects(200, 64 * 1024)
    put_objects(s3, BUCKET, objects)
    # 256 KiB/s: the 12.5 MiB take 50 s, so objects are left to fetch once the volume is back
    # (at 1 MiB/s a loaded machine's slow first mount let the sampler finish before it went
    # read-only, and "fetching again" never came).
    extra = ("--capacity", "40Mi", "--min-samples", "5", "--concurrency", "8", "--max-rate", "256Ki",
             "--cut-interval", "1", "--keep-epochs", "2")
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=extra) as car:
        wait_until(lambda: _serves(car, objects), timeout=60, what="a file through the mount")
        with _read_only(car.cache):
            def crashes() -> int:
                assert car.proc.poll() is None, f"supervisor exited {car.proc.returncode}"
                return int(car.health().get("children", {}).get("sampler", {}).get("crashes", 0))

            wait_until(lambda: crashes() >= 2, timeout=90, what="two sampler crashes on the read-only volume")
            health = car.health()
            assert health["children"]["fuse"]["alive"], health
            assert health["mount"] == "ok", health
            assert _serves(car, objects)  # through the read-only bind of objects/
            log = car.log_text()
            assert "could not remove the metric files of exited pid" in log
            # The sampler's temps it could not remove: a line each, no traceback over the cause.
            assert "sampler/admitter.py" not in log and "in _shutdown" not in log, log[-5000:]
            assert "Exception in thread" not in log, log[-5000:]
            # Reported as the crash loop it is: /healthz fails after five (the pod's liveness).
            wait_until(lambda: crashes() >= 5 and car.health()["code"] == 503, timeout=90,
                       what="/healthz failing after five crashes")
            assert _serves(car, objects)
        # The volume back: the sampler runs and fetches again; the sidecar stops cleanly
        # (running_sidecar checks the exit status and that nothing is left mounted).
        before = samples(car.cache)
        wait_until(lambda: samples(car.cache) > before, timeout=90, what="the sampler fetching again")
        assert car.health()["code"] == 200


def samples(cache: Path) -> int:
    with Store(cache) as store:
        return store.stats().samples


def _move(pid: int, cgroup: Path) -> None:
    (cgroup / "cgroup.procs").write_text(f"{pid}\n")


@contextlib.contextmanager
def _pids_cgroup() -> Iterator[Path]:
    """A pids cgroup of its own; on the way out, whatever is left in it goes back to the root."""
    cgroup = PIDS_ROOT / f"epochfs-test-{uuid.uuid4().hex[:8]}"
    cgroup.mkdir()
    try:
        yield cgroup
    finally:
        (cgroup / "pids.max").write_text("max\n")
        for pid in (cgroup / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError, OSError):
                _move(int(pid), PIDS_ROOT)
        cgroup.rmdir()


def _log_has(car: Sidecar, text: str) -> bool:
    assert car.proc.poll() is None, f"supervisor exited {car.proc.returncode}:\n{car.log_text()[-5000:]}"
    return text in car.log_text()


@needs_root_fuse
@needs_pids_cgroup
def test_a_pids_limit_reached_delays_restarts_and_keeps_the_supervisor(
        s3: S3Server, tmp_path: Path) -> None:
    objects = random_objects(40, 16 * 1024)
    put_objects(s3, BUCKET, objects)
    extra = ("--capacity", "40Mi", "--min-samples", "5")
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=extra) as car:
        wait_until(lambda: _serves(car, objects), timeout=60, what="a file through the mount")
        sampler, fuse = car.child_pid("sampler"), car.child_pid("fuse")
        assert sampler is not None and fuse is not None
        with _pids_cgroup() as cgroup:
            # The supervisor alone, at a limit of 0: no fork, no thread (its children run on).
            (cgroup / "pids.max").write_text("0\n")
            _move(car.proc.pid, cgroup)
            os.kill(sampler, signal.SIGKILL)
            wait_until(lambda: _log_has(car, "could not start sampler"), timeout=30,
                       what="the sampler's restart refused")
            # The FUSE server's probe needs a thread: tried again each tick, the supervisor on.
            wait_until(lambda: _log_has(car, "watch_mount failed"), timeout=30,
                       what="the mount probe without a thread")
            os.kill(fuse, signal.SIGKILL)
            wait_until(lambda: _log_has(car, "could not start fuse"), timeout=30,
                       what="the FUSE server's restart refused")
            assert car.proc.poll() is None
            (cgroup / "pids.max").write_text("max\n")  # the trainer's workers gone
            wait_until(lambda: car.get("/readyz")[0] == 200 and car.child_pid("fuse") not in (None, fuse)
                       and car.child_pid("sampler") not in (None, sampler),
                       timeout=60, what="both children started again")
        assert _serves(car, objects)
        assert car.health()["code"] == 200


class _Children(ChildProcesses):
    """The supervisor's child-process part alone, in this process."""

    def __init__(self, cache: Path) -> None:
        self.python = sys.executable
        self.log_level = "INFO"
        self.cache = cache
        self.sink = io.StringIO()
        self._stop = threading.Event()
        self._children_lock = threading.RLock()
        self._multiproc_dir = None
        self._metrics = None


@needs_pids_cgroup
def test_a_start_without_its_log_thread_leaves_no_child_and_is_tried_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    children = _Children(tmp_path)
    child = Child("sampler", ["status", "--cache", str(tmp_path)], {})
    with _pids_cgroup() as cgroup:
        _move(os.getpid(), cgroup)
        try:
            # Room for one task more: the child process, and then no thread for its log.
            current = int((cgroup / "pids.current").read_text())
            (cgroup / "pids.max").write_text(f"{current + 1}\n")
            children._restart_due(child)
            assert child.proc is None and child.restarts == 0
            assert child.next_start > time.monotonic() - 1 and child.backoff == ChildProcesses.BACKOFF_MIN
            killed = re.search(r"no thread to read its log .*; killed its process (\d+)", caplog.text)
            assert killed is not None, caplog.text
            with pytest.raises(ChildProcessError):  # killed and waited for: not a child of ours now
                os.waitpid(int(killed[1]), os.WNOHANG)
        finally:
            _move(os.getpid(), PIDS_ROOT)
    wait_until(lambda: time.monotonic() >= child.next_start, what="the backoff")
    children._restart_due(child)
    try:
        assert child.proc is not None and child.restarts == 1
    finally:
        children._terminate(child, timeout=10)
