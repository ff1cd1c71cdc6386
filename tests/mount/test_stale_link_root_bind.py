"""A read-only bind of ``objects/`` is reused only while it shows ``objects/`` itself.

A bind holds the folder it was made of, not its path. Before, a server restarted after a kill -9
reused any live read-only mount at ``<cache>/objects-ro``: once ``objects/`` had been removed and
made again (what the sampler does after ``rm -rf objects``, repairing every sample into the new
folder), the bind left behind showed the deleted, empty folder, and every file of every epoch
answered ENOENT through the new server as through the old one ("reusing" in its log)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from fuse_helpers import EPOCHFS, admit, make_objects, mounted, open_store

from epochfs.fuse.mounting import find_mount, lazy_unmount, wait_for_mount

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]


def _cache_with_epoch_0(cache: Path, count: int) -> dict[str, str]:
    """A cache of ``count`` objects in epoch 0; the md5 of each file by name."""
    objects = make_objects(count, 64)
    with open_store(cache) as store:
        admit(store, objects)
        assert store.cut(0) == 0
    return {k.rsplit("/", 1)[1]: hashlib.md5(v).hexdigest() for k, v in objects.items()}


def _digests(root: Path) -> dict[str, str]:
    """The md5 of every file of epoch 0 by name; a file that cannot be read is named by its error."""
    out = {}
    for p in sorted((root / "epoch-0/train").iterdir()):
        try:
            out[p.name] = hashlib.md5(p.read_bytes()).hexdigest()
        except OSError as e:
            out[p.name] = f"error: {e.strerror}"
    return out


def bind_shows(objects: Path, bind: Path) -> bool:
    """``bind``'s root is the folder ``objects`` names now, still linked (not a deleted one)."""
    return os.path.samefile(bind, objects) and os.stat(bind).st_nlink > 0


def _replace_objects_folder(cache: Path) -> None:
    """Remove ``objects/`` and put the same files in a new folder of that name (the sampler's
    repair in place after ``rm -rf objects``, without the sampler)."""
    objects = cache / "objects"
    fresh = cache / "objects.new"
    shutil.copytree(objects, fresh)
    shutil.rmtree(objects)
    os.rename(fresh, objects)


def test_a_server_restarted_after_the_objects_folder_was_replaced_binds_the_new_one(
        tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    want = _cache_with_epoch_0(cache, 6)
    bind = cache / "objects-ro"
    mnt.mkdir()
    killed = subprocess.Popen([*EPOCHFS, "mount", "--cache", str(cache), "--mount", str(mnt)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for_mount(mnt, timeout=20, alive=lambda: killed.poll() is None), killed.poll()
        assert _digests(mnt) == want
    finally:
        killed.send_signal(signal.SIGKILL)  # leaves the bind (and a dead mount, which the next cleans)
        killed.wait(timeout=30)
    try:
        assert find_mount(bind) is not None, "the killed server left no bind to test with"
        _replace_objects_folder(cache)
        assert not bind_shows(cache / "objects", bind)
        with mounted(cache, mnt) as m:
            assert _digests(m.path) == want, "the restarted server reused the bind of the deleted folder"
            assert bind_shows(cache / "objects", bind)
            assert "reusing the read-only bind" not in m.log_text()
        assert find_mount(bind) is None, "the bind made again was left mounted"
    finally:
        for path in (mnt, bind):
            if find_mount(path) is not None:
                lazy_unmount(path, any_kind=True)


def test_a_live_bind_of_the_objects_folder_itself_is_reused(tmp_path: Path) -> None:
    """The check does not cost the ordinary restart its reuse: a bind left by a killed server
    that still shows ``objects/`` is kept (readers that opened files through it keep them)."""
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    want = _cache_with_epoch_0(cache, 3)
    bind = cache / "objects-ro"
    mnt.mkdir()
    killed = subprocess.Popen([*EPOCHFS, "mount", "--cache", str(cache), "--mount", str(mnt)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for_mount(mnt, timeout=20, alive=lambda: killed.poll() is None), killed.poll()
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
    try:
        assert bind_shows(cache / "objects", bind)
        with mounted(cache, mnt) as m:
            assert _digests(m.path) == want
            assert "reusing the read-only bind" in m.log_text()
        assert find_mount(bind) is None
    finally:
        for path in (mnt, bind):
            if find_mount(path) is not None:
                lazy_unmount(path, any_kind=True)
