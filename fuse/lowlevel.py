"""The mount through libfuse's low-level API: inode numbers in, :class:`EpochOperations` answers out.

Why a second adapter: libfuse's high-level API (what mfusepy binds) keeps a node with its name for
every entry the kernel caches, ~137 bytes each, so the server grew ~357 bytes per file a trainer
looked at, against an aim of 200 (docs/performance.md, "FUSE server memory"). The
low-level API leaves inode numbers to the file system; :mod:`epochfs.fuse.inodes` computes them
from the view, so nothing is kept per file here and the kernel's FORGETs are left to libfuse.

Thin on purpose: each callback turns its inode number into the path :class:`EpochOperations`
answers for (errors, metrics, cuts on lookup, epoch holds, the warmer and the refresher stay
there), then replies. Every callback replies exactly once, whatever happens (a request without a
reply would hang its caller in the kernel): a FuseOSError gives its errno, a number or name that
names nothing ENOENT, anything else EIO.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import logging
from collections.abc import Callable
from typing import Any

import mfusepy

from epochfs.fuse.classes import MAX_WAITING
from epochfs.fuse.inodes import Inodes
from epochfs.fuse.kernelcache import KernelNotifier
from epochfs.fuse.lowlevel_abi import (
    CALLBACK_TYPES,
    DIRECT_IO_BIT,
    KEEP_CACHE_BIT,
    EntryParam,
    LowLevelOps,
    bind,
    make_args,
)
from epochfs.fuse.operations import SETATTR_CALLS, EpochOperations, FuseOSError, wanted_capabilities
from epochfs.fuse.operations import WRITE_CALLS as OPS_WRITE_CALLS
from epochfs.fuse.treebuild import ENC
from epochfs.fuse.view import NotFound

LISTING_HANDLES = 1 << 62
"""Folder handles from here on are the adapter's own (a listing's snapshot), not the
operations' (which number theirs from 1)."""

LOOP_THREADS = 10 + MAX_WAITING
"""The loop's request threads at most: libfuse's default (10) for the mount's requests, plus one
for each request that may wait for a ``classes.json`` record (:data:`~epochfs.fuse.classes.MAX_WAITING`),
so that those never take every thread (:mod:`epochfs.fuse.classes`). libfuse starts threads as
requests need them."""

IDLE_THREADS = 10
"""Idle request threads the loop keeps; a thread beyond them ends once it has answered. Left to
itself, libfuse 3.12 and later keep every thread they start (up to :data:`LOOP_THREADS`) for the
life of the mount, and each keeps glibc's per-thread cache of freed chunks, which ``malloc_trim``
cannot give back: a burst of requests (a reader's ``os.walk``, a DataLoader's workers) would leave
the server ~20-30 MB larger for good. 10 is libfuse's own default before 3.12, and all its
high-level loop runs; fewer would start and end threads all through a steady load. A burst still
gets threads up to :data:`LOOP_THREADS`."""

log = logging.getLogger("epochfs.fuse")

WRITE_CALLS = ("setattr", *(c for c in OPS_WRITE_CALLS if c not in SETATTR_CALLS))
"""The low-level calls that answer EROFS: the operations' :data:`~.operations.WRITE_CALLS`, with
those the low-level API makes one ``setattr`` as that one."""


class MountFailed(RuntimeError):
    """libfuse could not create the session or mount it (nothing is left mounted)."""


class _FileInfo:
    """What EpochOperations reads and sets of a ``struct fuse_file_info``."""

    def __init__(self, flags: int = 0, fh: int = 0) -> None:
        self.flags = flags
        self.fh = fh
        self.direct_io = 0
        self.keep_cache = 0


def _join(parent: str, name: str) -> str:
    return ("/" if parent == "/" else parent + "/") + name


class LowLevelFUSE:
    """One low-level libfuse session serving ``ops`` at ``mountpoint`` (:meth:`run` blocks)."""

    def __init__(self, ops: EpochOperations, *, mountpoint: str, options: str) -> None:
        self.ops = ops
        self.inodes = Inodes(ops.view)
        self.mountpoint = mountpoint
        self.options = options
        self.lib = bind()
        self._se: int | None = None
        self._notifier: KernelNotifier | None = None
        self._unnumbered: set[str] = set()  # names already warned about (bounded)
        self._listing_handles = itertools.count(LISTING_HANDLES)
        """Handles for folders that change (the root, ``.epochfs``), where the operations keep
        none: with a handle of its own, each listing is a snapshot too (:meth:`_list`)."""
        self._folders: dict[int, tuple[str, int | None, int]] = {}
        """Folder handle -> (path, first child's inode number, parent's), taken at opendir: an
        epoch's numbers map to paths through its tree, which the view drops once the epoch
        retires, and a listing held open must still be continued then (:meth:`_list`)."""
        self._keep: list[Any] = []  # the C callbacks: freed callbacks would crash libfuse
        self._c_ops = LowLevelOps()
        handlers: dict[str, Callable[..., None]] = {
            "init": self._init, "destroy": self._destroy, "lookup": self._lookup,
            "getattr": self._getattr, "readlink": self._readlink, "open": self._open,
            "read": self._read, "release": self._release, "opendir": self._opendir,
            "readdir": self._readdir, "readdirplus": self._readdirplus,
            "releasedir": self._releasedir, "statfs": self._statfs,
        }
        for name in WRITE_CALLS:
            handlers[name] = self._read_only
        for name, fn in handlers.items():
            c_fn = CALLBACK_TYPES[name](fn)
            self._keep.append(c_fn)
            setattr(self._c_ops, name, ctypes.cast(c_fn, ctypes.c_void_p))

    # ------------------------------------------------------------------ the session
    def run(self) -> int:
        """Mount, serve until the session ends (a signal, an unmount), unmount; libfuse's status."""
        lib = self.lib
        args, argv = make_args([b"epochfs", b"-o", self.options.encode()])
        se = lib.fuse_session_new(ctypes.byref(args), ctypes.byref(self._c_ops), ctypes.sizeof(self._c_ops),
                                  None)
        if not se:
            raise MountFailed(f"libfuse refused the session (options {self.options!r})")
        self._se = se
        try:
            if lib.fuse_session_mount(se, self.mountpoint.encode()) != 0:
                raise MountFailed(f"libfuse could not mount {self.mountpoint}")
            try:
                config = lib.fuse_loop_cfg_create()
                classes = self.ops.view.classes
                try:
                    lib.fuse_loop_cfg_set_max_threads(config, LOOP_THREADS)
                    lib.fuse_loop_cfg_set_idle_threads(config, IDLE_THREADS)
                    # The loop ends only once its threads return: a stop ends a classes.json wait.
                    classes.end_waits_when(lambda: bool(lib.fuse_session_exited(se)))
                    return int(lib.fuse_session_loop_mt_312(se, config))
                finally:
                    classes.end_waits_when(None)
                    lib.fuse_loop_cfg_destroy(config)
                    # No notification from here on: the loop reset the session's "exited" flag,
                    # and the unmount below closes the device before libfuse forgets its number
                    # (a notification then could reach a reused descriptor). After a signal the
                    # notifier is closed already; after an unmount from outside, here.
                    if self._notifier is not None:
                        self._notifier.close()
            finally:
                lib.fuse_session_unmount(se)
        finally:
            lib.fuse_session_destroy(se)  # calls destroy (the notifier detaches) if init ran
            del argv

    # ------------------------------------------------------------------ helpers
    @property
    def timeout(self) -> float:
        """The entry/attribute timeout of each reply: the operations' own, which follows the
        in-use window (:meth:`EpochOperations.set_window`)."""
        return float(self.ops.timeout)

    def _reply(self, req: int, op: str, answer: Callable[[], None]) -> None:
        try:
            answer()
        except FuseOSError as e:
            self.lib.fuse_reply_err(req, e.errno)
        except NotFound:
            self.lib.fuse_reply_err(req, errno.ENOENT)
        except BaseException:
            log.exception("unexpected error in low-level %s", op)
            self.lib.fuse_reply_err(req, errno.EIO)

    def _entry(self, ino: int, stat: dict[str, int]) -> EntryParam:
        e = EntryParam()
        e.ino = ino
        e.generation = 1
        mfusepy.set_st_attrs(e.attr, stat, use_ns=True)
        e.attr.st_ino = ino
        e.attr_timeout = e.entry_timeout = self.timeout
        return e

    # ------------------------------------------------------------------ lifecycle
    def _init(self, userdata: int, conn: Any) -> None:
        try:
            c = conn.contents
            c.want = wanted_capabilities(c.capable, c.want)
            self._notifier = KernelNotifier(None, session=self._se, inode_of=self.inodes.ino)
            self.ops.start_serving(self._notifier)
        except BaseException:
            log.exception("low-level init failed")

    def _destroy(self, userdata: int) -> None:
        try:
            self.ops.destroy("/")
        except BaseException:
            log.exception("low-level destroy failed")

    # ------------------------------------------------------------------ namespace
    def _lookup(self, req: int, parent: int, name: bytes) -> None:
        def answer() -> None:
            path = _join(self.inodes.path(parent), name.decode(*ENC))
            stat = self.ops.getattr(path)
            e = self._entry(self.inodes.ino(path), stat)
            self.lib.fuse_reply_entry(req, ctypes.byref(e))
        self._reply(req, "lookup", answer)

    def _getattr(self, req: int, ino: int, fi: Any) -> None:
        def answer() -> None:
            st = mfusepy.c_stat()
            fh = fi.contents.fh if fi else None  # set when the kernel asks for an open file's
            # By number: a stat/fstat of an open manifest whose epoch retired answers from the open.
            stat = self.ops.getattr(self.inodes.path(ino), fh, by_number=True)
            mfusepy.set_st_attrs(st, stat, use_ns=True)
            st.st_ino = ino
            self.lib.fuse_reply_attr(req, ctypes.byref(st), self.timeout)
        self._reply(req, "getattr", answer)

    def _readlink(self, req: int, ino: int) -> None:
        def answer() -> None:
            self.lib.fuse_reply_readlink(req, self.ops.readlink(self.inodes.path(ino)).encode(*ENC))
        self._reply(req, "readlink", answer)

    def _opendir(self, req: int, ino: int, fi: Any) -> None:
        def answer() -> None:
            path = self.inodes.path(ino)
            handle = self.ops.opendir(path)  # a folder, or a translated error
            if handle == 0:  # a folder that changes (no epoch held): its listings are snapshots
                handle = next(self._listing_handles)
            try:
                self._folders[handle] = self._folder(path)
            except BaseException:  # retired meanwhile: the epoch's hold must not stay
                self._forget_listing(handle)
                raise
            fi.contents.fh = handle
            if self.lib.fuse_reply_open(req, fi) == -errno.ENOENT:  # the request was aborted
                self._forget_listing(handle)  # else its epoch would stay held for good
        self._reply(req, "opendir", answer)

    def _folder(self, path: str) -> tuple[str, int | None, int]:
        """``path`` with its first child's inode number and its parent's (:attr:`_folders`)."""
        return path, self.inodes.first_child_ino(path), self.inodes.ino(path.rpartition("/")[0] or "/")

    def _forget_listing(self, handle: int) -> None:
        """The handle is done: its folder and its listing forgotten, its epoch's hold released."""
        self._folders.pop(handle, None)
        self.ops.releasedir(None, handle)

    def _releasedir(self, req: int, ino: int, fi: Any) -> None:
        def answer() -> None:
            self._forget_listing(fi.contents.fh)
            self.lib.fuse_reply_err(req, 0)
        self._reply(req, "releasedir", answer)

    def _readdir(self, req: int, ino: int, size: int, off: int, fi: Any) -> None:
        handle = fi.contents.fh
        self._reply(req, "readdir", lambda: self._list(req, ino, size, off, handle, plus=False))

    def _readdirplus(self, req: int, ino: int, size: int, off: int, fi: Any) -> None:
        handle = fi.contents.fh
        self._reply(req, "readdirplus", lambda: self._list(req, ino, size, off, handle, plus=True))

    def _list(self, req: int, ino: int, size: int, off: int, handle: int, *, plus: bool) -> None:
        """Entries from offset ``off`` while they fit in ``size`` bytes; with ``plus`` each carries
        its attributes and inode number, so the kernel caches the entry without a lookup."""
        folder = self._folders.get(handle)
        if folder is None:  # a handle libfuse made without our opendir (none expected)
            folder = self._folder(self.inodes.path(ino))
        path, first, parent = folder
        # One listing per handle, from offset 0 until releasedir (EpochOperations.held_listing):
        # recomputed at each call, a cut in between would shift the root's offsets (``latest``
        # twice, an entry skipped) and a retirement would fail an epoch folder's listing half-way.
        here, listing = self.ops.held_listing(path, off, handle)
        buf = ctypes.create_string_buffer(size)
        base = ctypes.addressof(buf)
        pos = 0
        e = EntryParam()
        e.generation = 1
        e.attr_timeout = e.entry_timeout = self.timeout
        add_plus, add = self.lib.fuse_add_direntry_plus, self.lib.fuse_add_direntry
        for i in range(off, len(listing) + 2):
            if i < 2:  # "." and "..": the kernel links neither, and inode 0 asks for no entry
                name, attr, child, shown = ("." if i == 0 else ".."), here, 0, (ino if i == 0 else parent)
            else:
                name, attr = listing[i - 2]
                if first is not None:
                    child = first + i - 2
                else:
                    try:
                        child = self.inodes.ino(_join(path, name))
                    except NotFound:  # an epoch past the inode numbers' range: not shown
                        if name not in self._unnumbered and len(self._unnumbered) < 64:
                            self._unnumbered.add(name)
                            log.warning("%s has no inode number: left out of the listing", _join(path, name))
                        continue
                shown = child
            e.ino = child
            e.attr = self.ops.c_stat(attr)
            e.attr.st_ino = shown
            raw = name.encode(*ENC)
            if plus:
                n = add_plus(req, base + pos, size - pos, raw, ctypes.byref(e), i + 1)
            else:
                n = add(req, base + pos, size - pos, raw, ctypes.byref(e.attr), i + 1)
            if n > size - pos:
                break
            pos += n
        self.lib.fuse_reply_buf(req, buf, pos)

    # ------------------------------------------------------------------ control files
    def _open(self, req: int, ino: int, fi: Any) -> None:
        def answer() -> None:
            c = fi.contents
            info = _FileInfo(flags=c.flags)
            self.ops.open(self.inodes.path(ino), info)
            c.fh = info.fh
            c.bits = (c.bits | (DIRECT_IO_BIT if info.direct_io else 0)
                      | (KEEP_CACHE_BIT if info.keep_cache else 0))
            if self.lib.fuse_reply_open(req, fi) == -errno.ENOENT:  # the request was aborted
                self.ops.release(None, info)
        self._reply(req, "open", answer)

    def _read(self, req: int, ino: int, size: int, off: int, fi: Any) -> None:
        def answer() -> None:
            data = self.ops.read(None, size, off, _FileInfo(fh=fi.contents.fh))
            self.lib.fuse_reply_buf(req, data, len(data))
        self._reply(req, "read", answer)

    def _release(self, req: int, ino: int, fi: Any) -> None:
        def answer() -> None:
            self.ops.release(None, _FileInfo(fh=fi.contents.fh))
            self.lib.fuse_reply_err(req, 0)
        self._reply(req, "release", answer)

    def _statfs(self, req: int, ino: int) -> None:
        def answer() -> None:
            st = mfusepy.c_statvfs()
            for key, value in self.ops.statfs("/").items():
                setattr(st, key, value)
            self.lib.fuse_reply_statfs(req, ctypes.byref(st))
        self._reply(req, "statfs", answer)

    def _read_only(self, req: int, *_args: Any) -> None:
        self.lib.fuse_reply_err(req, errno.EROFS)
