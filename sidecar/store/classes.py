"""The class folders of a cache: one list of folders that only grows, so labels by folder stay put.

torchvision's ``ImageFolder`` numbers the classes of ``epoch-N/train`` by the folders present in
*that* epoch: an epoch that lacks one class shifts every later label. The cache therefore keeps
every folder it has shown, or that the listing found, in one list (``<cache>/classes.folders``):
sorted at the first record, and from then on only appended to (new folders in sorted order), never
reordered. Hidden folders (``.ipynb_checkpoints/``: :func:`hidden_folder`) are never recorded;
a list that already names one keeps it, as it keeps every line. A folder's class index is its
place among the folders of the same parent in that list
(``epochfs.torchclient.layout.format_classes`` renders ``.epochfs/classes.json`` from it), so it
is the same in every epoch of the cache, and a class that appears later takes the next index.

**The same on every node.** What the listing's folder discovery found
(:class:`~epochfs.sidecar.listing.paged.PagedSource`: delimiter pages, before any sample, the
same on every node whatever its shard) is in the running listing's parts (``listing_parts``, one
per class folder in the common ``train/<class>/`` layout); :func:`listing_folders` reads it, and
the FUSE server records it as soon as a listing runs, before the first cut waits out the
listing's first round. The folders of each epoch are recorded before ``classes.json`` is served
with it (:func:`record`), so every folder of a live epoch has its index.

**Outside the index, like** ``epochs.hwm``: a damaged index is rebuilt from what is on disk, and
labels must survive that. The file is replaced atomically (temp, fsync, rename, folder fsync),
under the index's write transaction, which serializes writers across processes.

Format: a header ``#epochfs-class-folders v1<TAB>through=N`` (N: the newest epoch whose folders
are recorded, -1 none), then one folder path per line (relative, ``/``-separated, no trailing
slash), parents before their children.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from epochfs.sidecar.store.index import BUSY_MS, Index, Meta, is_busy
from epochfs.sidecar.store.objects import clear_replace_temps, replace_file

log = logging.getLogger("epochfs.store")

FOLDERS_NAME = "classes.folders"
MAGIC = "#epochfs-class-folders v1"
MAX_FOLDERS = 200_000
"""Folders recorded at most (a dataset of a folder per sample is no class layout): past it, new
folders get no index and a warning is logged."""
MAX_FOLDER_BYTES = 32 << 20
"""Bytes of folder lines (UTF-8, newline included) recorded at most: :data:`MAX_FOLDERS` of 160
bytes each. The count alone lets folders of 4,096-byte paths (a remote's keys are untrusted) fill
the file, its ``classes.json`` and the FUSE server's memory with some 800 MB; past it, new
folders get no index, as past the count."""


@dataclass(frozen=True)
class ClassFolders:
    """What ``classes.folders`` holds."""

    folders: tuple[str, ...] = ()
    through: int = -1
    """The newest epoch whose folders are all recorded (-1: none)."""


def folder_path(root: Path) -> Path:
    return root / FOLDERS_NAME


def read(root: Path) -> ClassFolders:
    """The recorded folders (none when there is no file yet). A damaged file is logged and read
    as far as it parses: its lines are kept, never renumbered."""
    try:
        text = folder_path(root).read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        return ClassFolders()
    lines = text.split("\n")
    header = lines[0].split("\t")
    through = -1
    if header[0] != MAGIC:
        log.error("%s: unknown header %r; read as no folders", folder_path(root), lines[0][:60])
        return ClassFolders()
    for field in header[1:]:
        key, _, value = field.partition("=")
        if key == "through" and value.lstrip("-").isascii() and value.lstrip("-").isdigit():
            through = int(value)
    return ClassFolders(tuple(line for line in lines[1:] if line), through)


def hidden_folder(name: str) -> bool:
    """Whether a folder of this name is left out of the list: a hidden one (``.ipynb_checkpoints``,
    ``.git``, macOS's ``.Trashes``) is tooling beside the data, never a class. The torch client
    numbers a plain folder's classes by the same rule (``epochfs.torchclient.labels.is_hidden``,
    which may not import the store: tests/torchclient/test_hidden_class_folders.py checks both
    agree), so a mount and a copy of its epoch give the same labels."""
    return name.startswith(".")


def with_parents(folders: Iterable[str]) -> set[str]:
    """``folders`` (``a/b/``, ``a/b``) and every folder above them, without trailing slashes;
    empty and unsafe names (``.``, ``..``, an empty component) are left out, and so is a hidden
    folder (:func:`hidden_folder`), but not the folders below it: the client labels a file by the
    name of its class folder alone, so ``.v2/train/cat`` is a class of the class root
    ``.v2/train`` on a plain folder, and must be one on the mount too.

    Linear in the bytes of ``folders`` and of the result: each folder is walked up only to the
    first folder already seen, so a folder's ancestors are built once however many of them
    ``folders`` names (an epoch's folders name every level of a deep key)."""
    seen: set[str] = set()  # every folder walked, hidden ones too: those above it are in it
    out: set[str] = set()
    for folder in folders:
        path = folder.strip("/")
        if path in seen or _unsafe(path):
            continue
        while path and path not in seen:
            seen.add(path)
            cut = path.rfind("/")
            if not hidden_folder(path[cut + 1:]):  # the folders below one may be classes
                out.add(path)
            path = path[:cut] if cut > 0 else ""
    return out


def _unsafe(path: str) -> bool:
    """Whether ``path`` (no leading or trailing ``/``) is empty or has an empty, ``.`` or ``..``
    component, a newline or a NUL: substring searches, no list of its components."""
    dotted = f"/{path}/"
    return (not path or "\n" in path or "\0" in path or "//" in path or "/./" in dotted
            or "/../" in dotted)


def merged(known: tuple[str, ...], found: Iterable[str]) -> tuple[str, ...]:
    """``known`` followed by the folders of ``found`` it lacks (their parents included), sorted.

    Sorted by path, a parent comes before its children and siblings come in name order; the
    known folders keep their places. Past :data:`MAX_FOLDERS` folders or
    :data:`MAX_FOLDER_BYTES` bytes the shallowest are kept: in ``train/<class>/<clip>/`` the
    clips of the first classes would otherwise fill the list before the later classes, which
    then had no index (333 of 400 classes kept at 600 clips each)."""
    return _appended(known, sorted(with_parents(found)))


def _line_bytes(folder: str) -> int:
    return len(folder.encode("utf-8", "surrogateescape")) + 1


def _appended(known: tuple[str, ...], ordered: list[str]) -> tuple[str, ...]:
    """:func:`merged` of folders already with their parents and sorted (:func:`record` does
    that before it takes the write lock): linear in the bytes of ``known`` and ``ordered``."""
    have = set(known)
    new = [folder for folder in ordered if folder not in have]
    if not new:
        return known
    room = MAX_FOLDERS - len(known)
    byte_room = MAX_FOLDER_BYTES - sum(map(_line_bytes, known))
    if len(new) > room or sum(map(_line_bytes, new)) > byte_room:
        kept: list[str] = []
        for folder in sorted(new, key=lambda folder: folder.count("/")):  # parents first
            size = _line_bytes(folder)
            if len(kept) >= room or size > byte_room:
                break  # stops at the first that does not fit: every kept folder's parents are kept
            kept.append(folder)
            byte_room -= size
        log.warning("class folders: %d new folder(s) beyond the %d folders or %d bytes recorded at "
                    "most; they get no class index", len(new) - len(kept), MAX_FOLDERS, MAX_FOLDER_BYTES)
        new = sorted(kept)
    return known + tuple(new)


def _write(root: Path, value: ClassFolders) -> None:
    data = "\n".join([f"{MAGIC}\tthrough={value.through}", *value.folders]) + "\n"
    replace_file(folder_path(root), data.encode("utf-8", "surrogateescape"))


def clear_temps(root: Path) -> int:
    """The temps of writers of the list killed before their rename (start-up recovery)."""
    return clear_replace_temps(folder_path(root))


READER_RETRY = 0.05
"""Seconds a reader's record leaves the index's connection to other requests between its bounded
waits for the write lock (:func:`record` with ``wait``)."""


def record(ix: Index, root: Path, found: Iterable[str], *, through: int | None = None,
           wait: float | None = None) -> ClassFolders:
    """Append the folders of ``found`` (and their parents) that the list lacks, sorted; raise the
    ``through`` mark to ``through`` (the newest epoch whose folders ``found`` holds). Returns what
    is recorded now. Nothing is written when nothing changes.

    ``wait``: a reader's record (the FUSE server's, on a request): the write lock is asked for in
    bounded tries (:meth:`Index.write_now`) for up to ``wait`` seconds, the connection let go
    between them, and the busy error raised after; a wait of the whole busy timeout on the
    connection would hold up every other request of the server that shares it (status.json,
    manifests, cuts on lookup) while the sampler writes."""
    # Before the write lock: the folders' parents and their order, linear in their bytes but
    # the most of a record's work; under it only the file's read, the merge and the write.
    ordered = sorted(with_parents(found))
    with _recording(ix, wait):
        current = read(root)
        folders = _appended(current.folders, ordered)
        mark = current.through if through is None else max(current.through, through)
        value = ClassFolders(folders, mark)
        if value != current:
            _write(root, value)
    return value


@contextlib.contextmanager
def _recording(ix: Index, wait: float | None) -> Iterator[None]:
    """The index's write transaction, which serializes recorders across processes (the FUSE
    server, the folder view, the listing), as it does cutters for epochs.hwm; with ``wait``,
    taken in bounded tries (:func:`record`)."""
    if wait is None:
        with ix.write():
            yield
        return
    deadline = time.monotonic() + wait
    while True:
        entered = False
        try:
            with ix.write_now():
                entered = True
                yield
            return
        except sqlite3.OperationalError as e:
            if entered or not is_busy(e) or time.monotonic() >= deadline:
                raise
        time.sleep(READER_RETRY)  # the connection free for the server's other requests meanwhile


RECORD_WAIT = BUSY_MS / 1000
"""Seconds a reader's record waits for the write lock in all (the index's own busy timeout)."""


def listing_folders(ix: Index) -> list[str]:
    """The folders the running listing's parts name (its folder discovery: a part's prefix, and a
    range's start at a folder boundary); none when no listing runs."""
    rows = ix.query("SELECT prefix, start FROM listing_parts")
    return [value for row in rows for value in row if value and str(value).endswith("/")]


CATALOG_SCAN_LIMIT = 2_000_000
"""The catalog is read for folders (:func:`catalog_folders`) only up to this many keys."""


def catalog_folders(ix: Index) -> list[str]:
    """The folders of the keys the catalog holds (this node's shard of what was listed), read in
    one query; none above :data:`CATALOG_SCAN_LIMIT` keys. For the first record only: a remote
    whose discovery named no folder (one listing page, one stream) still has its listed classes
    sorted together, not only those of the first epoch."""
    count = int(ix.get(Meta.CATALOG_OBJECTS) or 0)
    if count > CATALOG_SCAN_LIMIT:
        return []
    # rtrim(key, <every character of key but '/'>) is the key up to its last '/': its folder.
    rows = ix.query("SELECT DISTINCT rtrim(key, replace(key, '/', '')) FROM catalog")
    return [str(r[0]) for r in rows if r[0]]


def listing_mark(ix: Index) -> tuple[int, int]:
    """(the listing's generation, its part count): changes when a listing begins or splits."""
    generation = int(ix.get(Meta.LISTING_GENERATION) or 0)
    parts = int(ix.query("SELECT COUNT(*) FROM listing_parts")[0][0])
    return generation, parts


__all__ = ["FOLDERS_NAME", "MAX_FOLDERS", "MAX_FOLDER_BYTES", "RECORD_WAIT", "ClassFolders",
           "catalog_folders", "hidden_folder", "listing_folders", "listing_mark", "merged", "read", "record",
           "with_parents"]
