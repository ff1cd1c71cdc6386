"""The last resort of :mod:`.strays`: the mount-point folder's entries copied to the cache's volume,
then their originals removed, where no rename reaches another folder.

A copy then a removal can lose what a rename cannot: what is written or added between the two, and
what a writer that holds a file open writes after its removal (into the removed file). So each
entry's files are noted (inode, size, modification time) before its copy, and after the copy only
those still as noted and open in no other process are removed, then the folders that are left
empty; a file changed, replaced (a checkpoint saved by rename), added or still held open meanwhile
stays in place for the next restart, next to the copy, never only in a removed original. A copy
that failed part way is removed (its original is whole), and so is the copy of an entry none of
whose files could be removed.

"Open in no other process" is the kernel's answer, across containers: a write lease on the file
(``F_SETLEASE``), which it grants only while no other descriptor of the file is open, held from
before the file's last look until after its removal. A process that opens the file meanwhile waits
in its ``open`` for the lease to end (it breaks the lease: the signal that tells this process,
SIGIO by default, which would end it, is SIGURG, ignored by default); the check after the removal
sees such a break, and an error line then names the file. Where the file system grants no lease (NFS,
some FUSE file systems) or the file is another user's without ``CAP_LEASE``, nothing tells, the
file is removed all the same and the count of such files is returned for the warning.

What cannot be removed or copied is refused before anything is copied (:func:`refusal`), so that a
restart that meets it again copies nothing again: a mount at or below an entry (its removal would
empty the other volume, then fail), an immutable or append-only file or folder, the mount point
folder included, a folder on a read-only volume, an entry that is not a file, a folder or a link
(a copy would read a device or wait on a pipe), and entries too large for the cache's volume (more
than half of its free space: a sparse file is copied whole, and the sampler shares that volume).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import signal
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from epochfs.fuse import mounting

_FS_IOC_GETFLAGS = 0x80086601
_PINNING_FLAGS = 0x10 | 0x20
"""``FS_IMMUTABLE_FL`` and ``FS_APPEND_FL`` (``chattr +i``, ``+a``): the entry cannot be removed."""

Noted = tuple[int, int, int]
"""A file as noted before its copy: inode, size, modification time (ns)."""

CHANGED = "changed while it was copied"
HELD_OPEN = "still held open by a writer"


@dataclass
class Copied:
    """What :func:`copy_all` did: the entries left in place (name → why), the files removed without
    knowing whether another process held them open (no lease there), and those another process
    opened as they were removed."""

    left: dict[str, str] = field(default_factory=dict)
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
    for name in names:
        for path in _walk(folder / name):
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                continue
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                return f"{path} is not a file, a folder or a link"
            if _flags(path) & _PINNING_FLAGS:
                return f"{path} is immutable or append-only"
            size += st.st_size if stat.S_ISREG(st.st_mode) else 0
    vfs = os.statvfs(cache)
    free = vfs.f_bavail * vfs.f_frsize
    if size > free // 2:
        return f"their {size} bytes are more than half of the {free} bytes free on the cache's volume"
    return None


def copy_all(folder: Path, dest: Path, names: list[str]) -> Copied:
    """Copy each entry of ``folder`` into ``dest``, then remove what was copied (the module's
    rules); what was left in place, in part or whole, and why."""
    done = Copied()
    for name in names:
        src, dst = folder / name, dest / name
        noted = {p: (st.st_ino, st.st_size, st.st_mtime_ns) for p in _walk(src)
                 if not stat.S_ISDIR((st := os.lstat(p)).st_mode)}
        try:
            if src.is_dir() and not src.is_symlink():
                shutil.copytree(src, dst, symlinks=True)
            else:
                shutil.copy2(src, dst, follow_symlinks=False)
        except OSError:
            _remove(dst)
            raise
        why = _remove_copied(src, dst, noted, done)
        if why is not None:
            done.left[name] = why
    return done


def _remove_copied(src: Path, dst: Path, noted: dict[str, Noted], done: Copied) -> str | None:
    """Remove the files of ``src`` still as ``noted`` and open nowhere else, then its folders left
    empty; None once ``src`` is gone, else why it stays. Where not one file could be removed, the
    copy ``dst`` goes too."""
    removed, held = 0, False
    for path, was in noted.items():
        with _lease(path) as lease:
            if lease.alone is False:
                held = True
                continue  # a writer holds it open: its later writes would land in a removed file
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue  # removed meanwhile by its writer
            if (st.st_ino, st.st_size, st.st_mtime_ns) != was:
                continue  # changed or replaced since its copy: stays for the next restart
            try:
                os.unlink(path)
            except OSError:
                if not removed:
                    _remove(dst)  # its original is whole
                raise
            removed += 1
            if lease.alone is None and stat.S_ISREG(st.st_mode):  # a link is never held open to write
                done.unchecked += 1
            elif lease.broken():
                done.opened_at_removal.append(path)
    for path in sorted((p for p in _walk(src) if os.path.isdir(p) and not os.path.islink(p)),
                       key=lambda p: p.count("/"), reverse=True):
        with contextlib.suppress(OSError):  # not empty: something was added meanwhile
            os.rmdir(path)
    if not os.path.lexists(src):
        return None
    return HELD_OPEN if held else CHANGED


@dataclass(frozen=True)
class _Lease:
    """What :func:`_lease` found: ``alone`` True while this process holds a write lease on the
    file (no other process has it open, and one that opens it waits until the block ends), False
    where another process holds it open, None where nothing tells (no lease there: not a plain
    file, or a file system or owner that grants none)."""

    alone: bool | None
    fd: int = -1

    def broken(self) -> bool:
        """Whether another process opened the file while the lease was held (it is being broken:
        the kernel then answers the type it is broken to, not F_WRLCK)."""
        try:
            return self.alone is True and fcntl.fcntl(self.fd, fcntl.F_GETLEASE) != fcntl.F_WRLCK
        except OSError:
            return False


@contextlib.contextmanager
def _lease(path: str) -> Iterator[_Lease]:
    """A write lease on the file ``path`` for a ``with`` block, where one is granted (:class:`_Lease`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        yield _Lease(None)
        return
    try:
        try:
            fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)  # a break's signal: not SIGIO, which ends us
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        except OSError as e:
            yield _Lease(False if e.errno in (errno.EAGAIN, errno.EBUSY) else None)
            return
        try:
            yield _Lease(True, fd)
        finally:
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    finally:
        os.close(fd)


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
