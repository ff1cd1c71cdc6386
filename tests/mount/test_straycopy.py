"""The copy a FUSE restart's move of strays falls back to (``fuse/straycopy.py``): only what was
copied is removed, and what cannot be copied then removed is refused before anything is copied.

The mount point is the root of a volume of its own (a tmpfs), so no rename reaches the cache's
folder or a folder beside it, as in the case the copy exists for. A writer's change between the
copy and the removal is made at that moment by wrapping the copy (the race, made certain).
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from common import wait_until
from inprocess import small_volume

from epochfs.fuse import straycopy, strays, writers
from epochfs.fuse.errors import MountError

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts tmpfs volumes (root)")


def _after_copying(path: Path, then: Callable[[], None]) -> Callable[..., Any]:
    """``os.sendfile`` (the copy's steps) that calls ``then`` once, after the first step of the
    copy of the file now at ``path``: a change made at that moment, during its copy."""
    inode = path.stat().st_ino
    sendfile = os.sendfile
    done: list[bool] = []

    def step(out_fd: int, in_fd: int, *args: Any) -> int:
        sent = sendfile(out_fd, in_fd, *args)
        if not done and os.fstat(in_fd).st_ino == inode:
            done.append(True)
            then()
        return sent
    return step


def test_a_checkpoint_saved_again_between_its_copy_and_its_removal_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer saves its checkpoint again by rename (write a temp, rename it over) while the old
    one is copied: the new one was removed with the old one's name, and was nowhere."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with small_volume(tmp_path / "view", "4m") as mount:
        (mount / "ckpt.pt").write_bytes(b"OLD")

        def save_again() -> None:
            (mount / "ckpt.tmp").write_bytes(b"NEW")
            os.rename(mount / "ckpt.tmp", mount / "ckpt.pt")

        monkeypatch.setattr(os, "sendfile", _after_copying(mount / "ckpt.pt", save_again))
        with pytest.raises(MountError, match=r"ckpt.pt \(changed while it was copied\): left in place"):
            strays.move_strays(mount, cache)
        assert (mount / "ckpt.pt").read_bytes() == b"NEW", "the new save stays for the next restart"
        assert not (cache / "mount-strays").exists(), "the old one's copy dropped: the new one is in place"


def test_a_file_added_to_a_folder_while_it_is_copied_stays_with_its_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    with small_volume(tmp_path / "view", "4m") as mount:
        (mount / "run1").mkdir()
        (mount / "run1" / "early.pt").write_bytes(b"early")
        monkeypatch.setattr(os, "sendfile", _after_copying(
            mount / "run1" / "early.pt", lambda: (mount / "run1" / "late.pt").write_bytes(b"late")))
        with pytest.raises(MountError, match=r"run1 \(changed while it was copied\)"):
            strays.move_strays(mount, cache)
        assert os.listdir(mount / "run1") == ["late.pt"], "only what was copied is removed"
        assert (mount / "run1" / "late.pt").read_bytes() == b"late"
        [copy] = (cache / "mount-strays").glob("*/run1")
        assert os.listdir(copy) == ["early.pt"]


def test_a_volume_gone_read_only_is_refused_before_anything_is_copied(tmp_path: Path) -> None:
    """Every restart copied the first entry again, then failed to remove it."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with small_volume(tmp_path / "view", "4m") as mount:
        (mount / "a").write_bytes(b"a")
        (mount / "b").write_bytes(b"b")
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        for _ in range(2):
            with pytest.raises(MountError, match=r"is on a read-only volume: nothing was moved"):
                strays.move_strays(mount, cache)
        assert os.listdir(cache) == [], "no copy, no folder"
        assert sorted(os.listdir(mount)) == ["a", "b"]


def test_entries_larger_than_half_the_caches_free_room_are_refused(tmp_path: Path) -> None:
    """A sparse file is copied whole: a 64 MiB one filled a 16 MiB cache volume, the sampler's too."""
    with small_volume(tmp_path / "node", "16m") as node, small_volume(tmp_path / "view", "4m") as mount:
        cache = node / "cache"
        cache.mkdir()
        with open(mount / "sparse.bin", "wb") as f:
            f.truncate(64 << 20)
        with pytest.raises(MountError, match=r"more than half of the \d+ bytes free on the cache's volume"):
            strays.move_strays(mount, cache)
        assert os.listdir(cache) == []
        assert os.listdir(mount) == ["sparse.bin"]


def test_flags_are_read_where_a_file_system_keeps_them(tmp_path: Path) -> None:
    with small_volume(tmp_path / "vol", "1m") as vol:
        (vol / "f").write_bytes(b"x")
        assert straycopy._flags(str(vol / "f")) & 0x10 == 0
        subprocess.run(["chattr", "+i", str(vol / "f")], check=True)
        try:
            assert straycopy._flags(str(vol / "f")) & 0x10, "FS_IMMUTABLE_FL read back"
        finally:
            subprocess.run(["chattr", "-i", str(vol / "f")], check=True)


def _wait_for_a_lease_break() -> None:
    wait_until(lambda: "BREAK" in Path("/proc/locks").read_text(), timeout=10,
               what="the writer's open waiting on the lease")


@pytest.mark.parametrize("links", ["hard links", "no hard link"])
def test_a_save_by_rename_between_the_last_look_and_the_removal_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, links: str) -> None:
    """A rename does not break a lease: a checkpoint saved again by rename right after the last
    look at the old one was what a removal by its name removed, never copied (made certain by
    saving as the file is moved aside). It goes back to its name also where no hard link can be
    made (``protected_hardlinks`` refuses one to another user's file)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with small_volume(tmp_path / "view", "4m") as mount:
        (mount / "ckpt.pt").write_bytes(b"OLD")
        rename = os.rename

        def save_again_first(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            if str(dst).endswith(".aside") and not (mount / "saved").exists():
                (mount / "saved").mkdir()
                (mount / "saved" / "ckpt.tmp").write_bytes(b"NEW SAVE")
                rename(mount / "saved" / "ckpt.tmp", mount / "ckpt.pt")
                (mount / "saved").rmdir()
            rename(src, dst, *args, **kwargs)

        def no_hard_link(*args: Any, **kwargs: Any) -> None:
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr(os, "rename", save_again_first)
        if links == "no hard link":
            monkeypatch.setattr(os, "link", no_hard_link)
        with pytest.raises(MountError, match=r"ckpt.pt \(changed while it was copied\)"):
            strays.move_strays(mount, cache)
        assert os.listdir(mount) == ["ckpt.pt"]
        assert (mount / "ckpt.pt").read_bytes() == b"NEW SAVE", "the new save put back at its name"


@pytest.mark.parametrize("moment", ["during its copy", "as it is moved aside"])
def test_a_writer_that_opens_a_file_during_its_move_keeps_it_in_place_without_a_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moment: str) -> None:
    """Open nowhere at the check before the copy, opened for writing during the copy or as the
    file is moved aside: the writer's ``open`` waits on the lease until the copy's step or the
    check aside is done, the file is left in place (put back) for the next restart with its copy
    dropped, and the writer's bytes land in it."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with small_volume(tmp_path / "view", "4m") as mount:
        (mount / "ckpt.pt").write_bytes(b"part")
        held: list[int] = []
        writer = threading.Thread(
            target=lambda: held.append(os.open(mount / "ckpt.pt", os.O_WRONLY | os.O_APPEND)))

        def open_for_writing() -> None:
            writer.start()
            _wait_for_a_lease_break()

        rename = os.rename

        def rename_as_a_writer_opens(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            if str(dst).endswith(".aside") and not writer.is_alive() and not held:
                open_for_writing()
            rename(src, dst, *args, **kwargs)

        if moment == "during its copy":
            monkeypatch.setattr(os, "sendfile", _after_copying(mount / "ckpt.pt", open_for_writing))
        else:
            monkeypatch.setattr(os, "rename", rename_as_a_writer_opens)
        with pytest.raises(MountError, match=r"ckpt.pt \(still held open by a writer\): left in place"):
            strays.move_strays(mount, cache)
        writer.join(10)
        try:
            os.write(held[0], b"+rest")
        finally:
            for fd in held:
                os.close(fd)
        assert os.listdir(mount) == ["ckpt.pt"]
        assert (mount / "ckpt.pt").read_bytes() == b"part+rest", "every byte, at its name"
        assert not (cache / "mount-strays").exists(), "its copy dropped, and the folder made for it"


def test_a_writer_that_opens_a_file_in_the_instant_of_its_removal_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The lease narrows the blind spot to the instant between the check aside and the removal: a
    writer that opens the file then (made certain by opening it as it is removed, and removing once
    its ``open`` waits) is named in an error line, and the warning does not say none was open."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with small_volume(tmp_path / "view", "4m") as mount:
        (mount / "ckpt.pt").write_bytes(b"saved")
        opened: list[int] = []
        openers: list[threading.Thread] = []
        unlink = os.unlink

        def unlink_as_a_writer_opens(path: Any, *args: Any, **kwargs: Any) -> None:
            if str(path).endswith(".aside") and not openers:
                aside = mount / str(path)  # the name aside, in the mount point's folder
                openers.append(threading.Thread(target=lambda: opened.append(os.open(aside, os.O_WRONLY))))
                openers[0].start()
                _wait_for_a_lease_break()
            unlink(path, *args, **kwargs)

        monkeypatch.setattr(os, "unlink", unlink_as_a_writer_opens)
        caplog.set_level(logging.WARNING, logger="epochfs.fuse")
        dest = strays.move_strays(mount, cache)
        openers[0].join(10)
        assert opened, "the writer's open went through once the lease ended"
        os.close(opened[0])
        assert dest is not None and (dest / "ckpt.pt").read_bytes() == b"saved"
        [error] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert f"a process opened {mount / 'ckpt.pt'} for writing as it was removed" in error, error
        assert "none of them open" not in caplog.records[-1].getMessage()


def test_a_reader_alone_does_not_keep_a_file_in_place(tmp_path: Path) -> None:
    """A file open only for reading loses nothing when removed (its reader reads on from the
    removed file): it is copied and removed, where a write lease counted the reader as a writer."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with small_volume(tmp_path / "view", "4m") as mount:
        (mount / "train.log").write_bytes(b"line\n")
        with open(mount / "train.log", "rb") as reader:
            dest = strays.move_strays(mount, cache)
            assert reader.read() == b"line\n"
        assert dest is not None and (dest / "train.log").read_bytes() == b"line\n"
        assert os.listdir(mount) == []


def test_leases_are_not_asked_where_they_see_too_little(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """On an overlay (or FUSE, or NFS) a writer of the file beneath goes unseen by a lease on the
    file above: its files are removed unchecked and the warning counts them, also when another
    entry is left in place (the move then ends in an error: the warning comes first)."""
    with small_volume(tmp_path / "vol", "4m") as vol, small_volume(tmp_path / "node", "4m") as node:
        for name in ("lower", "upper", "work", "view"):
            (vol / name).mkdir()
        view = vol / "view"
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={vol / 'lower'},upperdir={vol / 'upper'},workdir={vol / 'work'}",
                        str(view)], check=True)
        try:
            assert writers.leases_tell(vol) and not writers.leases_tell(view)
            (view / "a").write_bytes(b"a")
            (view / "b").write_bytes(b"b")
            monkeypatch.setattr(os, "sendfile", _after_copying(
                view / "b", lambda: (view / "b").write_bytes(b"b, saved again")))
            caplog.set_level(logging.WARNING, logger="epochfs.fuse")
            with pytest.raises(MountError, match=r"b \(changed while it was copied\)"):
                strays.move_strays(view, node)
            [line] = [r.getMessage() for r in caplog.records]
            assert "held 1 entry" in line and "(a)" in line, line
            assert "1 file(s) without knowing whether a writer still held one open" in line, line
            assert os.listdir(view) == ["b"]
        finally:
            subprocess.run(["umount", str(view)], check=True)


def test_a_save_that_takes_the_name_again_leaves_the_one_before_it_aside(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Saved by rename just before the move aside (so the file aside is not the one copied: put
    back) and again just after it (the name is taken): the one aside is never put back over the
    newer one; it stays aside, under a name of its own, for the next restart."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with small_volume(tmp_path / "view", "4m") as mount:
        (mount / "ckpt.pt").write_bytes(b"OLD")
        rename = os.rename

        def save(body: bytes) -> None:
            (mount / "saving").write_bytes(body)
            rename(mount / "saving", mount / "ckpt.pt")

        def saves_around(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            aside = str(dst).endswith(".aside")
            if aside:
                save(b"NEW 1")
            rename(src, dst, *args, **kwargs)
            if aside:
                save(b"NEW 2")

        monkeypatch.setattr(os, "rename", saves_around)
        with pytest.raises(MountError, match=r"ckpt.pt \(changed while it was copied\)"):
            strays.move_strays(mount, cache)
        [aside] = [name for name in os.listdir(mount) if name != "ckpt.pt"]
        assert aside.startswith(".ckpt.pt.") and aside.endswith(".aside"), aside
        assert (mount / aside).read_bytes() == b"NEW 1" and (mount / "ckpt.pt").read_bytes() == b"NEW 2"


def test_a_save_by_rename_as_the_file_is_opened_is_not_what_is_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file is looked at through the descriptor the lease holds, not again by its name: a
    checkpoint saved by rename just after that open, its writer still holding it, was the one
    looked at, copied and removed, its later bytes lost."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with small_volume(tmp_path / "view", "4m") as mount:
        (mount / "ckpt.pt").write_bytes(b"OLD")
        held: list[int] = []
        real_open = os.open

        def save_after_the_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            fd = real_open(path, flags, *args, **kwargs)
            if str(path) == "ckpt.pt" and kwargs.get("dir_fd") is not None and not held:
                held.append(real_open(mount / "saving", os.O_CREAT | os.O_WRONLY, 0o644))
                os.write(held[0], b"NEW")
                os.rename(mount / "saving", mount / "ckpt.pt")
            return fd

        monkeypatch.setattr(os, "open", save_after_the_open)
        try:
            with pytest.raises(MountError, match=r"ckpt.pt \(changed while it was copied\)"):
                strays.move_strays(mount, cache)
            os.write(held[0], b"+later")
        finally:
            for fd in held:
                os.close(fd)
        assert os.listdir(mount) == ["ckpt.pt"] and (mount / "ckpt.pt").read_bytes() == b"NEW+later"


def test_an_entry_with_a_name_of_250_bytes_is_moved(tmp_path: Path) -> None:
    """Its name aside is shorter than ``.<name>.<8 hex>.aside``, which is longer than a file name may be:
    the rename aside failed at every restart, each leaving another copy in the cache."""
    cache = tmp_path / "cache"
    cache.mkdir()
    name = "c" * 250
    with small_volume(tmp_path / "view", "4m") as mount:
        (mount / name).write_bytes(b"x")
        dest = strays.move_strays(mount, cache)
        assert dest is not None and (dest / name).read_bytes() == b"x" and os.listdir(mount) == []


def test_a_folder_swapped_for_a_link_is_never_followed_out_of_the_mount_point(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The folders are walked by descriptor: a folder replaced by a link to another folder after it
    was listed (made certain at the moment it is looked at) is refused, and nothing outside is moved."""
    cache = tmp_path / "cache"
    cache.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_bytes(b"not the mount's")
    with small_volume(tmp_path / "view", "4m") as mount:
        (mount / "run").mkdir()
        (mount / "run" / "f").write_bytes(b"the mount's")
        real_lstat = os.lstat

        def swap_after_the_look(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            st = real_lstat(path, *args, **kwargs)
            if str(path) == "run" and kwargs.get("dir_fd") is not None and not (mount / "kept").exists():
                os.rename(mount / "run", mount / "kept")
                os.symlink(outside, mount / "run")
            return st

        monkeypatch.setattr(os, "lstat", swap_after_the_look)
        with pytest.raises(MountError, match="could not all be copied"):
            strays.move_strays(mount, cache)
        assert (outside / "f").read_bytes() == b"not the mount's"
        assert (mount / "kept" / "f").read_bytes() == b"the mount's"


def test_a_mount_point_reached_through_a_link_is_moved_from(tmp_path: Path) -> None:
    """``--mount`` may name a link to the folder (the mount is made at the folder it leads to):
    the move follows that one link, as the renames it falls back from do."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with small_volume(tmp_path / "view", "4m") as mount:
        (mount / "ckpt.pt").write_bytes(b"x")
        (tmp_path / "link").symlink_to(mount)
        dest = strays.move_strays(tmp_path / "link", cache)
        assert dest is not None and (dest / "ckpt.pt").read_bytes() == b"x" and os.listdir(mount) == []
