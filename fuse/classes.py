"""``.epochfs/classes.json``: the class index of every folder, the same in every epoch of the cache.

The list of folders lives in the store (:mod:`epochfs.sidecar.store.classes`: it only grows, so no
index ever changes); this module keeps it up to date from what the view shows and renders it in
the layout's format (:func:`epochfs.torchclient.layout.format_classes`):

* before ``classes.json`` is served (:meth:`ClassesFile.render`), the folders of every live epoch
  not yet recorded are recorded (the store's ``through`` mark says which are), so each folder a
  reader finds in ``epoch-N/`` has its index once ``epoch-N`` has been looked up;
* at each refresh of the view (:meth:`ClassesFile.tick`), the folders that the running listing's
  discovery found (its parts: the same on every node whatever its shard) are recorded as soon as a
  listing begins: the first record, sorted, then holds every class folder the remote has, not
  only those this node's first epoch happens to hold (and where the discovery named none, the
  first record takes the folders of every key listed so far:
  :func:`~epochfs.sidecar.store.classes.catalog_folders`).

Both the FUSE view and the folder view serve it through :class:`~epochfs.fuse.view.View`.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable

from epochfs.fuse.tree import EpochTree
from epochfs.sidecar.store import EpochReader
from epochfs.sidecar.store import classes as store_classes
from epochfs.sidecar.store.index import is_busy
from epochfs.torchclient.layout import format_classes

log = logging.getLogger("epochfs.fuse")


class ClassesFile:
    """Keeps the store's class folders up to date and renders ``classes.json`` (thread-safe)."""

    def __init__(self, store: EpochReader) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._listing: tuple[int, int] | None = None
        self._rendered: tuple[tuple[int, int, int], store_classes.ClassFolders, bytes] | None = None
        self._seen: tuple[int, int, int] | None = None
        self._pending: list[str] = []

    def _file_key(self) -> tuple[int, int, int]:
        try:
            st = os.stat(store_classes.folder_path(self.store.root))
        except FileNotFoundError:
            return (0, 0, 0)
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _current(self) -> tuple[store_classes.ClassFolders, bytes]:
        key = self._file_key()
        cached = self._rendered
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        value = store_classes.read(self.store.root)
        text = format_classes(value.folders).encode()
        self._rendered = (key, value, text)
        return value, text

    def mtime(self, default: float) -> float:
        """When the recorded folders last changed (``default`` before any record): the same on
        every server over the cache, and it moves only when the file does."""
        key = self._file_key()
        return key[1] / 1e9 if key != (0, 0, 0) else default

    def render(self, live: Iterable[int], tree: Callable[[int], EpochTree]) -> bytes:
        """``classes.json`` with the folders of every epoch of ``live`` recorded (``tree``: an
        epoch's tree; an epoch retired meanwhile is passed over)."""
        with self._lock:
            value, text = self._current()
            todo = sorted(n for n in live if n > value.through)
            if not todo:
                return text
            found = list(self.store.listed_class_folders())
            if not value.folders:  # the first record: every class listed so far, sorted together
                found += self.store.cataloged_class_folders()
            through = None
            for n in todo:
                try:
                    found += tree(n).folder_paths()
                except LookupError:
                    continue  # retired meanwhile: nobody reads it any more
                through = n
            # In bounded tries: the server's other requests share the store's connection.
            self.store.record_class_folders(found, through=through, wait=store_classes.RECORD_WAIT)
            return self._current()[1]

    def _record_now(self, found: list[str]) -> bool:
        """One bounded try to record ``found`` (a refresh does not wait out the sampler's write);
        False when it must be tried again. Not under ``_lock``: the record is one write
        transaction that merges with what the file holds, so a render's record beside it loses
        nothing, and a render may hold the lock while it waits for the index."""
        try:
            self.store.record_class_folders(found, wait=0.0)
        except sqlite3.OperationalError as e:
            if not is_busy(e):
                raise
            return False
        return True

    def tick(self) -> bool:
        """Record the running listing's folders when a listing began (or split its parts); True
        when the recorded folders changed since the last tick (the kernel must drop the file's
        cached size)."""
        mark = self.store.listing_mark()
        if mark != self._listing or self._pending:
            # The folders of a try that found the index busy are kept: the listing may end (and
            # its parts, which name them, go) before the next tick.
            found = self._pending + (self.store.listed_class_folders() if mark != self._listing else [])
            self._pending = []
            if found and not self._record_now(found):
                self._pending = found  # tried again at the next tick
            self._listing = mark
        key = self._file_key()
        changed = self._seen is not None and key != self._seen
        self._seen = key
        return changed
