"""What the trees built ahead of the folder view's cuts share: the snapshot mode's
(:mod:`.folderview_ahead`) and the schedule mode's (:mod:`.folderview_window`). Where they link,
the tree under its temporary name (:mod:`.folderview_links`), the rows left out by the FUSE
view's rule, the exception that makes an epoch be written whole instead, and what a full volume
answers (the publisher's steps pause on it)."""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from epochfs.fuse.treebuild import LOGGED_SKIPS, unshown_reason
from epochfs.sidecar.folderview_links import Clash, LinkTree
from epochfs.sidecar.store.reader import FolderReader

log = logging.getLogger("epochfs.folderview")

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
"""A volume with no room (or no quota) left: what needs room waits (publishing pauses); retiring
and the cleanup, which free room, go on."""
CHUNK = 20_000
"""Rows read from the index at a time."""
STEP_SECONDS = 0.1
"""Most seconds one step spends linking ahead, so that a cut waits at most about this behind it."""
SPOT_CHECKS = 16

WriteControl = Callable[[int, Sequence[bytes]], None]
"""Writes epoch N's ``classes.json`` and its manifest (given as chunks) into ``.epochfs/``."""


def rel_of(line: bytes) -> str:
    """The entry's path: a manifest line's first field."""
    return line.split(b"\t", 1)[0].decode()


class Tainted(Exception):
    """The ahead tree cannot stand for the epoch (a clash of paths, a path the manifest cannot
    hold, a replaced index): the epoch is written the old way."""


class BuiltAhead:
    """What both trees built ahead share (:class:`AheadTree`, snapshot mode; and the schedule
    mode's ``WindowTree``): where they link (the folder, the link root, the temporary name's
    prefix), the tree under its temporary name (:mod:`.folderview_links`) and the count of rows
    left out by the FUSE view's rule (:meth:`_skip`)."""

    def __init__(self, *, store: FolderReader, folder: Path, link_root: Path, temp_prefix: str) -> None:
        self.store = store
        self.folder = folder
        self.prefix = str(link_root).rstrip("/") + "/"
        self.temp_prefix = temp_prefix
        self._links: LinkTree | None = None
        self.skipped = 0
        """Rows read that the tree builder's rule left out (the first few logged by name)."""

    @property
    def tree(self) -> Path | None:
        """The tree's temporary name in the folder (None: none is being built)."""
        return None if self._links is None else self._links.path

    def forget(self) -> None:
        """The tree on disk is gone (recovery removed every temporary name): built again."""
        self._links = None

    def folders(self) -> list[str]:
        """The folders of the tree, but its own (what ``classes.json`` records for the epoch)."""
        return [] if self._links is None else self._links.folders()

    def sync_dirs(self) -> None:
        """fsync the folders changed since the last call."""
        assert self._links is not None
        self._links.sync_dirs()

    def discard(self) -> None:
        """Forget the tree on disk (removed now); the set is kept."""
        if self._links is not None:
            links, self._links = self._links, None
            links.remove()

    def _line(self, path: str, size: int, checksum: str, obj: str) -> bytes | None:
        """The sample's manifest line, or None for a row the FUSE view would not show
        (:func:`~epochfs.fuse.treebuild.unshown_reason`: a separator in its path or checksum, an
        escaping object name): kept as a member, since it counts in the epoch's row, but never
        linked nor in the manifest (:meth:`_skip`)."""
        why = unshown_reason(path, obj, checksum)
        if why is None:
            return f"{path}\t{size}\t{checksum}\n".encode()
        self._skip(path, why)
        return None

    def _skip(self, path: str, why: str) -> None:
        """A row left out of the tree: counted, the first few logged by name."""
        self.skipped += 1
        if self.skipped <= LOGGED_SKIPS:
            log.warning("%r not shown in the folder view: %s", path, why)

    @staticmethod
    def _link_groups(links: LinkTree, groups: dict[str, list[tuple[str, str, bool]]]) -> None:
        """Link each folder's entries (name, target, carried over from the base); a path clash
        taints the tree: the epoch is written whole."""
        try:
            for parent, entries in groups.items():
                links.link_into(parent, entries)
        except Clash as e:
            raise Tainted(str(e)) from None


__all__ = ["CHUNK", "FULL_ERRNOS", "SPOT_CHECKS", "STEP_SECONDS", "BuiltAhead", "Tainted", "WriteControl",
           "rel_of"]
