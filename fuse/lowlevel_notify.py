"""libfuse's kernel-cache notifications (both APIs), made safe against the session's teardown.

Apart from :mod:`.kernelcache` (which decides *what* to invalidate) because this is *how*: the
ctypes calls into libfuse, the lock and the states that keep them away from a closed device or a
freed session (docs/mount.md, "Stopping").

Import this module only after ``FUSE_LIBRARY_PATH`` is set (see :mod:`epochfs.fuse.server`):
mfusepy binds libfuse when it is imported.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import threading
from collections.abc import Callable

import mfusepy

from epochfs.fuse.treebuild import ENC

log = logging.getLogger("epochfs.fuse")

FUSE_ROOT_ID = 1
_DEVICE_GONE = frozenset({-errno.EBADF, -errno.ENODEV, -errno.ENOTCONN})


class KernelNotifier:
    """libfuse's cache-invalidation calls, bound once the mount is up (libfuse 3 only).

    **Teardown.** libfuse ends its loop, then closes the device (``fuse_unmount``) and frees the
    session (``fuse_destroy``); a notification sent after the first writes to a closed descriptor
    (``fuse: writing device: Bad file descriptor``), one sent after the second uses freed memory
    (SIGSEGV). So every libfuse call here is made holding ``_lock`` and only in the right state:

    * ``open``: notifications and :meth:`end_session` allowed;
    * ``closed`` (:meth:`close`, before the loop is asked to end): no more notifications;
      :meth:`end_session` still allowed (the session is alive);
    * ``detached`` (:meth:`detach`, from the destroy callback, the last call before libfuse frees
      the session): no libfuse call at all.

    ``close`` and ``detach`` take the lock, so once they return no call is in flight and none can
    start. A notification is also skipped once libfuse says its loop is ending, and an error saying
    the device is gone (EBADF, ENODEV, ENOTCONN: someone unmounted us) closes the notifier.
    """

    def __init__(self, fuse_ptr: int | None, *, session: int | None = None,
                 inode_of: Callable[[str], int] | None = None) -> None:
        """``fuse_ptr``: the high-level ``struct fuse`` (paths invalidated by libfuse); or
        ``session`` and ``inode_of`` for the low-level adapter (paths turned into inode numbers
        here, :mod:`epochfs.fuse.inodes`)."""
        self._fuse = ctypes.c_void_p(fuse_ptr) if fuse_ptr else None
        self._se: ctypes.c_void_p | None = None
        self._inode_of = inode_of
        self._lock = threading.Lock()
        lib = mfusepy._libfuse
        self.available = (bool(self._fuse) or bool(session)) and mfusepy.fuse_version_major == 3
        self._open = self.available
        self._attached = self.available
        if not self.available:
            return
        lib.fuse_get_session.argtypes = [ctypes.c_void_p]
        lib.fuse_get_session.restype = ctypes.c_void_p
        lib.fuse_invalidate_path.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.fuse_invalidate_path.restype = ctypes.c_int
        lib.fuse_lowlevel_notify_inval_entry.argtypes = [
            ctypes.c_void_p, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t,
        ]
        lib.fuse_lowlevel_notify_inval_entry.restype = ctypes.c_int
        lib.fuse_lowlevel_notify_inval_inode.argtypes = [
            ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64, ctypes.c_int64,
        ]
        lib.fuse_lowlevel_notify_inval_inode.restype = ctypes.c_int
        lib.fuse_session_exit.argtypes = [ctypes.c_void_p]
        lib.fuse_session_exit.restype = None
        lib.fuse_session_exited.argtypes = [ctypes.c_void_p]
        lib.fuse_session_exited.restype = ctypes.c_int
        self._se = ctypes.c_void_p(session if session else lib.fuse_get_session(self._fuse))
        self._lib = lib

    @property
    def open(self) -> bool:
        """True while notifications may still be sent."""
        return self._open

    def _notify(self, call: Callable[[], int]) -> None:
        with self._lock:
            if not self._open:
                return
            if self._lib.fuse_session_exited(self._se):
                self._open = False  # the loop is ending: the device is about to close
                log.debug("FUSE loop ending: no more kernel notifications")
                return
            result = call()
            if result in _DEVICE_GONE:
                self._open = False
                log.info("kernel notifications stopped: %s", os.strerror(-result))

    def _forget(self, parent_ino: int, name: str) -> None:
        """Drop the kernel's cached entry ``name`` of folder ``parent_ino``; the name encoded as
        mfusepy and the low-level adapter decode names, so an undecodable byte comes back as sent."""
        raw = name.encode(*ENC)
        self._notify(lambda: self._lib.fuse_lowlevel_notify_inval_entry(self._se, parent_ino, raw, len(raw)))

    def forget_root_entry(self, name: str) -> None:
        """Drop the kernel's cached entry ``/name`` (a retired epoch, a changed ``latest``)."""
        if self.available:
            self._forget(FUSE_ROOT_ID, name)

    def forget_entry(self, path: str) -> None:
        """Drop the kernel's cached entry (dentry) of ``path`` inside a folder, so the next lookup
        asks the server. Needed where an entry changes its file type (a lost sample's symlink
        turns into a regular file): the kernel answers fresh attributes of another type on the
        inode it holds with EIO, so invalidating the inode's attributes alone is not enough.
        Low-level adapter only: the high-level API does not tell the parent's node number (there
        :meth:`invalidate` alone, and the old entry answers EIO once before it is looked up anew)."""
        if not self.available or self._inode_of is None:
            return
        parent, _, name = path.rstrip("/").rpartition("/")
        try:
            parent_ino = self._inode_of(parent or "/")
        except LookupError:
            return  # its folder names nothing: the kernel cannot hold the entry either
        self._forget(parent_ino, name)

    def invalidate(self, path: str) -> None:
        """Drop the kernel's cached attributes and data of ``path`` (no-op if it has none)."""
        if not self.available:
            return
        if self._inode_of is None:
            raw = path.encode(*ENC)  # as mfusepy decodes paths
            self._notify(lambda: self._lib.fuse_invalidate_path(self._fuse, raw))
            return
        try:
            ino = self._inode_of(path)
        except LookupError:
            return  # names nothing: the kernel cannot hold it either
        self._notify(lambda: self._lib.fuse_lowlevel_notify_inval_inode(self._se, ino, 0, 0))

    def close(self) -> None:
        """No more notifications; returns once none is in flight."""
        with self._lock:
            self._open = False

    def end_session(self) -> bool:
        """Close, then ask libfuse's loop to end (``fuse_session_exit``); False when there is no
        session to end (not mounted yet, or already torn down)."""
        with self._lock:
            self._open = False
            if not self._attached:
                return False
            self._lib.fuse_session_exit(self._se)
            return True

    def detach(self) -> None:
        """The session is about to be freed: no libfuse call of any kind from now on."""
        with self._lock:
            self._open = False
            self._attached = False
