"""The link root under a running sidecar: made again when ``objects/`` is, never left behind.

1. ``rm -rf <cache>/objects`` under a running sidecar: the sampler makes the folder again and
   repairs every sample into it, but the read-only bind ``objects-ro`` the epochs' symlinks point
   into kept the deleted folder (a bind holds a folder, not a path): every file of every epoch
   answered ENOENT for good while /healthz said ok. Now the supervisor's watch sees the bind's root
   is not ``objects/`` and makes it again; a ``--link-root`` it cannot make again fails /healthz.
2. kill -9 of the supervisor while its FUSE server waits to be restarted (killed a moment before)
   left the bind mounted: no server was left to remove it, and the supervisor removes it only on a
   clean stop. Now the supervisor removes it as soon as it finds the server dead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from sidecar_helpers import running_sidecar

from epochfs.fuse.mounting import find_mount, lazy_unmount
from epochfs.sidecar.store import Store

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

BUCKET = "data"


def _md5s(objects: dict[str, bytes]) -> dict[str, str]:
    return {k: hashlib.md5(v).hexdigest() for k, v in objects.items()}


def _epoch_0(mount: Path) -> dict[str, str]:
    """Every file of epoch 0 by its path in the epoch: its md5, or the error reading it gave."""
    root = mount / "epoch-0"
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_dir():
            continue
        try:
            out[str(p.relative_to(root))] = hashlib.md5(p.read_bytes()).hexdigest()
        except OSError as e:
            out[str(p.relative_to(root))] = f"error: {e.strerror}"
    return out


def _remove_objects_folder(cache: Path) -> None:
    """``rm -rf objects/`` in one step the sampler cannot race (it writes by path, into a folder
    that is then gone), then the files."""
    gone = cache / "objects.removed"
    os.rename(cache / "objects", gone)
    shutil.rmtree(gone)


def _processes_of(cache: Path) -> list[int]:
    """Live processes whose command line names ``cache`` (the supervisor and its children)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and str(cache).encode() in argv:
            pids.append(int(entry.name))
    return pids


def test_objects_folder_removed_under_a_running_sidecar_is_read_again_through_the_view(
        s3: S3Server, tmp_path: Path) -> None:
    objects = random_objects(30, 8 * 1024)
    put_objects(s3, BUCKET, objects)
    want = _md5s(objects)
    extra = ("--min-samples", "30", "--scrub-rate", "50M")
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=extra) as car:
        assert _epoch_0(car.mount) == want
        _remove_objects_folder(car.cache)
        # The scrub finds the samples gone, the sampler makes objects/ again and repairs them there.
        wait_until(lambda: _epoch_0(car.mount) == want, timeout=90,
                   what="every file of epoch 0 read through the view again")
        bind = car.cache / "objects-ro"
        assert os.path.samefile(bind, car.cache / "objects") and os.stat(bind).st_nlink > 0
        health = car.health()
        assert health["code"] == 200 and health["ok"] and "link_root" not in health, health


def test_a_link_root_that_no_longer_shows_the_objects_folder_fails_healthz(
        s3: S3Server, tmp_path: Path) -> None:
    """The user's ``--link-root`` (a read-only bind of ``objects/`` made here, as an operator
    would) is not the sidecar's to make again: /healthz says why it fails."""
    objects = random_objects(10, 4 * 1024)
    put_objects(s3, BUCKET, objects)
    cache, link_root = tmp_path / "cache", tmp_path / "ro"
    Store(cache, create=True).close()  # makes objects/, which the bind below shows
    link_root.mkdir()
    for cmd in (["mount", "--bind", str(cache / "objects"), str(link_root)],
                ["mount", "-o", "remount,bind,ro", str(link_root)]):
        subprocess.run(cmd, check=True, capture_output=True)
    try:
        extra = ("--min-samples", "10", "--scrub-rate", "50M", "--link-root", str(link_root))
        with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=extra) as car:
            assert _epoch_0(car.mount) == _md5s(objects)
            assert car.health()["code"] == 200
            _remove_objects_folder(cache)
            # Missing at first (its own reason), then made again by the sampler: a new folder the
            # operator's bind does not show.
            def names_link_root() -> dict[str, Any] | None:
                doc = car.health()
                return doc if str(link_root) in doc.get("link_root", "") else None
            doc = wait_until(names_link_root, timeout=60, what="/healthz naming the link root")
            assert doc["code"] == 503 and not doc["ok"], doc
            assert (cache / "objects").is_dir()
    finally:
        lazy_unmount(link_root, any_kind=True)


def test_kill_9_of_the_supervisor_while_its_fuse_server_is_down_leaves_no_bind(
        s3: S3Server, tmp_path: Path) -> None:
    put_objects(s3, BUCKET, random_objects(5, 4 * 1024))
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint,
                         extra=("--min-samples", "1"), expect_exit=-signal.SIGKILL) as car:
        bind = car.cache / "objects-ro"
        assert find_mount(bind) is not None
        server = car.child_pid("fuse")
        assert server is not None
        os.kill(server, signal.SIGKILL)
        # The supervisor found the server dead and detached its mount; the restart waits out its
        # backoff (0.5 s), and the supervisor is killed in it.
        wait_until(lambda: find_mount(car.mount) is None, timeout=10,
                   what="the supervisor detaching the dead server's mount")
        car.proc.kill()
        car.proc.wait()
        wait_until(lambda: not _processes_of(car.cache), timeout=30,
                   what="every process of the sidecar gone")
        assert find_mount(bind) is None, "the read-only bind outlived the sidecar"
