"""The live epochs as their members files tell them: what readers are answered from while the
index is damaged.

A damaged ``index.sqlite`` is replaced within seconds (:mod:`.reset`, rebuilt from the members
files), but until then every read of it fails, and a reader of an epoch cut long before (its
tree not built yet, or a lookup that asks for the newest epoch) would get EIO for a damage that
changed nothing of that epoch: its members file was on the disk, checksummed, before the epoch
became visible (:mod:`.memberfiles`). So :class:`~.cache.Store` answers those reads from the files
when the index raises a corruption: the live epochs and their cut times from the files' first
lines, an epoch's files from its members file, read through its chain by the reader the rebuild
uses (:func:`.memberrestore.epoch_rows`, no second parser) and kept whole until its check passed
(a damaged file is refused whole: the caller answers as the index did, never with part of it).

Read-only: it opens files and writes, moves or removes nothing, the replacement is the sampler's.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from epochfs.sidecar.store import hwm, memberchain
from epochfs.sidecar.store.hwm import MAX_EPOCH
from epochfs.sidecar.store.index import is_corruption
from epochfs.sidecar.store.memberfiles import FORMATS, present
from epochfs.sidecar.store.memberrestore import Damaged, epoch_rows
from epochfs.sidecar.store.objects import object_name
from epochfs.sidecar.store.records import EpochInfo, FileEntry

T = TypeVar("T")


def _info(n: int, head: dict[str, Any] | None) -> EpochInfo | None:
    """Epoch ``n``'s row from its file's first line (None: not the first line of its file)."""
    if head is None or head.get("epochfs_members") not in FORMATS or head.get("epoch") != n:
        return None
    try:
        listed, estimated = head.get("listed"), head.get("estimated")
        return EpochInfo(n, int(head["samples"]), int(head["bytes"]), int(head["new"]),
                         int(head["evicted"]), float(head["cut_at"]),
                         None if listed is None else int(listed),
                         None if estimated is None else int(estimated))
    except (KeyError, TypeError, ValueError):
        return None


def listing(root: Path) -> list[EpochInfo]:
    """The epochs with a members file in ``root`` (a live epoch's: a retirement takes its file
    out before it commits), oldest first, as their first lines record them."""
    out = []
    for n, path in sorted(present(root).items()):
        info = _info(n, memberchain.head(path)) if n <= MAX_EPOCH else None
        if info is not None:
            out.append(info)
    return out


def newest(root: Path) -> int | None:
    """The newest epoch number ever published: the high-water mark, or a members file above it
    (a cache from before the mark)."""
    mark = hwm.read(root)
    numbers = [e.epoch for e in listing(root)]
    if mark is not None and mark.published >= 0:
        numbers.append(mark.published)
    return max(numbers, default=None)


def files(root: Path, n: int) -> list[FileEntry]:
    """Epoch ``n``'s files sorted by path (a sample's path is its key, the index's order), from its
    members file; :class:`.memberrestore.Damaged` when it or a file of its chain fails its check,
    OSError when it is missing. Read whole before anything is returned: never part of a damaged
    file."""
    seen: dict[int, FileEntry] = {}
    for rows in epoch_rows(root, n):
        for r in rows:
            # A member's fields (memberformat.COLUMNS): id, sid, key, path (null: the key), size, checksum.
            seen[int(r[0])] = FileEntry(str(r[2] if r[3] is None else r[3]), int(r[4]), str(r[5]),
                                        object_name(str(r[1])))
    return sorted(seen.values(), key=lambda f: f.path)


def or_files(read: Callable[[], T], members: Callable[[], T]) -> T:
    """``read()`` (of the index), or ``members()`` when the index raises a corruption; when the
    files cannot answer either (missing, damaged), the index's error."""
    try:
        return read()
    except sqlite3.DatabaseError as e:
        if not is_corruption(e):
            raise
        try:
            return members()
        except (Damaged, OSError, ValueError, TypeError, KeyError):
            raise e from None


def iter_or_files(root: Path, n: int, rows: Iterator[FileEntry]) -> Iterator[FileEntry]:
    """``rows`` (epoch ``n``'s files from the index, in path order); when the index raises a
    corruption part way, the rest from ``n``'s members file (after the last path given), or the
    index's error when the file cannot answer."""
    last: str | None = None
    try:
        for f in rows:
            yield f
            last = f.path
    except sqlite3.DatabaseError as e:
        if not is_corruption(e):
            raise
        try:
            rest = files(root, n)
        except (Damaged, OSError, ValueError, TypeError, KeyError):
            raise e from None
        yield from (f for f in rest if last is None or f.path > last)


__all__ = ["Damaged", "files", "iter_or_files", "listing", "newest", "or_files"]
