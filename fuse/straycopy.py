"""The last resort of :mod:`.strays`: the mount-point folder's entries copied to the cache's volume,
then their originals removed, where no rename reaches another folder.

A copy then a removal can lose what a rename cannot: what is written or added between the two, and
what a writer that holds a file open writes after its removal (into the removed file). So the
entries are moved file by file, each under a read lease (:mod:`.writers`: the kernel grants it only
while no other process holds the file open for writing, and an open for writing meanwhile waits
until it ends, or breaks it) held from before the file is looked at until after its removal: opened
(never through a link: folders are walked by their descriptors, so one swapped for a link is never
followed out of the mount point), looked at (inode, size, modification time, of the file opened),
copied from that descriptor in steps (:data:`COPY_STEP`; a writer that opens it meanwhile stops the
copy at the next step, and waits no longer), renamed aside (``.<name>.<8 hex>.aside`` in its folder),
checked there (the same inode, size and time, the lease not broken), then removed, or put back at
its name without ever replacing a newer save (where the name is taken it stays aside, and the next
restart moves it under that name). A file that was open for writing, changed, replaced (a
checkpoint saved by rename: renaming aside first means a save in between is never what is removed)
or added meanwhile stays in place for the next restart and its copy is dropped; folders left empty
are removed. Readers lose nothing (they read on from the removed file). Where leases do not tell
(overlayfs, FUSE, network file systems; a file of another user without ``CAP_LEASE``) a file is
removed after the same look and check, and the warning counts such files: a writer's bytes written
through a descriptor it still holds, or through a shared mapping in the same timestamp tick, would
then be lost.

What cannot be removed or copied is refused before anything is copied (:func:`refusal`), so that a
restart that meets it again copies nothing again: a file a writer holds open (each restart, every
two seconds or so, copied it whole and dropped the copy, for as long as its writer held it), a
mount at or below an entry (its removal would empty the other volume, then fail), an immutable or
append-only file or folder, the mount point folder included, a folder on a read-only volume, an
entry that is not a file, a folder or a link
(a copy would read a device or wait on a pipe), and entries too large for the cache's volume (more
than half of its free space: a sparse file is copied whole, and the sampler shares that volume).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import secrets
import shutil
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

from epochfs.fuse import mounting, writers

_RENAME_NOREPLACE = 1
_FS_IOC_GETFLAGS = 0x80086601
_PINNING_FLAGS = 0x10 | 0x20
"""``FS_IMMUTABLE_FL`` and ``FS_APPEND_FL`` (``chattr +i``, ``+a``): the entry cannot be removed."""

COPY_STEP = 8 << 20
"""Bytes copied between two looks at the lease: a writer's ``open`` waits at most one step's copy."""
CHANGED = "changed while it was copied"
HELD_OPEN = "still held open by a writer"


@dataclass
class Copied:
    """What :func:`copy_all` did: the entries left in place (name → why), those moved whole, how
    many files were removed without knowing whether another process held them open for writing
    (no lease tells there), and those another process opened as they were removed."""

    left: dict[str, str] = field(default_factory=dict)
    moved: list[str] = field(default_factory=list)
    unchecked: int = 0
    opened_at_removal: list[str] = field(default_factory=list)


def refusal(folder: Path, names: list[str], cache: Path) -> str | None:
    """Why the entries ``names`` of ``folder`` cannot be copied onto ``cache``'s volume then
    removed (the module's list), or None."""
    base = mounting.canonical(folder) + "/"
    mounted = [e.mount_point for e in mounting.mount_table() if e.mount_point.startswith(base)]
    if mounted:
        return f"{mounted[0]} is a mount point"
    if os.statvfs(folder).f_flag & os.ST_RDONLY:
        return f"{folder} is on a read-only volume"
    if _flags(str(folder)) & _PINNING_FLAGS:
        return f"{folder} is immutable or append-only"
    size = 0
    leases = writers.leases_tell(folder)
    for name in names:
        for path in _walk(folder / name):
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                continue
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                return f"{path} is not a file, a folder or a link"
            if _flags(path) & _PINNING_FLAGS:
                return f"{path} is immutable or append-only"
            if stat.S_ISREG(st.st_mode) and writers.open_for_writing(path, leases=leases):
                return f"{path} is held open for writing by another process"
            size += st.st_size if stat.S_ISREG(st.st_mode) else 0
    vfs = os.statvfs(cache)
    free = vfs.f_bavail * vfs.f_frsize
    if size > free // 2:
        return f"their {size} bytes are more than half of the {free} bytes free on the cache's volume"
    return None


def copy_all(folder: Path, dest: Path, names: list[str]) -> Copied:
    """Copy each entry of ``folder`` into ``dest``, then remove what was copied (the module's
    rules); what was moved, what was left in place, in part or whole, and why."""
    done = Copied()
    leases = writers.leases_tell(folder)
    top = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)  # --mount may name a link to its folder
    try:
        for name in names:
            why = _move_entry(top, name, dest / name, done, shown=str(folder / name), leases=leases)
            if why is not None:
                done.left[name] = why
            elif os.path.lexists(dest / name):
                done.moved.append(name)
    finally:
        os.close(top)
    return done


def _move_entry(dir_fd: int, name: str, target: Path, done: Copied, *, shown: str,
                leases: bool) -> str | None:
    """Move the entry ``name`` of the folder ``dir_fd`` (a file, a link, or a folder and what it
    holds, reached through folder descriptors: a folder swapped for a link meanwhile is never
    followed out of the mount point) into ``target``, file by file (:func:`_move_file`); None once
    it is gone, else why it stays. A failure (a full volume) leaves each file moved or in place.
    ``shown``: its path, for the messages."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        outcome = _move_file(dir_fd, name, target, leases=leases)
        done.unchecked += outcome == "unchecked"
        if outcome == "opened":
            done.opened_at_removal.append(shown)
        return {"held": HELD_OPEN, "kept": CHANGED}.get(outcome)
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        target.mkdir()
        try:
            whys = [_move_entry(fd, entry, target / entry, done, shown=os.path.join(shown, entry),
                                leases=leases) for entry in sorted(os.listdir(fd))]
        finally:
            with contextlib.suppress(OSError):
                shutil.copystat(f"/proc/self/fd/{fd}", target)
            with contextlib.suppress(OSError):  # something was moved into it
                target.rmdir()
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):  # something was added or kept there
        os.rmdir(name, dir_fd=dir_fd)
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    return HELD_OPEN if HELD_OPEN in whys else CHANGED


def _move_file(dir_fd: int, name: str, target: Path, *, leases: bool) -> str:
    """Copy the file or link ``name`` of the folder ``dir_fd`` to ``target`` and remove it, under a
    read lease (the module's rules): "removed", "gone" (its writer removed it first), "unchecked"
    (removed where no lease tells), "opened" (removed, but a process opened it for writing in the
    instant between its check and its removal: what it writes there is lost), "held" (left in
    place: open for writing) or "kept" (left in place: changed or replaced)."""
    with writers.lease(name, dir_fd=dir_fd, leases=leases) as lease:
        if lease.no_writer is False:
            return "held"
        try:
            st = os.fstat(lease.fd) if lease.fd >= 0 else os.lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return "gone"
        try:
            if not _copy(dir_fd, name, st, lease, target):
                _remove(target)
                return "held"  # opened for writing during its copy: the copy stopped there
            aside = _aside_name(name)
            os.rename(name, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except FileNotFoundError:
            return "gone"  # removed by its writer after the copy: the copy is all there is
        except OSError:
            _remove(target)
            raise
        now = os.lstat(aside, dir_fd=dir_fd)
        opened = lease.broken()
        if (now.st_ino, now.st_size, now.st_mtime_ns) != (st.st_ino, st.st_size, st.st_mtime_ns) or opened:
            _put_back(dir_fd, aside, name)
            _remove(target)
            return "held" if opened else "kept"
        os.unlink(aside, dir_fd=dir_fd)
        if lease.no_writer is None:
            return "unchecked" if stat.S_ISREG(st.st_mode) else "removed"  # a link is never open to write
        return "opened" if lease.broken() else "removed"


def _copy(dir_fd: int, name: str, st: os.stat_result, lease: writers.Lease, target: Path) -> bool:
    """``name`` copied to ``target`` (never over anything there): a link as a link, a plain file from
    the descriptor the lease holds, in steps of :data:`COPY_STEP`, stopping at the first step after
    the lease was broken (a writer waits in its ``open`` until then); whether it was copied whole."""
    if lease.fd < 0:
        os.symlink(os.readlink(name, dir_fd=dir_fd), target)
        return True
    with open(target, "xb") as out:
        offset = 0
        while sent := os.sendfile(out.fileno(), lease.fd, offset, COPY_STEP):
            offset += sent
            if lease.broken():
                return False
    os.chmod(target, stat.S_IMODE(st.st_mode))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    return True


def _aside_name(name: str) -> str:
    """A name of this removal's own beside ``name``: ``.<name>.<8 hex>.aside`` where that fits a
    file name (255 bytes), else ``.<8 hex>.aside``."""
    token = secrets.token_hex(4)
    aside = f".{name}.{token}.aside"
    return aside if len(os.fsencode(aside)) <= 255 else f".{token}.aside"


def _put_back(dir_fd: int, aside: str, name: str) -> None:
    """``aside`` back at ``name``, never over a newer save that took the name (``renameat2`` with
    ``RENAME_NOREPLACE``, or a hard link where the file system has no such rename); where the name
    is taken, or neither can be made, it stays aside for the next restart."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is not None:
        if renameat2(dir_fd, os.fsencode(aside), dir_fd, os.fsencode(name), _RENAME_NOREPLACE) == 0:
            return
        if ctypes.get_errno() not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            return  # EEXIST: a newer save has the name
    try:
        os.link(aside, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    os.unlink(aside, dir_fd=dir_fd)


def _walk(top: Path) -> list[str]:
    """``top`` and, for a folder (not a link to one), everything below it."""
    if not top.is_dir() or top.is_symlink():
        return [str(top)]
    return [str(top), *(os.path.join(parent, entry) for parent, dirs, files in os.walk(top)
                        for entry in (*dirs, *files))]


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _flags(path: str) -> int:
    """The inode flags of the file or folder ``path`` (``lsattr``), 0 where it has none to tell."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return 0
    try:
        buf = fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8))  # the kernel writes an int
        return int.from_bytes(buf[:4], sys.byteorder)
    except OSError:
        return 0
    finally:
        os.close(fd)
