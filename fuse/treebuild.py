"""How an epoch's file list becomes the flat arrays of an :class:`~epochfs.fuse.tree.EpochTree`:
one pass over the store's stream, with the path rules the FUSE view and the folder view share
(an unsafe path or link target, or a path that clashes with another, is skipped, counted and
logged, never shown). Where a file and a folder share a name (a key ``c`` beside keys ``c/...``)
the folder wins, as it does in a listing (docs/listing.md): the file is the one left out, though
it comes first in path order.

Apart from :mod:`.tree` (which searches and answers from the arrays) because building is the one
part that holds Python objects (the folders on the current path) and enforces the input's order;
once :class:`TreeBuilder` is done, the tree keeps only its arrays and never changes them.
"""

from __future__ import annotations

import logging
from array import array

from epochfs.sidecar.store import FileEntry

log = logging.getLogger("epochfs.fuse")

ROOT = -1
"""The node index of the epoch's own folder (it is nobody's child)."""
ENC = ("utf-8", "surrogateescape")  # what mfusepy decodes paths with
LOGGED_SKIPS = 10
"""Skipped files named one by one per tree build; the rest are counted in its summary line."""
_SEPARATORS = ("\0", "\t", "\n", "\r")
"""Never in a shown path: NUL ends a C string, the others separate the manifest's fields and lines."""


def unsafe_path(rel: str) -> bool:
    """Whether ``rel`` is no plain relative path below its folder (empty, absolute, ``.``/``..``
    parts, a separator character)."""
    return not rel or any(c in rel for c in _SEPARATORS) or any(
        p in ("", ".", "..") for p in rel.split("/"))


def unshown_reason(path: str, object_name: str, checksum: str) -> str | None:
    """Why a row of an epoch's file list is not shown, or None when it may be: the one rule of
    the FUSE view and the folder view (both show the same rows). Its path must be a plain
    relative path; its object name too, or the link would point outside the link root (a sample
    id with ``..``); its checksum must hold no separator, or the manifest would break."""
    if unsafe_path(path):
        return "unsafe path"
    if unsafe_path(object_name):
        return f"unsafe link target {object_name!r}"
    if any(c in checksum for c in _SEPARATORS):
        return f"unsafe checksum {checksum!r}"
    return None


def smallest(values: array[int]) -> array[int]:
    """The same integers in 4-byte slots when they fit (every index of an epoch under 2**31)."""
    if not values or (min(values) >= -(1 << 31) and max(values) < (1 << 31)):
        return array("i", values)
    return values


class TreeBuilder:
    """One pass over the files in path order: a folder's subtree is contiguous in that order, so
    each folder is complete (and written out as one sorted run) when the stream leaves it; only the
    folders on the current path hold Python objects meanwhile."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.names = bytearray()
        self.name_off = array("q", [0])
        self.ref = array("q")
        self.objs = bytearray()
        self.obj_off = array("q", [0])
        self.dir_first = array("q")
        self.dir_count = array("q")
        self.dir_node = array("q")  # folder rank -> its node (the root: ROOT)
        self.shown = bytearray()
        # open folders, root first: (name, child name -> object name (a file) or rank (a folder))
        self.stack: list[tuple[str, dict[str, str | int | None]]] = [("", {})]
        # per open folder, the files a folder of the same name may still follow: (name, its index
        # in the stream); each is a prefix of the next (see _passed)
        self.maybe_folder: list[list[tuple[str, int]]] = [[]]
        self.added = 0
        self.skipped = 0

    def _skip(self, why: str, path: str) -> bool:
        self.skipped += 1
        if self.skipped <= LOGGED_SKIPS:
            log.warning("epoch %d: %r not shown: %s", self.epoch, path, why)
        return False

    def _passed(self, name: str) -> int | None:
        """Name ``name`` is the next child of the deepest open folder: forget the files of that
        folder that no folder of their name can follow any more, and return the stream index of the
        file named ``name`` itself, if one was added (the folder ``name`` is about to take its name).

        In path order a folder ``c/`` follows its namesake file ``c`` only after the siblings that
        extend ``c`` by a character below ``/`` (``c!``, ``c-1``, ``c.bin``...); any other sibling
        comes after ``c/``. So the files still waiting for a folder each extend the one before: a
        short chain, not the folder's every file (which a flat folder of millions would hold)."""
        chain = self.maybe_folder[-1]
        while chain:
            cand, index = chain[-1]
            if name == cand:
                chain.pop()
                return index
            if name.startswith(cand) and name[len(cand)] < "/":
                break
            chain.pop()
        return None

    def _folder_wins(self, dirs: list[str], depth: int) -> bool:
        """The file named like the folder ``dirs[:depth + 1]`` (added earlier, not written out
        yet: its folder is still open) is left out after all, and counted as the clash it is.
        False where no such file waits (input out of path order): the caller skips its own."""
        name = dirs[depth]
        if not isinstance(self.stack[-1][1].get(name), str):
            return False
        index = self._passed(name)
        if index is None:
            return False
        if index < len(self.shown):  # the caller appends each file's byte after add(): it is there
            self.shown[index] = 0
        self._skip("clashes with a folder of the same name (the folder is shown)",
                   "/".join(dirs[:depth + 1]))
        return True

    def add(self, f: FileEntry, prev: str | None) -> bool:
        """Place ``f`` in the tree; False (counted, logged) when it cannot be shown safely."""
        self.added += 1
        why = unshown_reason(f.path, f.object_name, f.checksum)
        if why is not None:
            return self._skip(why, f.path)
        parts = f.path.split("/")
        if prev is not None and f.path < prev:
            raise ValueError(f"epoch {self.epoch}: files must come in path order ({f.path!r} after {prev!r})")
        dirs = parts[:-1]
        stack, common = self.stack, 0
        while common < len(dirs) and common + 1 < len(stack) and stack[common + 1][0] == dirs[common]:
            common += 1
        while len(self.stack) > common + 1:
            self._close()
        for depth in range(common, len(dirs)):
            part = dirs[depth]
            children = self.stack[-1][1]
            if part in children:  # a file of that name came first (the same folder would be open)
                if not self._folder_wins(dirs, depth):
                    return self._skip("clashes with another path", f.path)
            else:
                self._passed(part)
            children[part] = None
            self.stack.append((part, {}))
            self.maybe_folder.append([])
        children = self.stack[-1][1]
        name = parts[-1]
        if name in children:  # the same path again
            return self._skip("clashes with another path", f.path)
        children[name] = f.object_name
        chain = self.maybe_folder[-1]  # _passed(name) inlined: once per file (never equal: not a child)
        while chain:
            cand = chain[-1][0]
            if name.startswith(cand) and name[len(cand)] < "/":
                break
            chain.pop()
        chain.append((name, self.added - 1))
        return True

    def _close(self) -> int:
        """Write the deepest open folder's children out as one sorted run; returns its rank."""
        name, children = self.stack.pop()
        self.maybe_folder.pop()
        first = len(self.ref)
        for child in sorted(children):
            value = children[child]
            self.names += child.encode(*ENC)
            self.name_off.append(len(self.names))
            if isinstance(value, str):
                self.ref.append(len(self.obj_off) - 1)
                self.objs += value.encode(*ENC)
                self.obj_off.append(len(self.objs))
            else:
                assert value is not None
                self.ref.append(-(value + 1))
                self.dir_node[value] = len(self.ref) - 1
        rank = len(self.dir_first)
        self.dir_node.append(ROOT)
        self.dir_first.append(first)
        self.dir_count.append(len(children))
        if self.stack:
            self.stack[-1][1][name] = rank
        return rank

    def finish(self) -> int:
        """Close every folder still open; the root's rank."""
        if self.skipped:
            log.warning("epoch %d: %d of %d file(s) not shown (unsafe or clashing paths, unsafe link "
                        "targets; the first %d named above)", self.epoch, self.skipped, self.added,
                        min(self.skipped, LOGGED_SKIPS))
        rank = 0
        while self.stack:
            rank = self._close()
        return rank


__all__ = ["ENC", "LOGGED_SKIPS", "ROOT", "TreeBuilder", "smallest", "unsafe_path", "unshown_reason"]
