"""A file a writer still holds open in the mount-point folder keeps every byte when a FUSE restart
moves it aside (``fuse/strays.py``); the copy a move falls back to never leaves a file only in a
removed original.

The trainer opened its checkpoint in the bare folder of a restart's window and writes on after the
move. The move copied, then removed, where the cache is on another volume than the mount point (a
pod's case): the writes after the copy went to the removed file, lost, and the copy kept what was
there at the copy. Each case below puts the two folders on real volumes (tmpfs mounts) as a pod
has them, holds a file open across the move, writes after it, and reads what the move left.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
from pathlib import Path

import pytest
from inprocess import small_volume

from epochfs.fuse import strays
from epochfs.fuse.errors import MountError

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts tmpfs volumes (root)")


def _write_across_the_move(mount: Path, cache: Path) -> tuple[Path | None, int]:
    """Open ``mount/checkpoint.pt``, write half, move the strays, write the rest through the same
    descriptor; the folder the move made, and the file's inode before the move."""
    fd = os.open(mount / "checkpoint.pt", os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.write(fd, b"first half;")
        inode = os.fstat(fd).st_ino
        dest = strays.move_strays(mount, cache)
        os.write(fd, b"second half")
    finally:
        os.close(fd)
    assert os.listdir(mount) == [], "the folder is empty for the next mount"
    return dest, inode


def test_a_cache_on_another_volume_leaves_the_file_beside_the_mount_point_whole(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The pod's case: the view's folder on the shared volume, the cache on the node's."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with small_volume(tmp_path / "shared", "4m") as shared:
        mount = shared / "view"
        mount.mkdir()
        caplog.set_level(logging.WARNING, logger="epochfs.fuse")
        dest, inode = _write_across_the_move(mount, cache)
        assert dest is not None and dest.parent == shared / ".view.mount-strays", dest
        moved = dest / "checkpoint.pt"
        assert moved.read_bytes() == b"first half;second half"
        assert moved.stat().st_ino == inode, "renamed, not copied"
        assert not (cache / "mount-strays").exists(), "nothing left in the cache's folder"
        [line] = [r.getMessage() for r in caplog.records]
        assert f"moved aside to {dest}, not deleted" in line and "checkpoint.pt" in line, line


def test_a_mount_point_on_the_caches_volume_moves_into_the_caches_folder(tmp_path: Path) -> None:
    with small_volume(tmp_path / "node", "4m") as node:
        mount, cache = node / "view", node / "cache"
        mount.mkdir()
        cache.mkdir()
        dest, inode = _write_across_the_move(mount, cache)
        assert dest is not None and dest.parent == cache / "mount-strays", dest
        moved = dest / "checkpoint.pt"
        assert moved.read_bytes() == b"first half;second half"
        assert moved.stat().st_ino == inode
        assert not strays.beside(mount).exists()


def test_a_mount_point_that_is_a_volumes_root_waits_for_a_writer_to_close_then_copies(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """No rename reaches either place: the copy is all there is, and a file a writer holds open is
    not removed (its later writes would go to a removed file: lost). Nothing is copied while it is
    held (each restart, every two seconds or so, would copy it whole again); once its writer closes
    it, the next restart copies every byte. No empty folder is left where the renames were tried."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with small_volume(tmp_path / "view", "4m") as mount:
        (mount / "sub").mkdir()
        (mount / "sub" / "notes.txt").write_bytes(b"notes")
        caplog.set_level(logging.WARNING, logger="epochfs.fuse")
        fd = os.open(mount / "checkpoint.pt", os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            os.write(fd, b"first half;")
            for _ in range(2):
                with pytest.raises(MountError, match=r"checkpoint.pt is held open for writing by another "
                                                     r"process: nothing was moved"):
                    strays.move_strays(mount, cache)
            os.write(fd, b"second half")
        finally:
            os.close(fd)
        assert sorted(os.listdir(mount)) == ["checkpoint.pt", "sub"]
        assert not (cache / "mount-strays").exists(), "nothing copied while the writer held its file"
        dest = strays.move_strays(mount, cache)  # the next restart, the writer done
        assert dest is not None and dest.parent == cache / "mount-strays", dest
        assert os.listdir(mount) == []
        assert (dest / "checkpoint.pt").read_bytes() == b"first half;second half", "every byte"
        assert (dest / "sub" / "notes.txt").read_bytes() == b"notes"
        assert not strays.beside(mount).exists(), "no empty folder beside the mount point"
        line = caplog.records[-1].getMessage()
        assert f"copied to {dest}" in line, line
        assert "none of them open for writing in another process" in line, line


def test_an_empty_folder_moves_nothing(tmp_path: Path) -> None:
    (tmp_path / "view").mkdir()
    assert strays.move_strays(tmp_path / "view", tmp_path / "cache") is None
    assert os.listdir(tmp_path) == ["view"]


def test_an_entry_whose_removal_would_fail_is_refused_before_anything_is_copied(tmp_path: Path) -> None:
    """The copy path: a folder holding a plain file and an immutable one. Copied, then removed,
    the plain file went from the original and the copy of the folder was dropped when the
    immutable file stayed: the plain file was nowhere. Now nothing is copied or removed."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with small_volume(tmp_path / "view", "4m") as mount:
        (mount / "ckpt").mkdir()
        (mount / "ckpt" / "a").write_bytes(b"AAA")
        (mount / "ckpt" / "b").write_bytes(b"BBB")
        subprocess.run(["chattr", "+i", str(mount / "ckpt" / "b")], check=True)
        try:
            with pytest.raises(MountError, match=r"ckpt/b is immutable or append-only: nothing was moved"):
                strays.move_strays(mount, cache)
            assert (mount / "ckpt" / "a").read_bytes() == b"AAA"
            assert (mount / "ckpt" / "b").read_bytes() == b"BBB"
        finally:
            subprocess.run(["chattr", "-i", str(mount / "ckpt" / "b")], check=True)
        assert os.listdir(cache) == [], "no folder left for a copy that was not made"
        assert not strays.beside(mount).exists()
        assert strays.move_strays(mount, cache) is not None, "moved once it can be removed"
        assert sorted(p.name for p in (cache / "mount-strays").glob("*/ckpt/*")) == ["a", "b"]


def test_a_mount_below_an_entry_is_refused_and_its_volume_left_whole(tmp_path: Path) -> None:
    """A copy then a removal of a folder with a volume mounted in it emptied that volume, then
    failed on the mount point and dropped the copy."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with small_volume(tmp_path / "view", "4m") as mount:
        (mount / "sub").mkdir()
        with small_volume(mount / "sub" / "vol", "1m") as inner:
            (inner / "data").write_bytes(b"precious")
            with pytest.raises(MountError, match=r"sub/vol is a mount point: nothing was moved"):
                strays.move_strays(mount, cache)
            assert (inner / "data").read_bytes() == b"precious"
        assert os.listdir(cache) == []


def test_the_folders_made_are_open_to_the_writer_whatever_the_umask(tmp_path: Path) -> None:
    """The trainer (another user) reaches its moved file: the folders are 0755 under umask 077."""
    with small_volume(tmp_path / "shared", "4m") as shared:
        mount = shared / "view"
        mount.mkdir()
        (mount / "checkpoint.pt").write_bytes(b"x")
        old = os.umask(0o077)
        try:
            dest = strays.move_strays(mount, tmp_path / "cache-elsewhere")
        finally:
            os.umask(old)
        assert dest is not None and dest.parent == strays.beside(mount)
        assert [stat.S_IMODE(p.stat().st_mode) for p in (dest.parent, dest)] == [0o755, 0o755]
        assert not (tmp_path / "cache-elsewhere").exists(), "a missing cache folder is not made"
