"""The read-only namespace of an epochfs mount, computed from the node store (no FUSE here).

Keeping the namespace free of FUSE lets it be tested without a mount and keeps the FUSE translator
(:mod:`epochfs.fuse.operations`) a thin layer. Layout (names, the epoch-name grammar and the
manifest and status formats come from :mod:`epochfs.torchclient.layout`, the one definition both
the mount and the torch client read; it is stdlib-only and imports no torch)::

    /epoch-<N>/<relative/path>     symlink -> <link_root>/<object name>, one per sample of epoch N
                                   (a sample the remote lost: a regular file, EIO when read, :mod:`.lost`)
    /latest                        symlink -> epoch-<newest live N>
    /.epochfs/status.json          Store.stats() as JSON, rendered per open
    /.epochfs/epoch-<N>.manifest   the file list of epoch N (layout.format_manifest)
    /.epochfs/classes.json         each folder's class index, the same in every epoch (:mod:`.classes`)

An epoch is immutable once cut, so its tree and manifest are built once and cached until it
retires. What changes (the set of live epochs, ``latest``, ``status.json``) is re-read from the
store by :meth:`View.refresh`, which the server calls periodically and on demand. Which epochs
readers use (reads noted for the store, folders held open) is kept by :mod:`.epochreads`. That
state (the snapshot, the trees and manifests kept built, the reads) is :mod:`.viewstate`'s, the
base of :class:`View`; this module answers paths from it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from epochfs.fuse.lost import LostSample
from epochfs.fuse.packed import PackedBytes
from epochfs.fuse.tree import (
    DIR_MODE,
    FILE_MODE,
    LINK_MODE,
    Attr,
    EpochTree,
    NotADirectory,
    NotALink,
    NotFound,
)
from epochfs.fuse.viewstate import TREES_KEPT, Snapshot, ViewState, split_path
from epochfs.torchclient.layout import (
    CLASSES_NAME,
    CONTROL_DIR,
    LATEST_NAME,
    STATUS_NAME,
    epoch_name,
    manifest_name,
    parse_epoch_name,
    parse_manifest_name,
)

log = logging.getLogger("epochfs.fuse")

__all__ = ["DIR_MODE", "FILE_MODE", "LINK_MODE", "TREES_KEPT", "Attr", "EpochTree", "LostSample",
           "NotADirectory", "NotALink", "NotFound", "Snapshot", "View", "split_path"]


class View(ViewState):
    """The whole namespace over one store: paths in, attributes, entries, link targets and control
    files out, from the state :class:`~.viewstate.ViewState` keeps. Thread-safe: FUSE calls it from
    many threads."""

    # ------------------------------------------------------------------ namespace
    def getattr(self, path: str) -> Attr:
        """Attributes of ``path``; raises NotFound. Looking up ``epoch-N`` may cut it."""
        parts = split_path(path)
        snap = self._snap
        if not parts:
            return self._dir_attr
        head = parts[0]
        if head == LATEST_NAME and len(parts) == 1:
            if snap.latest is None:
                raise NotFound(path)
            target = epoch_name(snap.latest)
            return Attr(LINK_MODE, len(target), snap.live.get(snap.latest, self.started))
        if head == CONTROL_DIR:
            if len(parts) == 1:
                return self._dir_attr
            if len(parts) == 2:
                name = parts[1]
                if name == STATUS_NAME:
                    return Attr(FILE_MODE, len(snap.status), self.started)
                if name == CLASSES_NAME:
                    size = len(self.render_classes())
                    return Attr(FILE_MODE, size, self.classes.mtime(self.started))
                mn = parse_manifest_name(name)
                if mn is not None:
                    cut_at = self._epoch_live(mn, cut=False)
                    if cut_at is not None:
                        return Attr(FILE_MODE, self.manifest_size(mn), cut_at)
            raise NotFound(path)
        n = parse_epoch_name(head)
        if n is None:
            raise NotFound(path)
        if len(parts) == 1:
            cut_at = self._epoch_live(n, cut=True)
            if cut_at is None:
                raise NotFound(path)
            self.note_read(n)
            return Attr(DIR_MODE, 0, cut_at, 2)
        if n not in snap.live and self._epoch_live(n, cut=False) is None:
            raise NotFound(path)
        self.note_read(n)
        return self.tree(n).lookup("/".join(parts[1:]))

    def listdir(self, path: str) -> Sequence[tuple[str, Attr]]:
        """Entries of a folder (without ``.`` and ``..``); raises NotFound / NotADirectory."""
        parts = split_path(path)
        snap = self._snap
        if not parts:
            out: list[tuple[str, Attr]] = [(CONTROL_DIR, self._dir_attr)]
            for live, cut_at in sorted(snap.live.items()):
                out.append((epoch_name(live), Attr(DIR_MODE, 0, cut_at, 2)))
            if snap.latest is not None:
                out.append((LATEST_NAME, self.getattr("/" + LATEST_NAME)))
            return out
        if parts[0] == CONTROL_DIR:
            if len(parts) != 1:
                raise NotADirectory(path) if len(parts) == 2 else NotFound(path)
            out = [(STATUS_NAME, Attr(FILE_MODE, len(snap.status), self.started)),
                   (CLASSES_NAME, self.getattr(f"/{CONTROL_DIR}/{CLASSES_NAME}"))]
            for live in sorted(snap.live):
                name = manifest_name(live)
                try:
                    out.append((name, self.getattr(f"/{CONTROL_DIR}/{name}")))
                except NotFound:  # retired since the last refresh: its manifest opens no more
                    log.debug("%s left out of the listing: epoch %d retired", name, live)
            return out
        n = parse_epoch_name(parts[0])
        if n is None or n not in snap.live:
            if parts[0] == LATEST_NAME and len(parts) == 1:
                raise NotADirectory(path)
            raise NotFound(path)
        self.note_read(n)
        return self.tree(n).listdir("/".join(parts[1:]))

    def readlink(self, path: str) -> str:
        parts = split_path(path)
        if parts == [LATEST_NAME]:
            latest = self._snap.latest
            if latest is None:
                raise NotFound(path)
            return epoch_name(latest)
        if len(parts) < 2:
            if parts and (parts[0] == CONTROL_DIR or parse_epoch_name(parts[0]) is not None):
                raise NotALink(path)
            raise NotFound(path)
        n = parse_epoch_name(parts[0])
        if n is None or n not in self._snap.live:
            if parts[0] == CONTROL_DIR:
                self.getattr(path)
                raise NotALink(path)
            raise NotFound(path)
        tree, rel = self.tree(n), "/".join(parts[1:])
        if tree.is_lost(rel):  # the kernel still held it as a symlink (cached before the loss)
            raise LostSample(n, rel)
        target = tree.readlink(rel)
        self.note_read(n)  # a file's first open: a read of its epoch
        return target

    def open_file(self, path: str) -> bytes | PackedBytes:
        """The content of a control file (status.json, a manifest) for an open: sliced by each
        read, never inflated whole (a manifest stays compressed); raises NotFound."""
        parts = split_path(path)
        if len(parts) == 2 and parts[0] == CONTROL_DIR:
            if parts[1] == STATUS_NAME:
                return self.render_status()
            if parts[1] == CLASSES_NAME:
                return self.render_classes()
            n = parse_manifest_name(parts[1])
            if n is not None and self._epoch_live(n, cut=False) is not None:
                return self.packed_manifest(n)
        n = parse_epoch_name(parts[0]) if len(parts) > 1 else None
        if n is not None and n in self._snap.live and self.tree(n).is_lost("/".join(parts[1:])):
            raise LostSample(n, "/".join(parts[1:]))  # a lost sample's entry: EIO, not ENOENT
        raise NotFound(path)

    def read_file(self, path: str) -> bytes:
        """The whole bytes of a control file (:meth:`open_file`, inflated); raises NotFound."""
        return bytes(self.open_file(path))

    def is_mutable_file(self, path: str) -> bool:
        """Control files whose content changes (served with direct I/O, never page-cached)."""
        return split_path(path) in ([CONTROL_DIR, STATUS_NAME], [CONTROL_DIR, CLASSES_NAME])
