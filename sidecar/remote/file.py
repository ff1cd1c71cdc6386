"""``file:///path``: a local or mounted folder (NFS, a PVC), walked in sorted order.

Names are read as bytes, so non-UTF-8 names are seen and listed as bytes keys rather than
crashing the listing; symlinked folders are not followed. What the walk passes over (an entry it
cannot read, such as a dangling symlink into a volume not mounted; a symlinked folder; a socket or
a fifo) is logged once per kind with the first example and counted at the walk's end: a dataset
missing a linked folder must not look complete. A folder that cannot be read (EIO or ESTALE on
a flaky NFS or FUSE mount, EACCES) fails the listing instead, as fsspec's walk does
(:meth:`~.fsspec.FsspecRemote.list`): a listing that ended without it would be complete, and a
relist would drop its keys from the catalog; the listing is tried again. Except where the
listing's caller passes such a folder over (:meth:`FileRemote.walk`: a cache's first listing, for
a folder it may not read, such as a volume's ``lost+found`` to a sidecar that does not run as
root, which would otherwise keep every key from being listed). The version tag is
``mtime:<ns>``. The standard library's errors are typed where they arise (ENOENT: not found,
EACCES: denied; other errors such as EIO pass through).

Every path is taken relative to a folder's descriptor (``openat``, ``os.scandir`` on an fd),
never as the root joined to a key: a dataset's keys may be up to 4,096 bytes
long, and the root's own path on top of one would pass the kernel's limit on one path (PATH_MAX),
failing with ENAMETOOLONG. A folder whose relative path passes 4,096 bytes is not walked: no key
below it could be a path in ``epoch-N/`` (:mod:`epochfs.sidecar.keys`), so it is listed as one key
of that path, which the listing's filter skips and counts as ``path over 4096 bytes``.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Callable, Iterator
from typing import BinaryIO, NoReturn

from epochfs.sidecar.remote.base import (
    Changed,
    PassOver,
    Reader,
    Remote,
    RemoteError,
    RemoteObject,
    Transient,
)
from epochfs.sidecar.remote.errors import Translated, translate
from epochfs.sidecar.remote.objects import replace_local
from epochfs.sidecar.remote.urls import local_root

log = logging.getLogger("epochfs.remote")

_OS = Translated()  # the standard library's errors only

DEEPEST = 4096
"""The relative path of a folder past which the walk does not go: the longest key the catalog takes
(:data:`epochfs.sidecar.keys.MAX_PATH_BYTES`, in a layer above this package, which may not import
it; tests/remote/test_file_long_paths.py checks the two agree). No key below such a folder could be
a path in ``epoch-N/``, and a walk on would go as deep as the folders do."""
_PATH_ARG = os.pathconf("/", "PC_PATH_MAX")
"""The kernel's limit on one path argument, its NUL counted (ENAMETOOLONG at it)."""
_SEARCH = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY
"""A folder opened to resolve names under it: search permission alone, as a path's walk needs."""
_LIST = os.O_RDONLY | os.O_DIRECTORY
"""A folder opened to read its names."""
_KINDS = ((stat.S_ISFIFO, "a fifo"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def _open_at(base: int, rel: bytes, flags: int) -> int:
    """``openat(base, rel)`` for a relative path of any length: one the kernel would refuse as too
    long is resolved a part at a time, each part under :data:`_PATH_ARG` bytes opened as a folder
    to resolve the rest from. A key of 4,096 bytes is a legal key, one byte over the limit."""
    opened: list[int] = []
    try:
        while len(rel) >= _PATH_ARG:
            cut = rel.rfind(b"/", 0, _PATH_ARG)
            if cut <= 0:  # one name over the limit: no filesystem holds it
                raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
            base = os.open(rel[:cut], _SEARCH, dir_fd=base)
            opened.append(base)
            rel = rel[cut + 1:]
        return os.open(rel, flags, dir_fd=base)
    finally:
        for fd in opened:
            os.close(fd)


def _regular(fd: int, key: str) -> os.stat_result:
    """The stat of ``fd``, opened without blocking, refused unless a regular file: a key replaced
    by a fifo since the listing would hold a download slot until a writer came (a blocking open
    waits for one, a read for its bytes), a device would be read without end. A folder is
    IsADirectoryError, as a plain ``open`` says; the others are :class:`Changed` (skipped at once)."""
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode):
        return st
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), key)
    kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
    raise Changed(f"{key}: {kind} now, not a regular file (replaced since the listing)")


def _identity(st: os.stat_result) -> tuple[int, ...]:
    """What changes when a file is written or replaced: its inode, size and times."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class _FileReader(Reader):
    """One file's bytes, checked to be one version: a file written while it is read (in place, a
    writer not yet done) would give a body that is neither the old bytes nor the new, which no
    checksum can catch (a ``file://`` remote stores none). The file's stat at the open is compared
    with its stat once the body is read; a difference fails the read as :class:`Transient` (the
    next try reads the file as it is then). The version recorded is the open's ``mtime``, so a
    file rewritten after the listing is cached under the version it was read at."""

    etag_is_md5 = False  # the etag is the mtime tag, no content hash

    def __init__(self, f: BinaryIO, st: os.stat_result) -> None:
        self._f = f
        self._opened = _identity(st)
        self._read = 0
        self.size = st.st_size
        self.etag = f"mtime:{st.st_mtime_ns}"

    def read(self, n: int) -> bytes:
        with _OS:
            data = self._f.read(n)
        self._advance(len(data))
        return data

    def readinto(self, buf: memoryview) -> int:
        with _OS:
            n: int | None = self._f.readinto(buf)  # type: ignore[attr-defined]  # a raw FileIO
        self._advance(n or 0)
        return n or 0

    def _advance(self, n: int) -> None:
        """Count ``n`` bytes read; at the body's end (its size reached, or the file's end), check
        that the file is the one opened."""
        self._read += n
        if n and self._read < (self.size or 0):
            return
        with _OS:
            now = _identity(os.fstat(self._f.fileno()))
        if now != self._opened:
            raise Transient(f"the file changed while it was read ({self._read} bytes read; size "
                            f"{self._opened[2]} -> {now[2]}, mtime {self._opened[3]} -> {now[3]})")

    def close(self) -> None:
        self._f.close()


UNREADABLE = "entries that could not be read"
LINKED_FOLDER = "symlinked folders not followed"
NOT_A_FILE = "entries that are not regular files"


class _Passed:
    """What one walk passed over, by kind: a count and the first name, for one warning a kind as
    it is met and a line at the end (a walk of a million files logs no more than four lines)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.first: dict[str, str] = {}

    def add(self, kind: str, name: bytes, why: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if kind not in self.first:
            self.first[kind] = shown = os.fsdecode(name)
            log.warning("listing passes over %s: %s (not listed; the rest are counted at the "
                        "listing's end)", shown, why)

    def report(self, url: str) -> None:
        if self.counts:
            log.warning("%s: listed without %s", url, "; ".join(
                f"{n} {kind} (first: {self.first[kind]})" for kind, n in self.counts.items()))


_FOLDER = "folder"
"""An entry :func:`_entries` found to be a folder, walked where its name falls."""
_Found = RemoteObject | str | tuple[str, str]
"""What one entry of a folder is: an object, :data:`_FOLDER`, or passed over (its kind and why)."""


def _key(name: bytes) -> str | bytes:
    """A walked name as a key: text where it is UTF-8, else its bytes (the filter skips those)."""
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        return name


def _entries(root: int, rel: bytes) -> list[tuple[bytes, _Found]]:
    """The folder ``rel``'s entries, sorted by name, each what it is: read and stat'ed through
    the folder's own descriptor, closed before its sub-folders are walked (a walk holds a few
    descriptors at a time, however deep its folders go)."""
    fd = _open_at(root, rel.rstrip(b"/") or b".", _LIST)
    try:  # (a scandir of a descriptor names its entries in text: their bytes are sorted, as keys)
        named = sorted(((rel + os.fsencode(entry.name), entry) for entry in os.scandir(fd)),
                       key=lambda pair: pair[0])
        return [(name, _found(entry, name)) for name, entry in named]
    finally:
        os.close(fd)


def _found(entry: os.DirEntry[str], name: bytes) -> _Found:
    """One entry: a folder (not a symlinked one), an object, or why it is passed over."""
    try:
        if entry.is_dir(follow_symlinks=False):
            return _FOLDER
        st = entry.stat(follow_symlinks=True)
    except OSError as e:
        return (UNREADABLE, e.strerror or str(e))
    if stat.S_ISDIR(st.st_mode):
        return (LINKED_FOLDER, "a symlinked folder (not followed)")
    if not stat.S_ISREG(st.st_mode):
        return (NOT_A_FILE, "not a regular file")
    return RemoteObject(_key(name), st.st_size, f"mtime:{st.st_mtime_ns}")


def _components(key: bytes) -> tuple[bytes, ...]:
    return tuple(key.split(b"/"))


class FileRemote(Remote):
    """``file:///path``: a local or mounted folder, walked in sorted order."""

    sorted_listing = False  # a per-folder sorted walk is not byte order across folders

    def walk_order(self) -> Callable[[bytes], tuple[bytes, ...]]:
        """Each folder's names sorted and a folder walked where its name falls: the order of the
        keys' path components (``d/x`` before ``d.txt``), not byte order."""
        return _components

    def __init__(self, *, url: str) -> None:
        try:
            root = local_root(url)
        except ValueError as e:
            raise RemoteError(str(e)) from None
        self.url = url
        self.root = os.fsencode(root or "/")
        if not os.path.isdir(self.root):
            raise RemoteError(f"{url}: {root} is not a folder")

    def list(self) -> Iterator[RemoteObject]:
        return self._listing(None)

    def walk(self, pass_over: PassOver) -> Iterator[RemoteObject]:
        """The walk; a folder below the root that cannot be read is passed over where
        ``pass_over`` says so (the root never is: a dataset that cannot be read is no empty one)."""
        return self._listing(pass_over)

    def _listing(self, pass_over: PassOver | None) -> Iterator[RemoteObject]:
        passed = _Passed()
        try:
            root = os.open(self.root, _SEARCH)
        except OSError as e:  # an unmounted volume is not an empty dataset
            self._cannot_list(b"", e)
        try:
            yield from self._walk(root, passed, pass_over)
        finally:
            os.close(root)
        passed.report(self.url)

    def _walk(self, root: int, passed: _Passed, pass_over: PassOver | None) -> Iterator[RemoteObject]:
        """The keys under the root, in walk order: a folder's keys where its name falls. A stack
        of the folders being read, not a call a level: a chain of a thousand one-letter folders (a
        key of 2 KB, within the 4,096 bytes a key may have) passed Python's recursion limit and
        failed the whole listing."""
        stack: list[Iterator[tuple[bytes, _Found]]] = [self._folder(root, b"", pass_over)]
        while stack:
            entry = next(stack[-1], None)
            if entry is None:
                stack.pop()
                continue
            name, found = entry
            if isinstance(found, RemoteObject):
                yield found
            elif isinstance(found, tuple):
                passed.add(found[0], name, found[1])
            elif len(name) > DEEPEST:  # a key of its path, for the filter to skip and count
                yield RemoteObject(_key(name), 0, "")
            else:
                stack.append(self._folder(root, name + b"/", pass_over))

    def _folder(self, root: int, rel: bytes, pass_over: PassOver | None) -> Iterator[tuple[bytes, _Found]]:
        """The entries of the folder ``rel`` (``b""``, or ending in ``/``) in walk order
        (:func:`_entries`); none for one removed since its parent was read, or passed over."""
        try:
            return iter(_entries(root, rel))
        except FileNotFoundError as e:
            if not rel:  # the root itself: an unmounted volume is not an empty dataset
                self._cannot_list(rel, e)
            return iter(())  # a folder removed since its parent was read: its keys are gone
        except OSError as e:
            if rel and pass_over is not None and pass_over(os.fsdecode(rel), translate(e) or e):
                return iter(())
            self._cannot_list(rel, e)

    def _cannot_list(self, rel: bytes, e: OSError) -> NoReturn:
        """Fail the listing on a folder that could not be read, naming it and the errno, from the
        typed failure (EACCES is Denied: the refusal's cause names the access to check)."""
        folder = os.path.join(self.root, rel.rstrip(b"/")) if rel else self.root
        errno_name = errno.errorcode.get(e.errno or 0, str(e.errno))
        raise RemoteError(f"cannot list {self.url}: folder {os.fsdecode(folder)}: "
                          f"{errno_name} ({e.strerror or e})") from (translate(e) or e)

    def _at(self, key: str, flags: int) -> int:
        """``key`` opened relative to the root's descriptor (:func:`_open_at`)."""
        root = os.open(self.root, _SEARCH)
        try:
            return _open_at(root, os.fsencode(key), flags)
        finally:
            os.close(root)

    def _open_regular(self, key: str) -> tuple[int, os.stat_result]:
        """``key`` opened for reading, refused unless a regular file (:func:`_regular`), blocking
        again for the reads once it is known to be one."""
        fd = self._at(key, os.O_RDONLY | os.O_NONBLOCK)
        try:
            st = _regular(fd, key)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def open(self, key: str, *, checksum: bool = False) -> Reader:
        with _OS:  # ENOENT: not found; EACCES: denied; other errors (EIO) pass through
            fd, st = self._open_regular(key)
            try:
                f = os.fdopen(fd, "rb", buffering=0)
            except BaseException:
                os.close(fd)
                raise
            return _FileReader(f, st)

    def object_size(self, key: str) -> int:
        with _OS:
            fd = self._at(key, getattr(os, "O_PATH", os.O_RDONLY | os.O_NONBLOCK))
            try:
                return os.fstat(fd).st_size
            finally:
                os.close(fd)

    def read_range(self, key: str, start: int, length: int) -> bytes:
        with _OS:
            fd, _ = self._open_regular(key)
            try:
                return os.pread(fd, max(0, length), start) if length > 0 else b""
            finally:
                os.close(fd)

    def _path(self, key: str) -> bytes:
        return os.path.join(self.root, os.fsencode(key))

    def put_file(self, key: str, path: str) -> None:
        """Copy the file at ``path`` to ``key`` under the root by the one atomic writer
        (:func:`~.objects.replace_local`: a hidden temp beside it, fsynced, renamed over it; a
        failure leaves no temp in the dataset, where a listing would take it for a sample)."""
        target = os.fsdecode(self._path(key))
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            replace_local(path, target)
        except OSError as e:
            raise RemoteError(f"cannot write {self.url.rstrip('/')}/{key}: {e}") from e


def open_file(url: str, **_: object) -> FileRemote:
    """The registry's opener for ``file://``."""
    return FileRemote(url=url)


__all__ = ["FileRemote", "open_file"]
