"""Whether another process holds a file open for writing: the kernel's answer, a read lease.

A read lease (``fcntl(F_SETLEASE, F_RDLCK)``) is granted only while no descriptor of the file is
open for writing and no writable shared mapping of it is kept, by any process, in any container on
the node: the same inode. While it is held, an open for writing (or a truncate) by anyone else
waits in the kernel until the holder lets go (or ``/proc/sys/fs/lease-break-time`` passes, 45 s by
default, when the kernel ends the lease itself), and the holder sees the lease being broken
(``F_GETLEASE`` answers the type it is broken to). Readers do not break it. :mod:`.straycopy`
holds one on each file from before it looks at it until after it is removed, so that no writer's
bytes end in a removed file.

The signal that tells the holder of a break is SIGIO by default, whose default action ends the
process: ``F_SETSIG`` makes it SIGURG, ignored by default.

A lease answers only for the opens it can see, so it is asked only on the local file systems of
:data:`LEASES_TELL`, found by the folder's ``statfs`` type: on overlayfs or FUSE a lease sees only
the opens made through that mount (a writer of the file beneath goes unseen), and on a network file
system (NFS, CephFS, Lustre) only this machine's. Elsewhere, and where none is granted (a file of
another user without ``CAP_LEASE``), nothing tells.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import signal
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

LEASES_TELL = frozenset({
    0xEF53,  # ext2, ext3, ext4
    0x58465342,  # xfs
    0x9123683E,  # btrfs
    0x01021994,  # tmpfs
    0xF2F52010,  # f2fs
    0x2FC12FC1,  # zfs
    0xCA451A4E,  # bcachefs
})
"""``statfs`` types of the local file systems on which a lease answers for every writer."""


def leases_tell(folder: Path) -> bool:
    """Whether a lease on a file of ``folder`` answers for every process that can write it (its
    file system is one of :data:`LEASES_TELL`)."""
    return _fs_type(folder) in LEASES_TELL


def _fs_type(folder: Path) -> int | None:
    """The ``f_type`` of ``statfs(folder)`` (the file system the folder is on, whatever mounts
    hide), or None where it cannot be read."""
    libc = ctypes.CDLL(None, use_errno=True)  # this process's own libc: no ldconfig run to find it
    buf = ctypes.create_string_buffer(256)  # struct statfs, its first field f_type (a long)
    if libc.statfs(os.fsencode(folder), buf) != 0:
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


@dataclass(frozen=True)
class Lease:
    """What :func:`lease` found: ``no_writer`` True while this process holds a read lease on the
    file, False where it is open for writing elsewhere, None where nothing tells (not a plain file,
    a file system not in :data:`LEASES_TELL`, or no lease granted); ``fd`` the file opened for
    reading (-1 for what is not a plain file)."""

    no_writer: bool | None
    fd: int = -1

    def broken(self) -> bool:
        """Whether another process opened the file for writing since the lease was taken (it is
        being broken, or the kernel ended it: the type answered is then not F_RDLCK)."""
        try:
            return self.no_writer is True and fcntl.fcntl(self.fd, fcntl.F_GETLEASE) != fcntl.F_RDLCK
        except OSError:
            return False


@contextlib.contextmanager
def lease(name: str, *, dir_fd: int | None = None, leases: bool = True) -> Iterator[Lease]:
    """The plain file ``name`` (of the folder ``dir_fd``; never followed through a link) opened for
    reading for a ``with`` block, its descriptor in :attr:`Lease.fd` (-1 where it is not a plain
    file or cannot be opened), and a read lease on it where one is granted and ``leases``
    (:func:`leases_tell` of its folder) says it answers."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=dir_fd)
    except OSError:
        yield Lease(None)
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            yield Lease(None)
            return
        if not leases:
            yield Lease(None, fd)
            return
        try:
            fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)  # a break's signal: not SIGIO, which ends us
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
        except OSError as e:
            yield Lease(False if e.errno in (errno.EAGAIN, errno.EBUSY) else None, fd)
            return
        try:
            yield Lease(True, fd)
        finally:
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    finally:
        os.close(fd)


def open_for_writing(path: str, *, leases: bool) -> bool:
    """Whether a lease says the file ``path`` is open for writing now."""
    with lease(path, leases=leases) as found:
        return found.no_writer is False
