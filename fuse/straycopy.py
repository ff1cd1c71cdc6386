"""The last resort of :mod:`.strays`: the mount-point folder's entries copied to the cache's volume,
then their originals removed, where no rename reaches another folder.

A copy then a removal can lose what a rename cannot: what is written or added between the two, and
what a writer that holds a file open writes after its removal (into the removed file). So each
entry's files are noted (inode, size, modification time) before its copy, and after the copy only
those still as noted and open for writing nowhere else are removed, then the folders that are left
empty; a file changed, replaced (a checkpoint saved by rename), added or still held open by a writer
meanwhile stays in place for the next restart, never only in a removed original, and its copy is
dropped (the next restart copies it again; copies kept beside a file a writer held open filled the
cache's volume, a copy a restart). A copy that failed part way is removed (its original is whole).

Each file is renamed aside (a name of this removal's own, in its folder), checked there, then
removed or put back: removing by its name after a check removed a save by rename made in between,
never copied. "Open for writing nowhere else" is the kernel's answer, across containers: a read
lease on the file (``F_SETLEASE``), which it grants only while no descriptor of the file is open
for writing (readers lose nothing: they read on from the removed file), held from before the
file's last look until after its removal. A process that opens the file for writing meanwhile
waits in its ``open`` for the lease to end (it breaks the lease; the signal that tells this
process, SIGIO by default, which would end it, is SIGURG, ignored by default): seen before the
removal, the file is put back; in the instant after the rename's check, an error line names it.
Where the file system grants no lease or its lease sees too little (:data:`LEASE_BLIND`: overlayfs
and FUSE see only the opens made through them, NFS only this machine's), or the file is another
user's without ``CAP_LEASE``, nothing tells: the file is removed all the same and the warning
counts such files.

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
import errno
import fcntl
import os
import secrets
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
LEASE_BLIND = ("overlay", "fuse", "nfs", "cifs", "smb", "ceph", "9p", "virtiofs")
"""File system types (prefixes) on which a lease does not tell whether a file is open for writing:
stacked ones see only the opens made through them, network ones only this machine's."""


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
    leases = _leases_tell(folder)
    for name in names:
        for path in _walk(folder / name):
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                continue
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                return f"{path} is not a file, a folder or a link"
            if _flags(path) & _PINNING_FLAGS:
                return f"{path} is immutable or append-only"
            if stat.S_ISREG(st.st_mode) and _open_for_writing(path, leases=leases):
                return f"{path} is held open for writing by another process"
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
    leases = _leases_tell(folder)
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
        why = _remove_copied(src, dst, noted, done, leases=leases)
        if why is not None:
            done.left[name] = why
    return done


def _remove_copied(src: Path, dst: Path, noted: dict[str, Noted], done: Copied, *,
                   leases: bool) -> str | None:
    """Remove the files of ``src`` still as ``noted`` and open for writing nowhere else, then its
    folders left empty; and from the copy ``dst``, the files left in place (the next restart
    copies them again: a copy kept beside each filled the cache's volume, restart after restart,
    while a writer held its file open). None once ``src`` is gone, else why it stays. Where a
    removal fails before any file was removed, the copy ``dst`` goes too (its original is whole)."""
    kept: list[str] = []
    held, removed = False, 0
    for path, was in noted.items():
        with _lease(path, leases=leases) as lease:
            if lease.no_writer is False:
                held = True  # its writer's later bytes would land in a removed file
                kept.append(path)
                continue
            try:
                outcome = _remove_one(path, was, lease)
            except OSError:
                if not removed:
                    _remove(dst)
                raise
        removed += outcome not in ("kept", "held")
        if outcome in ("kept", "held"):
            held = held or outcome == "held"
            kept.append(path)
        elif outcome == "unchecked":
            done.unchecked += 1
        elif outcome == "opened":
            done.opened_at_removal.append(path)
    for path in kept:
        rel = os.path.relpath(path, src)
        _remove(dst if rel == "." else dst / rel)
    for top in (src, dst):
        for path in sorted((p for p in _walk(top) if os.path.isdir(p) and not os.path.islink(p)),
                           key=lambda p: p.count("/"), reverse=True):
            with contextlib.suppress(OSError):  # not empty: something was added (or kept) there
                os.rmdir(path)
    if not os.path.lexists(src):
        return None
    return HELD_OPEN if held else CHANGED


def _remove_one(path: str, was: Noted, lease: _Lease) -> str:
    """Remove the file (or link) ``path`` if it is still as noted. It is renamed aside first, to a
    name of this removal's own, so that a save by rename over ``path`` in the meantime is never
    what is removed (a rename does not break a lease); checked there; then removed, or put back at
    its name, never over a newer save that took it (it then stays aside, under a name of its own,
    for the next restart). Returns "removed", "gone" (its writer removed it), "unchecked"
    (removed, no lease told), "opened" (removed, but another process opened it for writing in that
    instant: what it writes there is lost), "held" (put back: opened for writing meanwhile) or
    "kept" (put back: changed or replaced since its copy)."""
    aside = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{secrets.token_hex(4)}.aside")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return "gone"
    st = os.lstat(aside)
    opened = lease.broken()
    if (st.st_ino, st.st_size, st.st_mtime_ns) != was or opened:
        _put_back(aside, path)
        return "held" if opened else "kept"
    os.unlink(aside)
    if lease.no_writer is None:
        return "unchecked" if stat.S_ISREG(st.st_mode) else "removed"  # a link is never open to write
    return "opened" if lease.broken() else "removed"


def _put_back(aside: str, path: str) -> None:
    """``aside`` back at ``path``, where nothing took that name meanwhile."""
    try:
        os.link(aside, path, follow_symlinks=False)  # never over a newer save (EEXIST)
    except FileExistsError:
        return
    except OSError:  # no hard link here (another user's file under protected_hardlinks)
        if os.path.lexists(path):
            return
        os.rename(aside, path)
        return
    os.unlink(aside)


def _leases_tell(folder: Path) -> bool:
    """Whether a lease on a file of ``folder`` answers for every process that can write it: not
    on a stacked file system (overlayfs, FUSE: opens of the files beneath go unseen), nor on a
    network one (opens on other machines go unseen)."""
    target = mounting.canonical(folder)
    fstype, depth = "", -1
    for entry in mounting.mount_table():
        point = entry.mount_point.rstrip("/") or "/"
        if (target == point or target.startswith(point.rstrip("/") + "/")) and len(point) >= depth:
            fstype, depth = entry.fstype, len(point)
    return not fstype.startswith(LEASE_BLIND)


@dataclass(frozen=True)
class _Lease:
    """What :func:`_lease` found: ``no_writer`` True while this process holds a read lease on the
    file (the kernel grants one only while no descriptor of it is open for writing, and an open
    for writing meanwhile waits until the block ends), False where one is open for writing, None
    where nothing tells (not a plain file, a file system whose leases see too little, or a file
    system or owner that grants none)."""

    no_writer: bool | None
    fd: int = -1

    def broken(self) -> bool:
        """Whether another process opened the file for writing while the lease was held (it is
        being broken: the kernel then answers the type it is broken to, not F_RDLCK)."""
        try:
            return self.no_writer is True and fcntl.fcntl(self.fd, fcntl.F_GETLEASE) != fcntl.F_RDLCK
        except OSError:
            return False


def _open_for_writing(path: str, *, leases: bool) -> bool:
    """Whether a lease says the file ``path`` is open for writing now."""
    with _lease(path, leases=leases) as lease:
        return lease.no_writer is False


@contextlib.contextmanager
def _lease(path: str, *, leases: bool = True) -> Iterator[_Lease]:
    """A read lease on the file ``path`` for a ``with`` block, where one is granted (:class:`_Lease`)."""
    try:
        if not leases:
            raise PermissionError(errno.EPERM, "leases do not tell here")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        yield _Lease(None)
        return
    try:
        try:
            fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)  # a break's signal: not SIGIO, which ends us
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
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
