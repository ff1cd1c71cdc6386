"""The control files open now (status.json, classes.json, manifests): each handle's bytes and the
attributes of its open, also by path.

A reader's ``stat``/``fstat`` of an open file reaches the server without the handle: the kernel
passes it only when it asks for the size before a read. Answered from the namespace, the size was
another document's (``status.json`` is rendered afresh for each open, so ``tar`` read a size that
was not the open's and padded the archive with NULs) or none at all (a manifest whose epoch retired
while open: ENOENT, and ``mmap`` failed). So a file with open handles is answered from its newest
open (:meth:`OpenFiles.newest`): a changing file (status.json, classes.json) whenever it is asked
for, a manifest when its inode is asked for by number and its name is gone
(:meth:`~epochfs.fuse.operations.EpochOperations.getattr`). Apart from :mod:`.operations` so that
this bookkeeping, and its lock, is one small module.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from epochfs.fuse.packed import PackedBytes
from epochfs.fuse.tree import Attr, NotFound

if TYPE_CHECKING:  # the notifier binds libfuse when imported
    from epochfs.fuse.lowlevel_notify import KernelNotifier
    from epochfs.fuse.view import View


class OpenFiles:
    """Handle -> (path, bytes, attributes) of each open control file. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[int, bytes | PackedBytes] = {}
        self._attrs: dict[int, Attr] = {}
        self._paths: dict[int, str] = {}
        self._by_path: dict[str, dict[int, Attr]] = {}
        """Path -> its open handles' attributes, the newest open last (insertion order)."""
        self._forgotten: set[str] = set()
        """Open paths whose name the kernel was told to forget (:meth:`forget_gone`)."""

    def add(self, handle: int, path: str, data: bytes | PackedBytes, attr: Attr) -> None:
        """``handle`` is an open of ``path`` that reads ``data``, sized by ``attr``."""
        with self._lock:
            self._data[handle] = data
            self._attrs[handle] = attr
            self._paths[handle] = path
            self._by_path.setdefault(path, {})[handle] = attr

    def data(self, handle: int) -> bytes | PackedBytes | None:
        return self._data.get(handle)

    def attr(self, handle: int) -> Attr | None:
        """The attributes of ``handle``'s open (None: no such handle)."""
        return self._attrs.get(handle)

    def newest(self, path: str) -> Attr | None:
        """The attributes of the newest open of ``path`` still open (None: none is). Several
        readers of ``status.json`` at once may hold documents of other sizes: each open tells
        the kernel to forget the size it cached, so a reader's ``fstat`` right after its open
        gets its own unless another reader opened the file in between."""
        with self._lock:
            handles = self._by_path.get(path)
            return next(reversed(handles.values())) if handles else None

    def forget_gone(self, view: View, notifier: KernelNotifier) -> None:
        """Make the kernel forget the name of each open manifest that is gone from ``view`` (its
        epoch retired). The refresher drops the inode's attributes, but the kernel keeps the
        name's entry, and a stat of the name then asks for the inode's attributes just as an
        fstat of the open file does, so one could not fail while the other answers. With the
        entry forgotten a stat of the name is a lookup (ENOENT), while the inode, asked by
        number, answers from the open (:meth:`EpochOperations.getattr` with ``by_number``).
        Low-level API only: the high-level one knows no folder's number (its notifier forgets
        nothing), and asks by name in both cases."""
        with self._lock:
            held = {path for path in self._by_path if not view.is_mutable_file(path)}
        self._forgotten &= held
        for path in sorted(held - self._forgotten):
            try:
                view.getattr(path)
            except NotFound:
                notifier.forget_entry(path)
                self._forgotten.add(path)

    def remove(self, handle: int) -> None:
        """``handle`` is released."""
        with self._lock:
            self._data.pop(handle, None)
            self._attrs.pop(handle, None)
            path = self._paths.pop(handle, None)
            if path is None:
                return
            handles = self._by_path.get(path, {})
            handles.pop(handle, None)
            if not handles:
                self._by_path.pop(path, None)
