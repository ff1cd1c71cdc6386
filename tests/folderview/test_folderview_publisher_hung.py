"""A hung folder-view publisher is found, killed and restarted; a busy or paused one is not.

The FUSE view's server is probed and remounted when it hangs; the folder view has no mount to
probe, and a publisher stopped (SIGSTOP here, standing for a write blocked on the folder's volume
or a deadlock) went unnoticed: ``epochfs_mounted`` stayed 1, ``/healthz`` 200, a cut was answered
``live`` and never appeared. The supervisor now calls a publisher hung when neither its
``status.json`` (rewritten every second) nor its CPU time moved for 30 s
(:mod:`epochfs.sidecar.supervisor.stall`); a step that writes a large epoch whole, or a pause on a
full volume, keeps running on the CPU and is left alone.

Real processes throughout: a real ``epochfs sidecar --view folder`` over a ``file://`` remote, a
real ``epochfs publish`` paused on a real full tmpfs, a real process that only computes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import random_objects, wait_until
from folderview_helpers import cut, fill_inodes, folder_sidecar, owned_dir, small_tmpfs, write_remote
from fuse_helpers import EPOCHFS, admit, make_objects, open_store
from sidecar_helpers import Sidecar

from epochfs.sidecar.store import Meta
from epochfs.sidecar.supervisor.stall import HUNG_AFTER, StallWatch, status_key
from epochfs.torchclient import layout

pytestmark = pytest.mark.skipif(os.geteuid() == 0 and not os.path.exists("/usr/bin/setpriv"),
                                reason="needs setpriv to drop root")


def state_of(pid: int) -> str | None:
    """``pid``'s state letter from /proc (``T``: stopped), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0].decode()
    except (OSError, IndexError):
        return None


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """``pid`` stopped (SIGSTOP) for the block, once the kernel shows it stopped; continued
    afterwards if it still exists (a failed test must not leave a stopped process behind)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: state_of(pid) == "T", timeout=10, what=f"pid {pid} stopped")
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def mounted_readings(car: Sidecar) -> Iterator[list[tuple[float, float | None]]]:
    """``epochfs_mounted`` as /metrics answers it, with when (monotonic) it was read, again and
    again on a thread for the block."""
    seen: list[tuple[float, float | None]] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.append((time.monotonic(), car.metric("epochfs_mounted")))

    t = threading.Thread(target=read)
    t.start()
    try:
        yield seen
    finally:
        done.set()
        t.join(timeout=30)


def publisher(car: Sidecar) -> dict[str, int]:
    return car.health()["children"]["publisher"]


@pytest.mark.long
def test_a_stopped_publisher_is_killed_restarted_and_publishes_the_cut_it_missed(tmp_path: Path) -> None:
    write_remote(tmp_path, random_objects(12, 2048, seed=3))
    with owned_dir() as base, folder_sidecar(base, tmp_path) as car:
        folder = car.mount
        status_file = folder / layout.CONTROL_DIR / layout.STATUS_NAME
        wait_until(lambda: car.metric("epochfs_mounted") == 1 and status_file.is_file(), timeout=30,
                   what="the folder view published")
        old = car.child_pid("publisher")
        assert old is not None, car.health()
        assert layout.list_epochs(folder) == []
        with mounted_readings(car) as seen, stopped(old):
            started = time.monotonic()
            code, doc = cut(car, "epoch=0")  # the store cuts it; the stopped publisher cannot show it
            assert code == 200 and doc["state"] == "live", doc
            wait_until(lambda: car.child_pid("publisher") not in (None, old), timeout=HUNG_AFTER + 30,
                       what="the hung publisher killed and restarted")
            took = time.monotonic() - started
            wait_until(lambda: 0 in layout.list_epochs(folder), timeout=30,
                       what="epoch 0, cut while the publisher was hung, published by the next one")
            wait_until(lambda: seen and seen[-1][1] == 1, timeout=30, what="epochfs_mounted 1 again")
        assert took >= HUNG_AFTER - 1, f"killed after {took:.1f} s, before {HUNG_AFTER} s without a sign"
        readings = [(at - started, v) for at, v in seen if v is not None]
        down = [at for at, v in readings if v == 0]
        assert down, f"epochfs_mounted never went to 0 while the publisher was hung: {readings[-5:]}"
        assert min(down) >= HUNG_AFTER - 1, f"epochfs_mounted 0 {min(down):.1f} s after the stop"
        assert readings[0][1] == 1 and readings[-1][1] == 1, readings[-5:]
        assert state_of(old) is None, "the hung publisher is gone"
        child = publisher(car)
        assert child["restarts"] == 1 and child["crashes"] == 0, child
        assert car.health()["code"] == 200
        assert os.readlink(folder / layout.LATEST_NAME) == "epoch-0"
        log = car.log_text()
        assert f"folder publisher pid {old} hung (status.json not rewritten and no CPU time used" in log, \
            log[-3000:]
        assert "publisher was killed by the supervisor after" in log and "a restart, not a crash" in log, \
            log[-3000:]


def watch_for(watch: StallWatch, pid: int, status: Path, seconds: float) -> list[float]:
    """Feed ``watch`` with ``pid`` and ``status`` as the supervisor's ticks do, for ``seconds``;
    returns the hung verdicts it gave (none expected)."""
    verdicts: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        stalled = watch.observe(pid, status_key(status), time.monotonic())
        if stalled is not None:
            verdicts.append(stalled)
        time.sleep(0.25)  # paces the readings as the supervisor's tick does; nothing waits on it
    return verdicts


def hung_within(watch: StallWatch, pid: int, status: Path, seconds: float) -> float:
    """Feed ``watch`` until it calls ``pid`` hung; the seconds it said."""
    return float(wait_until(lambda: watch.observe(pid, status_key(status), time.monotonic()), timeout=seconds,
                            interval=0.25, what=f"pid {pid} called hung"))


@pytest.mark.long
def test_a_busy_process_without_status_is_not_hung_and_a_stopped_one_is(tmp_path: Path) -> None:
    """A step that writes a large epoch whole rewrites no status.json for as long as it takes, but
    runs: here a process that only computes, its status.json never rewritten."""
    status = tmp_path / "status.json"
    status.write_text("{}")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        watch = StallWatch(after=2.0)
        assert watch_for(watch, busy.pid, status, 6.0) == []
        with stopped(busy.pid):
            assert hung_within(watch, busy.pid, status, 15.0) >= 2.0
    finally:
        busy.kill()
        busy.wait()


@pytest.mark.long
@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root)")
def test_a_publisher_paused_on_a_full_volume_is_not_hung_and_a_stopped_one_is(tmp_path: Path) -> None:
    """A pause (the folder's volume full) leaves status.json as it was on purpose; the publisher
    tries again every 2 s, so it is not hung; stopped during the pause, it is."""
    store = open_store(tmp_path / "cache", keep_epochs=3, in_use_seconds=1000.0)
    admit(store, make_objects(20, 100, prefix="train/a/"))
    store.cut(0)
    with small_tmpfs(tmp_path / "vol", size="4m", inodes=400) as vol:
        folder = vol / "view"
        status = folder / layout.CONTROL_DIR / layout.STATUS_NAME
        log = tmp_path / "publish.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([*EPOCHFS, "publish", "--cache", str(store.root), "--mount", str(folder)],
                                    stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: layout.list_epochs(folder) == [0] and status.is_file(), timeout=30,
                       what="epoch 0 and status.json published")
            fill_inodes(vol)
            admit(store, make_objects(60, 100, prefix="train/b/", start=20))
            assert store.cut(1) == 1
            wait_until(lambda: store.meta(Meta.PUBLISH_PAUSED) is not None, timeout=30,
                       what="the publisher's pause recorded")
            watch = StallWatch(after=5.0)  # over two of the pause's tries (every 2 s)
            before = status_key(status)
            assert watch_for(watch, proc.pid, status, 15.0) == []
            assert status_key(status) == before, "a paused publisher rewrote status.json"
            assert proc.poll() is None, log.read_text()[-3000:]
            assert store.meta(Meta.PUBLISH_PAUSED) is not None, "the pause ended: no test of it"
            with stopped(proc.pid):
                assert hung_within(watch, proc.pid, status, 30.0) >= 5.0
        finally:
            proc.kill()
            proc.wait()
            store.close()
