"""``epochfs unmount --mount DIR`` cleans what a killed server left: the view and the cache's
read-only bind (review r54).

After a kill -9 of ``epochfs mount``, ``epochfs unmount`` removed the dead view but left
``<cache>/objects-ro`` (the bind the server makes of ``objects/``) mounted, so ``rm -rf <cache>``
deleted the objects and then failed with "Device or resource busy"; the README says unmount
"cleans a stale mount". It now finds the cache from the view's mount table entry
(``epochfs:<cache>``) and removes the bind unless another view of the cache is mounted (the
server's own rule at its exit), which then keeps reading through it. Real mounts, real SIGKILL.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuse_helpers import EPOCHFS, admit, make_objects, mounted, open_store

from epochfs.fuse.mounting import find_mount, lazy_unmount, wait_for_mount

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]


def _cache(cache: Path) -> dict[str, bytes]:
    """A cache of six objects in epoch 0; their bytes by file name."""
    objects = make_objects(6, 64)
    with open_store(cache) as store:
        admit(store, objects)
        assert store.cut(0) == 0
    return {k.rsplit("/", 1)[1]: v for k, v in objects.items()}


def _files(view: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((view / "epoch-0/train").iterdir())}


def _killed_view(cache: Path, mnt: Path) -> None:
    """Serve ``cache`` at ``mnt``, read it, and kill the server with SIGKILL: it leaves a dead
    view at ``mnt`` and the read-only bind under the cache."""
    mnt.mkdir(exist_ok=True)
    proc = subprocess.Popen([*EPOCHFS, "mount", "--cache", str(cache), "--mount", str(mnt)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for_mount(mnt, timeout=30, alive=lambda: proc.poll() is None), proc.poll()
        assert _files(mnt)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


def _unmount(mnt: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EPOCHFS, "unmount", "--mount", str(mnt)], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def leftovers(tmp_path: Path) -> Iterator[list[Path]]:
    """Mount points to take down at the end should a test fail half-way (views first)."""
    places: list[Path] = []
    yield places
    for place in places:
        if find_mount(place) is not None:
            lazy_unmount(place, any_kind=True)


@pytest.mark.parametrize("through_symlink", [False, True], ids=["cache", "cache-via-symlink"])
def test_unmount_after_a_kill_9_removes_the_objects_bind(tmp_path: Path, leftovers: list[Path],
                                                         through_symlink: bool) -> None:
    real, mnt = tmp_path / "cache", tmp_path / "mnt"
    _cache(real)
    cache = real
    if through_symlink:  # the view names the real path; the bind is made there too
        cache = tmp_path / "link"
        cache.symlink_to(real)
    bind = real / "objects-ro"
    leftovers.extend([mnt, bind])
    _killed_view(cache, mnt)
    assert find_mount(bind) is not None, "the killed server left no bind to test with"
    done = _unmount(mnt)
    assert done.returncode == 0, done.stdout + done.stderr
    assert find_mount(mnt) is None, done.stdout
    assert find_mount(bind) is None, done.stdout
    assert f"unmounted the read-only bind {bind}" in done.stdout, done.stdout
    shutil.rmtree(real)  # raised OSError(EBUSY) on objects-ro before


def test_unmount_leaves_the_bind_another_live_view_reads_through(tmp_path: Path,
                                                                 leftovers: list[Path]) -> None:
    cache, killed, live = tmp_path / "cache", tmp_path / "killed", tmp_path / "live"
    want = _cache(cache)
    bind = cache / "objects-ro"
    leftovers.extend([killed, live, bind])
    _killed_view(cache, killed)
    with mounted(cache, live):  # reuses the bind the killed server left
        done = _unmount(killed)
        assert done.returncode == 0, done.stdout + done.stderr
        assert find_mount(killed) is None, done.stdout
        assert find_mount(bind) is not None, done.stdout
        assert f"the view at {live} reads through it" in done.stdout, done.stdout
        assert _files(live) == want
