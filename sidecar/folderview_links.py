"""The next epoch's tree on disk, under a temporary name: folders, entries and what they cost.

Why apart from :mod:`.folderview_ahead`: that module decides *which* samples the next epoch holds
(a set that follows the store); this one only keeps a folder tree equal to what it is told, cheaply
and so that a reader never sees it until it is whole. It lives under a dot-prefixed temporary name
(``.epochfs-ahead-…``: readers and ``layout.list_epochs`` skip it, recovery removes it after a
kill) until :meth:`LinkTree.show` renames it to ``epoch-N``.

An entry carried over from the published epoch is a **hard link** of that epoch's symlink
(``link``: no new inode, no new target block, ~1.5x cheaper than ``symlink`` here), so a sample
costs one inode however many epochs show it; a new sample gets a symlink. A folder the last entry
left is removed at once (a whole build would not show it). Links are made folder by folder through
one descriptor of each folder (``symlinkat``/``linkat``): no path walk per entry. Every call names
a path relative to the tree's own folder (``dir_fd``), never the absolute one: a key may be 4,096
bytes, and the folder's path before it would pass the kernel's limit on one path (PATH_MAX), which
failed the publisher at every start; relative to the tree, a key's folder always fits.

:func:`epochfs.torchclient.publish.write_tree` writes an epoch whole, the same way, when no tree
built ahead can stand for it; the rename that shows either is :func:`epochfs.torchclient.publish.show`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from epochfs.torchclient.publish import remove_tree, show

AHEAD_TAG = "ahead-"
"""After the folder view's temporary prefix: the next epoch's tree, built ahead."""


class Clash(Exception):
    """A path is both a file and a folder, or two entries have one name: the tree cannot show
    the epoch as the tree builder would (it shows the first in path order)."""


class LinkTree:
    """A folder tree under a temporary name in ``folder``, with a count of what each folder holds."""

    def __init__(self, folder: Path, temp_prefix: str) -> None:
        self.path = folder / f"{temp_prefix}{AHEAD_TAG}{os.getpid()}-{secrets.token_hex(4)}"
        os.mkdir(self.path, 0o755)
        self.dirs: set[str] = {""}
        self._count: dict[str, int] = {"": 0}  # entries and folders in each folder of the tree
        self._dirty: set[str] = set()
        self.base: Path | None = None
        """The published epoch whose entries are hard-linked (``link`` in :meth:`link_into`)."""

    @contextlib.contextmanager
    def _tree(self) -> Iterator[int]:
        """A descriptor of the tree's folder, what every path of the tree is made relative to."""
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            yield fd
        finally:
            os.close(fd)

    @staticmethod
    def _open(rel: str, tree: int) -> int:
        """A descriptor of the tree's folder ``rel`` (``""``: the tree's own)."""
        return os.open(rel or ".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=tree)

    def folders(self) -> list[str]:
        """The folders of the tree, but its own (what ``classes.json`` records for the epoch)."""
        return sorted(d for d in self.dirs if d)

    def _mkdirs(self, rel: str, tree: int) -> None:
        parts = rel.split("/")
        for k in range(1, len(parts) + 1):
            sub = "/".join(parts[:k])
            if sub in self.dirs:
                continue
            try:
                os.mkdir(sub, 0o755, dir_fd=tree)
            except FileExistsError:
                raise Clash(f"{sub!r} is a file and a folder") from None
            self.dirs.add(sub)
            self._count[sub] = 0
            self._count[sub.rpartition("/")[0]] += 1
            self._dirty.add(sub.rpartition("/")[0])

    def link_into(self, parent: str, entries: list[tuple[str, str, bool]]) -> None:
        """Make ``(name, target, carried)`` entries in folder ``parent`` (created as needed);
        ``carried``: the entry is the base epoch's, hard-linked when the base has it."""
        with self._tree() as tree:
            self._mkdirs(parent, tree)
            fd = self._open(parent, tree)
        src = -1
        try:
            if self.base is not None and any(c for _, _, c in entries):
                with contextlib.suppress(OSError):
                    base = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY)
                    try:
                        src = self._open(parent, base)
                    finally:
                        os.close(base)
            for name, target, carried in entries:
                try:
                    if src >= 0 and carried:
                        try:  # the published entry of this very sample: share its inode
                            os.link(name, name, src_dir_fd=src, dst_dir_fd=fd, follow_symlinks=False)
                        except OSError as e:
                            if e.errno == errno.EEXIST:
                                raise
                            os.symlink(target, name, dir_fd=fd)
                    else:
                        os.symlink(target, name, dir_fd=fd)
                except FileExistsError:
                    raise Clash(f"{parent}/{name} clashes with another path") from None
                self._count[parent] += 1
            self._dirty.add(parent)
        finally:
            os.close(fd)
            if src >= 0:
                os.close(src)

    def unlink(self, rel: str) -> None:
        """Remove entry ``rel``, and the folders it leaves empty (a whole build would not show them)."""
        parent, _, name = rel.rpartition("/")
        with self._tree() as tree:
            with contextlib.suppress(FileNotFoundError):
                fd = self._open(parent, tree)  # by its folder: a key of 4,096 bytes is no path to unlink
                try:
                    os.unlink(name, dir_fd=fd)
                finally:
                    os.close(fd)
            self._unlinked(parent, tree)

    def _unlinked(self, parent: str, tree: int) -> None:
        """One entry of folder ``parent`` is gone: the folders it leaves empty go too."""
        while True:
            self._dirty.add(parent)
            self._count[parent] -= 1
            if parent == "" or self._count[parent] > 0:
                return
            os.rmdir(parent, dir_fd=tree)
            self.dirs.discard(parent)
            del self._count[parent]
            self._dirty.discard(parent)
            parent = parent.rpartition("/")[0]

    def sync_dirs(self) -> None:
        """fsync the folders changed since the last call."""
        with self._tree() as tree:
            for rel in sorted(self._dirty):
                try:
                    fd = self._open(rel, tree)
                except FileNotFoundError:
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        self._dirty.clear()

    def show(self, visible: Path, mode: int) -> None:
        """Every folder made ``mode`` (``0555``), then one rename makes the whole tree ``visible``
        (its folder fsynced after)."""
        with self._tree() as tree:
            for rel in self.dirs:
                os.chmod(rel or ".", mode, dir_fd=tree)
        show(self.path, visible)

    def remove(self) -> None:
        """Remove the tree."""
        remove_tree(self.path)
