"""File/folder name clashes of a listing sorted by key: a key ``a/b`` beside keys ``a/b/...``.

The view cannot show ``a/b`` as both a file and a folder, so the listing skips the file. In a
stretch of keys one lister reads in order (a segment of the planner, from where it began this run)
a :class:`ClashFinder` finds them with a short stack. A clash whose two sides fall in different
stretches is found by a :class:`ClashBook`, whatever cut the key space there: a span's start, a
split the planner made while listing (a folder of 5,000 keys cut between ``one/k`` and
``one/k/x``), or the resume point of a listing stopped and started again. Each stretch hands over
its *edges* with each page:

* its **open files**: cataloged keys whose folder range (``[key + "/", key + "0")``) the stretch
  had not passed yet at the page's end, so keys below them may be another stretch's;
* its **outer folders**: folders of its keys whose file name sorts before the stretch's first key
  (``one/k`` for ``one/k/x`` in a stretch that began at ``one/k-2500``), so only another stretch
  (or an earlier run) can hold that file.

A clash across stretches is a file one stretch left open and a folder another found outer. The
book matches them as the pages commit, one commit at a time: against the edges of this run so far
(any key listed, whatever its shard or the globs, as a stretch's finder counts: the whole listing
when this run began it, since every stretch hands over both its sides), and, in a run that resumes
a listing, against the catalog's rows its earlier runs committed (:class:`CatalogClashes`: this
node's cataloged keys, which outlive a restart). Only a
folder that a listed key is in counts: a folder marker (``m/``) or keys refused as unsafe
(``w/../v``) make no folder, as in one stretch. So whether a key is kept does not depend on how
the key space was cut, nor on the bucket's size.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from epochfs.sidecar.store.catalog import SHOWN
from epochfs.sidecar.store.listings import Listings


@dataclass(frozen=True)
class Edges:
    """What one page of a stretch hands to the :class:`ClashBook` (see the module doc)."""

    files: list[str] = field(default_factory=list)
    """Cataloged keys whose folder range was still ahead at the page's end (each once a stretch)."""
    folders: list[str] = field(default_factory=list)
    """Folders of the page's keys whose file name sorts before the stretch's first key."""


class _Entry:
    """A key on a :class:`ClashFinder`'s stack: whether this node catalogs it, and whether it was
    handed over as an open file (:meth:`ClashFinder.edges`)."""

    __slots__ = ("cataloged", "handed", "key")

    def __init__(self, key: str, cataloged: bool) -> None:
        self.key = key
        self.cataloged = cataloged
        self.handed = False


class ClashFinder:
    """Finds keys that are also folders of later keys, in a listing sorted by UTF-8 bytes.

    Keeps a stack of recent keys whose folder range ``[key + "/", key + "0")`` is still ahead;
    the ranges are nested, so a stack suffices and stays as short as the deepest nesting. Only
    keys this node cataloged are reported (another shard's file is another node's business).
    What it cannot see, the keys before its first and after its last, it hands over as
    :meth:`edges` (the module doc).
    """

    def __init__(self) -> None:
        self._stack: list[_Entry] = []
        """Each key whose folder range is still ahead."""
        self._first: str | None = None
        self._last: str | None = None
        self._outer: set[str] = set()
        self._outer_new: list[str] = []
        self.sorted = True

    def see(self, key: str, cataloged: bool) -> list[str]:
        """Feed the next key; returns earlier cataloged keys now known to be folders (to skip)."""
        if self._last is not None and key < self._last:
            self.sorted = False
        self._last = key
        if not self.sorted:
            return []
        if self._first is None:
            self._first = key
        if "/" in key:
            self._note_outer(key)
        clashes = []
        stack = self._stack
        while stack and key >= stack[-1].key + "0":
            stack.pop()
        for i in range(len(stack) - 1, -1, -1):
            entry = stack[i]
            if key.startswith(entry.key + "/"):
                if entry.cataloged:
                    clashes.append(entry.key)
                del stack[i]
        stack.append(_Entry(key, cataloged))
        return clashes

    def _note_outer(self, key: str) -> None:
        """Record the folders of ``key`` whose names sort before the first key seen: only those
        that are prefixes of the first key can (every key seen sorts at or after it)."""
        first = str(self._first)
        pos = key.find("/")
        while 0 < pos < len(first) and first.startswith(key[:pos]):
            folder = key[:pos]
            if folder not in self._outer:
                self._outer.add(folder)
                self._outer_new.append(folder)
            pos = key.find("/", pos + 1)

    def edges(self) -> Edges:
        """The open files and outer folders found since the last call (each handed over once)."""
        if not self.sorted:
            return Edges()
        files = []
        for entry in self._stack:
            if entry.cataloged and not entry.handed:
                entry.handed = True
                files.append(entry.key)
        folders, self._outer_new = self._outer_new, []
        return Edges(files, folders)


class CatalogClashes:
    """The catalog's rows seen by listing ``gen``, as the :class:`ClashBook` asks them: what this
    listing cataloged in an earlier run of it (before a restart, a failed run)."""

    def __init__(self, listings: Listings, gen: int) -> None:
        self.ix = listings.ix
        self.gen = gen

    @classmethod
    def resumed(cls, listings: Listings, gen: int) -> CatalogClashes | None:
        """The lookup for a run of listing ``gen`` that an earlier run of it committed rows for;
        None for its first run, whose edges hold every key it lists: a lookup costs ~0.2 ms, and
        a few at every commit made an in-memory listing a fifth slower."""
        if not listings.ix.query("SELECT 1 FROM catalog WHERE seen = ? LIMIT 1", (gen,)):
            return None
        return cls(listings, gen)

    def has_keys_under(self, key: str) -> bool:
        """Whether the listing cataloged a key in the folder ``key`` (``+seen``: the key's index
        is the one to search, not the index of every row of the generation)."""
        return bool(self.ix.query("SELECT 1 FROM catalog WHERE key >= ? AND key < ? AND +seen = ? LIMIT 1",
                                  (key + "/", key + "0", self.gen)))

    def shown_file(self, key: str) -> bool:
        """Whether the listing cataloged ``key`` and has not found it to clash yet."""
        return bool(self.ix.query(f"SELECT 1 FROM catalog WHERE key = ? AND seen = ? AND {SHOWN}",
                                  (key, self.gen)))


class ClashBook:
    """The clashes of one listing run: each found once, whichever stretch or side finds it.

    :meth:`claim` is a stretch's own finding (its page is read, and its commit marks the key);
    :meth:`settle` matches the edges of the pages about to commit, called by one committer at a
    time (the clashes it returns are marked by that commit, after its rows are written)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: set[str] = set()
        self._folders: set[str] = set()
        self._found: set[str] = set()

    def claim(self, key: str) -> bool:
        """True when ``key`` was not found to clash yet in this run (it is now)."""
        with self._lock:
            if key in self._found:
                return False
            self._found.add(key)
            return True

    def settle(self, edges: list[Edges], catalog: CatalogClashes | None) -> list[str]:
        """The clashes across stretches that the pages of ``edges`` complete, each claimed."""
        files = [f for e in edges for f in e.files]
        folders = [f for e in edges for f in e.folders]
        with self._lock:
            self._files.update(files)
            self._folders.update(folders)
            hits = {f for f in files if f in self._folders} | {f for f in folders if f in self._files}
            hits -= self._found
        if catalog is not None:
            hits.update(f for f in files if f not in hits and catalog.has_keys_under(f))
            hits.update(f for f in folders if f not in hits and catalog.shown_file(f))
        return [f for f in sorted(hits) if self.claim(f)]


__all__ = ["CatalogClashes", "ClashBook", "ClashFinder", "Edges"]
