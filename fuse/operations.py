"""The mfusepy translator: FUSE calls in, :class:`~epochfs.fuse.view.View` answers out.

Thin on purpose (ratarmount style): every namespace decision lives in the view. What is here is
what only FUSE knows about:

* errors: unknown names ENOENT, every write-type call EROFS, a read of a sample the remote lost EIO
  (counted and logged, :mod:`epochfs.fuse.lost`), anything unexpected EIO (logged);
* caching: long entry/attribute timeouts for the immutable epoch trees, negative lookups uncached
  (so a new epoch shows at once), ``FUSE_CAP_CACHE_SYMLINKS`` so the kernel keeps symlink targets,
  readdir-plus so listing a folder fills the kernel's entry cache without one lookup per file;
* change: the refresher and the warmer (:mod:`epochfs.fuse.kernelcache`) start and stop with the mount.

Only calls that are implemented are defined here (mfusepy registers any attribute named like a
FUSE call, and calls left to libfuse in C are faster than Python no-ops).

Import it only once ``FUSE_LIBRARY_PATH`` is set (:mod:`epochfs.fuse.server`): mfusepy binds libfuse then.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import itertools
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import mfusepy

from epochfs.fuse.inuse import WindowFollower, cache_timeout, read_debounce
from epochfs.fuse.kernelcache import KernelNotifier, Refresher, Warmer
from epochfs.fuse.mounting import MountEntry, find_mount
from epochfs.fuse.openfiles import OpenFiles
from epochfs.fuse.translate import (
    FUSE_FILL_DIR_PLUS,
    FUSE_READDIR_PLUS,
    FuseOSError,
    translate_errors,
    wanted_capabilities,
)
from epochfs.fuse.view import FILE_MODE, Attr, NotFound, View
from epochfs.torchclient.layout import VIEW_REFRESH_SECONDS, parse_epoch_name

log = logging.getLogger("epochfs.fuse")

__all__ = ["EpochFUSE", "EpochOperations", "FuseOSError", "translate_listing", "wanted_capabilities"]

WRITE_CALLS = (
    "write", "create", "mkdir", "mknod", "unlink", "rmdir", "rename", "link", "symlink", "chmod",
    "chown", "truncate", "utimens", "setxattr", "removexattr", "fallocate",
)
"""Every call that would change the mount, named as mfusepy names them: each answers EROFS, on both
APIs (:mod:`epochfs.fuse.lowlevel` takes its list from here, :data:`SETATTR_CALLS` as one call)."""
SETATTR_CALLS = ("chmod", "chown", "truncate", "utimens")
"""The calls of :data:`WRITE_CALLS` that libfuse's low-level API makes one ``setattr``."""

T = TypeVar("T")


def _read_only(*_args: Any, **_kwargs: Any) -> int:
    raise FuseOSError(errno.EROFS)


def _refusing_writes(cls: type[T]) -> type[T]:
    """Every call of :data:`WRITE_CALLS` defined on ``cls`` to answer EROFS (mfusepy registers
    each name defined on the class)."""
    for name in WRITE_CALLS:
        setattr(cls, name, staticmethod(_read_only))
    return cls


@_refusing_writes
class EpochOperations(mfusepy.Operations):
    """The epochfs mount: a read-only namespace whose files are symlinks into the cache."""

    use_ns = True

    def __init__(self, *, view: View, timeout: float, refresh_interval: float = VIEW_REFRESH_SECONDS,
                 mount: Path | None = None, warm_files: int = 200_000,
                 in_use_seconds: float | None = None) -> None:
        """``in_use_seconds``: the window ``timeout`` and the view's debounce were derived from;
        given, the server follows the store's window from then on (:mod:`epochfs.fuse.inuse`)."""
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.view = view
        self.timeout = timeout
        self.window = (None if in_use_seconds is None
                       else WindowFollower(view.store, in_use_seconds, self.set_window))
        self.warmer = (Warmer(view=view, mount=mount, max_files=warm_files)
                       if mount is not None and warm_files > 0 else None)
        self.refresher = Refresher(view=view, interval=refresh_interval, on_tick=self._after_tick,
                                   warmer=self.warmer)
        self.mount = mount
        self.made: MountEntry | None = None  # the mount's entry at init: the one to remove at exit
        # Stopping: a signal thread calls stop_serving() while the loop runs; libfuse calls destroy()
        # once the loop has ended and the device is closed, just before it frees the session.
        self._life = threading.Lock()
        self._stopping = False
        self._torn_down = threading.Event()
        self.open_files = OpenFiles()
        """An open control file's bytes and attributes as of its open: the kernel asks for them
        again with the handle before a read (its cached ones dropped), and a stat or fstat asks
        without it, also once the name is gone (:mod:`epochfs.fuse.openfiles`)."""
        self._dir_holds: dict[int, int] = {}
        self._dir_listings: dict[int, tuple[Attr, Sequence[tuple[str, Attr]]]] = {}
        """Folder handle -> the listing its first readdir read: the later readdir calls of the
        same handle continue it (:meth:`held_listing`) until the handle is released."""
        self._next_handle = itertools.count(1)
        self._uid, self._gid = view.uid, view.gid
        # Python-side calls by kind: the benchmark and the shutdown log use them to show how much
        # work the kernel's caches leave to Python (ideally: one readlink per file, nothing else).
        self.calls: collections.Counter[str] = collections.Counter()
        self._c_stats: dict[Attr, Any] = {}
        self._config: Any = None  # libfuse's high-level config (its timeouts), while serving
        # Guards _config against the teardown; not _life, which stop_serving holds while it joins
        # the refresher (the thread that calls set_window).
        self._config_lock = threading.Lock()

    def _stat(self, attr: Attr) -> dict[str, int]:
        return attr.to_stat(uid=self._uid, gid=self._gid)

    def c_stat(self, attr: Attr) -> Any:
        """A filled ``struct stat`` per distinct Attr (all files of an epoch share a few), for the
        readdir-plus of both adapters. Not named like a FUSE call, so mfusepy does not register it."""
        st = self._c_stats.get(attr)
        if st is None:
            if len(self._c_stats) > 4096:
                self._c_stats.clear()
            st = mfusepy.c_stat()
            mfusepy.set_st_attrs(st, self._stat(attr), use_ns=True)
            self._c_stats[attr] = st
        return st

    # ------------------------------------------------------------------ lifecycle
    def init_with_config(self, conn_info: Any, config_3: Any) -> None:
        if config_3 is not None:
            config_3.entry_timeout = self.timeout
            config_3.attr_timeout = self.timeout
            config_3.negative_timeout = 0.0
            with self._config_lock:
                self._config = config_3  # libfuse reads its timeouts there at every reply
            config_3.use_ino = 0
            config_3.kernel_cache = 0
            config_3.direct_io = 0
            config_3.auto_cache = 0
        if conn_info is not None:
            conn_info.want = wanted_capabilities(conn_info.capable, conn_info.want)
        fuse_ptr = mfusepy._libfuse.fuse_get_context().contents.fuse
        self.start_serving(KernelNotifier(fuse_ptr))

    def start_serving(self, notifier: KernelNotifier) -> None:
        """The mount is up (libfuse's init): start the refresher with the kernel's notifier."""
        with self._life:
            self.made = find_mount(self.mount) if self.mount is not None else None  # on top: ours
            if self._stopping:  # a signal came before the mount was up: end the loop at once
                notifier.end_session()
                log.info("mounted while stopping: ending at once")
                return
            self.refresher.start(notifier)
        log.info("mounted: entry/attr timeout %.0fs, negative lookups uncached", self.timeout)

    def set_window(self, in_use_seconds: float) -> None:
        """Serve with the timeout and read debounce of another in-use window from now on (the
        kernel keeps what it cached under the old timeout until that expires). The low-level
        adapter reads :attr:`timeout` at every reply; the high-level one's config is libfuse's
        memory, written only while the session lives."""
        timeout = cache_timeout(in_use_seconds)
        self.timeout = timeout
        self.view.read_debounce = read_debounce(in_use_seconds)
        with self._config_lock:
            if self._config is not None:
                self._config.entry_timeout = timeout
                self._config.attr_timeout = timeout

    def _after_tick(self) -> None:
        """After each refresh: follow the store's in-use window; the kernel forgets the names of
        open manifests whose epoch retired (:meth:`OpenFiles.forget_gone`)."""
        if self.window is not None:
            self.window.check()
        self.open_files.forget_gone(self.view, self.refresher.notifier)

    def stop_serving(self, wake: Callable[[], None] | None = None) -> None:
        """End the mount cleanly (from the signal thread, while the loop still serves requests).

        The order is the point: first the threads beside the loop stop and the notifier closes (a
        notification in flight completes, since the loop still answers the kernel), and only then
        is libfuse's loop asked to end (``fuse_session_exit``). libfuse then closes the device and
        frees the session with nothing of ours left to touch them. ``fuse_session_exit`` only sets
        a flag that the loop's main thread checks when it wakes, so ``wake`` (a signal to that
        thread) is called until the loop has ended. Nothing here waits on the mount itself: a
        server waiting on its own mount can hang for good.
        """
        with self._life:
            if self._stopping:
                return
            self._stopping = True
            self.refresher.stop()
            if self.warmer is not None:
                self.warmer.stop()
            # Before init there is no session yet: init sees _stopping and ends the loop itself.
            ended = self.refresher.notifier.end_session()
        while ended and wake is not None and not self._torn_down.is_set():
            wake()
            self._torn_down.wait(0.1)

    def loop_ended(self) -> None:
        """The FUSE loop has returned (destroy ran, or the mount never came up)."""
        self._teardown()

    def _teardown(self) -> None:
        with self._life, self._config_lock:
            self._stopping = True
            self._config = None
            self.refresher.notifier.detach()
            self._torn_down.set()
        self.refresher.stop()
        if self.warmer is not None:
            self.warmer.stop()

    def destroy(self, path: str) -> None:
        # Called by fuse_destroy after the device is closed and before the session is freed: from
        # here on nothing may call into libfuse (KernelNotifier.detach waits for a call in flight).
        self._teardown()
        log.info("unmounted (the kernel's and libfuse's caches freed); calls served: %s",
                 dict(sorted(self.calls.items())) or "none")

    # ------------------------------------------------------------------ namespace
    @translate_errors
    def getattr(self, path: str, fh: Any = None, *, by_number: bool = False) -> dict[str, int]:
        """``fh``: given before a read, not for a stat/fstat. ``by_number``: an inode the kernel
        holds (low-level getattr), not a name (lookup): a manifest whose epoch retired answers
        from an open of it still held, so its fstat and mmap go on as its reads do."""
        self.calls["getattr"] += 1
        if fh is not None and not isinstance(fh, int):  # mfusepy with raw_fi: the fuse_file_info
            fh = fh.fh
        held = self.open_files.attr(fh) if fh else None
        if held is None and path is not None and self.view.is_mutable_file(path):
            held = self.open_files.newest(path)  # status.json's stat/fstat: the open's document
        if held is not None:  # an open file's: its bytes are the open's, whatever the view says now
            return self._stat(held)
        before = self.view.snapshot
        try:
            attr = self.view.getattr(path)
        except NotFound:
            held = self.open_files.newest(path) if by_number else None
            if held is None:
                raise
            return self._stat(held)
        if self.view.snapshot is not before:
            self.refresher.poke()  # a cut on lookup happened: refresh latest/status now
        if self.warmer is not None and attr.is_dir and path.count("/") == 1:
            n = parse_epoch_name(path[1:])
            if n is not None:
                self.warmer.request(n)
        return self._stat(attr)

    @translate_errors
    def readlink(self, path: str) -> str:
        self.calls["readlink"] += 1
        return self.view.readlink(path)

    def readdir_with_offset(self, path: str, offset: int, fh: int) -> list[Any]:
        """Never called: :meth:`EpochFUSE.readdir_fuse_3` answers every readdir, with readdir-plus.

        It must exist all the same: mfusepy installs libfuse's readdir callback only for operations
        that define ``readdir`` or ``readdir_with_offset``, and without it no folder could be listed.
        """
        raise FuseOSError(errno.ENOSYS)

    def listing(self, path: str) -> tuple[Attr, Sequence[tuple[str, Attr]]]:
        """The folder's own attributes and its entries, for :meth:`EpochFUSE.readdir_fuse_3`.

        Not named ``readdir``: mfusepy would register it as the FUSE call, and EpochFUSE answers
        readdir itself (with readdir-plus), so a plain readdir here would never be called.
        """
        self.calls["readdir"] += 1
        return self.view.getattr(path), self.view.listdir(path)

    def held_listing(self, path: str, offset: int, fh: int) -> tuple[Attr, Sequence[tuple[str, Attr]]]:
        """The listing a readdir at ``offset`` of folder handle ``fh`` continues: the one the
        handle read at offset 0 (a rewinddir reads afresh). A reader lists a folder in several
        calls; recomputed at each, an epoch that retired in between (the view dropped its tree)
        failed the listing half-way with ENOENT. The listing holds the epoch's immutable tree,
        so it stays whole until ``releasedir``. The low-level adapter gives folders outside
        epochs (the root, ``.epochfs``) handles of its own, so their listings hold too: a cut
        between two calls would shift the root's offsets. ``fh`` 0 (the high-level adapter's
        folders outside epochs): computed at each call. Errors come translated (FuseOSError)."""
        if fh == 0:
            return translate_listing(self, path)
        snap = self._dir_listings.get(fh)
        if snap is None or offset == 0:
            snap = self._dir_listings[fh] = translate_listing(self, path)
        return snap

    @translate_errors
    def opendir(self, path: str) -> int:
        """A folder handle inside ``epoch-N`` holds the epoch (kept pinned) until it is released:
        a reader that keeps its epoch open keeps it whole, however long it pauses."""
        self.calls["opendir"] += 1
        n = self.view.open_dir(path)
        if n is None:
            return 0
        handle = next(self._next_handle)
        self._dir_holds[handle] = n
        return handle

    @translate_errors
    def releasedir(self, path: str | None, fh: int) -> int:
        self._dir_listings.pop(fh, None)
        n = self._dir_holds.pop(fh, None)
        if n is not None:
            self.view.close_dir(n)
        return 0

    @translate_errors
    def open(self, path: str, fi: Any) -> int:
        if fi.flags & os.O_ACCMODE != os.O_RDONLY or fi.flags & (os.O_TRUNC | os.O_APPEND):
            raise FuseOSError(errno.EROFS)
        self.calls["open"] += 1
        data = self.view.open_file(path)
        mutable = self.view.is_mutable_file(path)
        mtime = self.view.started  # a mutable file is read with direct I/O: no cached pages to keep
        if not mutable:  # NotFound: its epoch retired since open_file took the bytes
            with contextlib.suppress(NotFound):
                mtime = self.view.getattr(path).mtime  # the lookup's: the kernel keeps its pages
        handle = next(self._next_handle)
        self.open_files.add(handle, path, data, Attr(FILE_MODE, len(data), mtime))
        fi.fh = handle
        if mutable:
            fi.direct_io = 1  # status.json changes: never serve it from the page cache
            # The size the kernel cached (a lookup's, a listing's, an earlier open's) is another
            # document's: dropped before the open returns, so the reader's fstat asks, and getattr
            # answers this open's (tar reads exactly that many bytes: kubectl cp).
            self.refresher.notifier.invalidate(path)
        else:
            fi.keep_cache = 1  # manifests are immutable
        return 0

    @translate_errors
    def read(self, path: str | None, size: int, offset: int, fi: Any) -> bytes:
        data = self.open_files.data(fi.fh)
        if data is None:
            raise FuseOSError(errno.EBADF)
        return data[offset : offset + size]

    @translate_errors
    def release(self, path: str | None, fi: Any) -> int:
        self.open_files.remove(fi.fh)
        return 0

    @translate_errors
    def statfs(self, path: str) -> dict[str, int]:
        stats = self.view.store.stats()
        bsize = 4096
        blocks = max(1, stats.capacity_bytes // bsize)
        used = min(blocks, (stats.cache_bytes + stats.inflight_bytes + bsize - 1) // bsize)
        return {
            "f_bsize": bsize,
            "f_frsize": bsize,
            "f_blocks": blocks,
            "f_bfree": blocks - used,
            "f_bavail": blocks - used,
            "f_files": stats.samples,
            "f_ffree": 0,
            "f_namemax": 255,
        }


class EpochFUSE(mfusepy.FUSE):
    """mfusepy's FUSE with readdir-plus: entries go to the kernel with their attributes.

    mfusepy's readdir passes only the file type to libfuse; with ``FUSE_FILL_DIR_PLUS`` and offsets
    libfuse turns each entry into a cached lookup, so reading every file of a freshly listed epoch
    costs one readlink per file instead of a lookup and a readlink.
    """

    def readdir_fuse_3(self, path: bytes | None, buf: Any, filler: Any, offset: int, fip: Any,
                       flags: int) -> int:
        ops = cast(EpochOperations, self.operations)
        decoded = "/" if path is None else path.decode(self.encoding, self.errors)
        here, listing = ops.held_listing(decoded, offset, fip.contents.fh)
        plus = FUSE_FILL_DIR_PLUS if flags & FUSE_READDIR_PLUS else 0
        encoding, errors = self.encoding, self.errors
        for i in range(offset, len(listing) + 2):
            if i < 2:  # "." and "..": libfuse never looks them up
                name, attr, fill = ("." if i == 0 else ".."), here, 0
            else:
                name, attr = listing[i - 2]
                fill = plus
            if filler(buf, name.encode(encoding, errors), ops.c_stat(attr), i + 1, fill) != 0:
                break
        return 0


translate_listing = translate_errors(EpochOperations.listing)
