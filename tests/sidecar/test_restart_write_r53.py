"""A write during a FUSE restart never stops the sidecar, and is never hidden under the view.

kill -9 of the sidecar's FUSE server, then a trainer retrying ``open(MOUNT/checkpoint.pt,
O_CREAT|O_WRONLY)``: in the second or so before the restarted server mounted again, the write
landed in the bare mount-point folder, the restarted server then exited 2 on "--mount: ... is not
empty", the supervisor took that for a refusal of its settings and stopped, and every later start
refused the same folder: a CrashLoopBackOff for good. Now a restart moves whatever it finds there
aside (never deleted): renamed into ``<cache>/mount-strays/``, or beside the mount point where the
cache is on another volume (``pod_volume``: a pod whose containers mount the shared volume
writable; the chart's trainer mounts it read-only), so that a writer still holding its file open
keeps writing to it. An exit 2 of a server whose settings already served is a crash,
restarted (docs/sidecar.md, "Crashes").

Real processes throughout: the sidecar CLI against moto's S3 server, real FUSE and bind mounts.
"""

from __future__ import annotations

import collections
import errno
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from sidecar_helpers import Sidecar, running_sidecar

from epochfs.fuse import strays
from epochfs.fuse.mounting import canonical, find_mount, is_dead, mount_table

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

BUCKET = "data"
EXTRA = ("--min-samples", "5")


def mounts_at_or_under(path: Path) -> list[str]:
    """Every mount of any kind at or under ``path`` (what ``findmnt -R`` would list)."""
    target = canonical(path)
    return [f"{e.mount_point} ({e.fstype})" for e in mount_table()
            if e.mount_point == target or e.mount_point.startswith(target + "/")]


def fuse_child(sidecar_pid: int) -> int | None:
    """The sidecar's FUSE server, found among its children in /proc (its command ends ``mount``)."""
    for task in Path(f"/proc/{sidecar_pid}/task").iterdir():
        try:
            pids = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[-2:] == [b"mount", b""]:
                return int(pid)
    return None


def kill_fuse_child(car: Sidecar) -> int:
    """kill -9 of the sidecar's FUSE server; its pid."""
    server = fuse_child(car.proc.pid)
    assert server is not None, "no FUSE server among the sidecar's children"
    os.kill(server, signal.SIGKILL)
    return server


def mounted_again(car: Sidecar, killed: int) -> bool:
    """A server other than ``killed`` serves a live FUSE mount (or the sidecar is gone). Not told
    by the mount's id: the kernel gives the new mount the id the old one freed."""
    if car.proc.poll() is not None:
        return True
    server = fuse_child(car.proc.pid)
    entry = find_mount(car.mount)
    return (server not in (None, killed) and entry is not None and entry.fstype.startswith("fuse")
            and not is_dead(car.mount))


def gone(pid: int) -> bool:
    """No such process, or a zombie (it has exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@contextmanager
def underneath(folder: Path) -> Iterator[Path]:
    """``folder`` itself, writable, as it is under the mounts on it: reached through a bind of its
    parent made without submounts (how root reaches a folder hidden by a mount)."""
    peek = folder.parent / "peek"
    peek.mkdir(exist_ok=True)
    subprocess.run(["mount", "--bind", str(folder.parent), str(peek)], check=True, capture_output=True)
    try:
        yield peek / folder.name
    finally:
        subprocess.run(["umount", "-l", str(peek)], check=True, capture_output=True)
        peek.rmdir()


@contextmanager
def pod_volume(tmp_path: Path, *, trainer_read_only: bool = False) -> Iterator[tuple[Path, Path]]:
    """A pod's shared volume: ``vol`` shared (the sidecar's, propagation Bidirectional),
    ``trainer`` a slave bind of it (the trainer's, HostToContainer), read-only with
    ``trainer_read_only`` as the chart mounts it (``epochfs.trainerVolumeMounts``). Yields the
    view's mount point in the sidecar's volume and the same folder as the trainer sees it."""
    vol, trainer = tmp_path / "vol", tmp_path / "trainer"
    vol.mkdir()
    trainer.mkdir()
    steps = [["mount", "--bind", str(vol), str(vol)], ["mount", "--make-shared", str(vol)],
             ["mount", "--bind", str(vol), str(trainer)], ["mount", "--make-slave", str(trainer)]]
    if trainer_read_only:
        steps.append(["mount", "-o", "remount,bind,ro", str(trainer)])
    try:
        for cmd in steps:
            subprocess.run(cmd, check=True, capture_output=True)
        yield vol / "view", trainer / "view"
    finally:
        for place in (trainer, vol):
            subprocess.run(["umount", "-l", str(place)], capture_output=True)


def test_the_charts_read_only_trainer_cannot_write_in_the_window(s3: S3Server, tmp_path: Path) -> None:
    """With the chart the trainer mounts the shared volume read-only: its writes in the restart's
    window fail (EROFS, or ENOTCONN while the dead mount is still seen), nothing lands in the bare
    folder, nothing is moved aside, and the view comes back (docs/sidecar.md, "Crashes")."""
    put_objects(s3, BUCKET, random_objects(5, 4 * 1024))
    with pod_volume(tmp_path, trainer_read_only=True) as (mount, seen), running_sidecar(
            tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=EXTRA, mount=mount) as car:
        assert ".epochfs" in os.listdir(seen), "the trainer does not see the view"
        killed = kill_fuse_child(car)
        outcomes: collections.Counter[str] = collections.Counter()
        deadline = time.monotonic() + 60
        while not mounted_again(car, killed):
            assert time.monotonic() < deadline, f"no new mount within 60 s: {outcomes}"
            try:
                os.close(os.open(seen / "checkpoint.pt", os.O_CREAT | os.O_WRONLY, 0o644))
            except OSError as e:
                outcomes[errno.errorcode.get(e.errno or 0, str(e.errno))] += 1
                continue
            outcomes["written"] += 1
        print(f"write outcomes during the restart: {dict(outcomes)}")
        assert not outcomes["written"] and outcomes["EROFS"] > 0, outcomes
        wait_until(lambda: car.get("/readyz")[0] == 200, timeout=60, what="/readyz after the restart")
        with underneath(car.mount) as folder:
            assert os.listdir(folder) == []
        assert not strays.beside(mount).exists() and not (car.cache / "mount-strays").exists()
        assert "moved aside" not in car.log_text()
        assert ".epochfs" in os.listdir(seen), "the trainer does not see the view again"
    assert mounts_at_or_under(seen) == [], "the clean stop left a mount in the trainer's copy"


@pytest.mark.parametrize("where", ["sidecar", "trainer"])
def test_a_write_during_a_fuse_restart_is_moved_aside_and_the_sidecar_mounts_again(
        s3: S3Server, tmp_path: Path, where: str) -> None:
    """``trainer``: the write goes through the trainer container's copy of a shared volume (mount
    propagation). The writer retries until a write succeeds, as a trainer's checkpoint does."""
    put_objects(s3, BUCKET, random_objects(5, 4 * 1024))
    with pod_volume(tmp_path) as (mount, seen), running_sidecar(
            tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=EXTRA, mount=mount) as car:
        target = (seen if where == "trainer" else mount) / "checkpoint.pt"
        assert ".epochfs" in os.listdir(seen), "the trainer does not see the view"
        killed = kill_fuse_child(car)
        outcomes: collections.Counter[str] = collections.Counter()
        deadline = time.monotonic() + 60
        while not mounted_again(car, killed) and not outcomes["written"]:
            assert time.monotonic() < deadline, f"no new mount within 60 s: {outcomes}"
            try:
                fd = os.open(target, os.O_CREAT | os.O_WRONLY, 0o644)
            except OSError as e:
                outcomes[errno.errorcode.get(e.errno or 0, str(e.errno))] += 1
                continue
            os.write(fd, b"x")
            os.close(fd)
            outcomes["written"] += 1
        print(f"write outcomes during the restart: {dict(outcomes)}")
        wait_until(lambda: car.get("/readyz")[0] == 200 or car.proc.poll() is not None, timeout=60,
                   what="/readyz after the restart")
        assert car.proc.poll() is None, f"the sidecar stopped: {car.log_text()[-3000:]}"
        assert "refused its settings" not in car.log_text()
        with underneath(car.mount) as folder:
            assert os.listdir(folder) == [], "something was hidden under the view"
        if outcomes["written"]:  # landed in the bare folder: moved aside by the next restart
            # Renamed beside the mount point (another volume than the cache's), even where the
            # writer wrote after the move: a copy kept what it found (an empty file) then.
            moved = list(strays.beside(mount).glob("*/checkpoint.pt"))
            assert [p.read_bytes() for p in moved] == [b"x"], moved
            assert not (car.cache / "mount-strays").exists()
        assert ".epochfs" in os.listdir(seen), "the trainer does not see the view again"
        assert mounts_at_or_under(car.mount) != []
    assert mounts_at_or_under(car.mount) == [], "the clean stop left a mount behind"
    assert mounts_at_or_under(seen) == [], "the clean stop left a mount in the trainer's copy"


def test_a_restart_moves_what_it_finds_in_the_mount_point_aside_and_serves_on(
        s3: S3Server, tmp_path: Path) -> None:
    """The folder made not empty under the running view (as a write in a restart's window does):
    the next restart moves the entry into ``<cache>/mount-strays/`` instead of refusing the folder
    for good."""
    put_objects(s3, BUCKET, random_objects(5, 4 * 1024))
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=EXTRA) as car:
        with underneath(car.mount) as folder:
            (folder / "checkpoint.pt").write_bytes(b"weights")
        killed = kill_fuse_child(car)
        wait_until(lambda: mounted_again(car, killed), timeout=60, what="a new FUSE mount")
        assert car.proc.poll() is None, f"the sidecar stopped: {car.log_text()[-3000:]}"
        wait_until(lambda: car.get("/readyz")[0] == 200, timeout=30, what="/readyz after the restart")
        moved = list((car.cache / "mount-strays").glob("*/checkpoint.pt"))
        assert [p.read_bytes() for p in moved] == [b"weights"], moved
        with underneath(car.mount) as folder:
            assert os.listdir(folder) == []
        assert "moved aside to" in car.log_text()
    assert mounts_at_or_under(car.mount) == [], "the clean stop left a mount behind"


@pytest.mark.long
def test_a_restart_that_exits_2_is_a_crash_restarted_never_a_stop(
        s3: S3Server, tmp_path: Path) -> None:
    """A stray that cannot be moved (immutable): every restart exits 2 on the folder "not empty".
    Those settings served before, so each exit is a crash, restarted with backoff, never a
    refusal that stops the sidecar; once the stray can move, the next restart mounts again."""
    put_objects(s3, BUCKET, random_objects(5, 4 * 1024))
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=EXTRA) as car:
        with underneath(car.mount) as folder:
            (folder / "pinned").write_bytes(b"x")
            subprocess.run(["chattr", "+i", str(folder / "pinned")], check=True, capture_output=True)
        try:
            killed = kill_fuse_child(car)
            wait_until(lambda: car.log_text().count("fuse exited with status 2") >= 2
                       or car.proc.poll() is not None, timeout=60,
                       what="two restarts refusing the folder, each restarted")
            assert car.proc.poll() is None, f"the sidecar stopped: {car.log_text()[-3000:]}"
            assert "refused its settings" not in car.log_text()
            assert list((car.cache / "mount-strays").glob("*/pinned")) == []  # no copy per try
        finally:
            with underneath(car.mount) as folder:
                subprocess.run(["chattr", "-i", str(folder / "pinned")], check=True, capture_output=True)
        wait_until(lambda: mounted_again(car, killed), timeout=60, what="a new FUSE mount")
        assert car.proc.poll() is None, f"the sidecar stopped: {car.log_text()[-3000:]}"
        assert [p.read_bytes() for p in (car.cache / "mount-strays").glob("*/pinned")] == [b"x"]
    assert mounts_at_or_under(car.mount) == [], "the clean stop left a mount behind"
