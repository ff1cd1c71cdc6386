"""Whether a folder's ``index.sqlite`` is an epochfs index, asked without changing anything.

The commands that only read a cache (``status``, ``cut``, ``verify``...) open it with
:class:`~.cache.Store`, which makes a missing schema (a fresh index is a cache being made), the
``objects/`` and ``tmp/`` folders, and switches the file to WAL mode. A folder that holds someone
else's ``index.sqlite`` (another program's database, an empty file) would be taken over that way
and reported as an empty cache ("cannot cut yet", "index: ok"). :func:`foreign_index` tells such a
file apart first, reading it only: an index with epochfs's schema is a cache, even with nothing
in it yet, and so is an index not yet (or no longer) a database beside the ``objects/`` folder
every cache has (a sampler making it right now; damage, which the sampler's start rebuilds).

Which of the two it is, :func:`cache_content` tells: what in the folder only a cache whose index
had its schema makes. The opener asks it (:mod:`.handle`) before it would make a schema, and
before it would make a missing index (a deleted one is damage too: :func:`blank_damage`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from pathlib import Path

from epochfs.sidecar.store.dburi import uri
from epochfs.sidecar.store.fanout import FAN_NAME
from epochfs.sidecar.store.hwm import HWM_NAME
from epochfs.sidecar.store.memberformat import present
from epochfs.sidecar.store.meta import Meta
from epochfs.sidecar.store.objects import OBJECTS_DIR, TMP_DIR, markers

SQLITE_MAGIC = b"SQLite format 3\x00"
WAL_FORMAT = 2
"""The file header's read/write format version (bytes 18 and 19) of a database in WAL mode."""
SHOWN_TABLES = 3
"""Table names a refusal shows, at most."""
SHOWN_EPOCHS = 5
"""Epoch numbers a damage report shows, at most."""


def foreign_index(path: Path) -> str | None:
    """Why the file ``path`` is not an epochfs index (``index.sqlite is an empty file``...), or None
    when it is one, or when this cannot tell (unreadable; damage, which the opener reports).

    Nothing is written: the main file is read as it is on disk (SQLite's ``immutable``: no lock,
    no ``-wal``/``-shm`` made), then, only when that shows no schema and the database is in WAL
    mode with a write-ahead log beside it (where a new index's schema is until a checkpoint),
    through a read-only connection. An empty file, a database with no table yet or a file that
    is not a database is a cache's index when ``objects/`` is beside it: every open of a cache
    makes that folder before its index, so a sampler making a cache right now (its index empty
    for a moment, then without tables until the schema commits) is never refused, nor a damaged
    index (the opener reports it, the sampler's start rebuilds it: :func:`cache_content`).

    It opens the file with a descriptor of its own: only for a command's check before it opens
    the cache, never in a process that holds a connection to it (closing any descriptor of the
    file drops all the process's POSIX locks on it, SQLite's included)."""
    made = os.path.isdir(path.parent / OBJECTS_DIR)
    if os.path.isdir(path):  # SQLite's word for it is "unable to open database file"
        return f"{path.name} is a folder"
    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError:
        return None
    if not head:
        return None if made else f"{path.name} is an empty file"
    if not head.startswith(SQLITE_MAGIC) or len(head) < 20:
        return None if made else f"{path.name} is not an SQLite database"
    wal = head[18] == WAL_FORMAT and os.path.isfile(f"{path}-wal") and os.path.getsize(f"{path}-wal") > 0
    tables: list[str] | None = None
    for immutable in (True, False) if wal else (True,):
        try:
            tables, epochfs = _schema(path, immutable=immutable)
        except sqlite3.Error:
            continue  # a page torn by a concurrent checkpoint (immutable), or damage
        if epochfs:
            return None
    if tables is None:
        return None
    if not tables:
        return None if made else f"{path.name} is an SQLite database with no tables"
    names = ", ".join(tables[:SHOWN_TABLES]) + (", ..." if len(tables) > SHOWN_TABLES else "")
    return f"{path.name} is an SQLite database without epochfs's schema; its tables: {names}"


def _schema(path: Path, *, immutable: bool) -> tuple[list[str], bool]:
    """(the database's table names, whether it records epochfs's schema version)."""
    name = uri(path, "ro", immutable=immutable)
    with contextlib.closing(sqlite3.connect(name, uri=True, timeout=5.0)) as db:
        tables = [str(r[0]) for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        if "meta" not in tables:
            return tables, False
        try:
            row = db.execute("SELECT value FROM meta WHERE name=?", (Meta.SCHEMA_VERSION.value,)).fetchone()
        except sqlite3.OperationalError:  # a table of that name with other columns
            return tables, False
        return tables, row is not None


def cache_content(root: Path) -> str | None:
    """What the cache folder ``root`` holds that only a cache whose index had its schema makes, in
    words (``the members file(s) of epoch(s) 0 and object files in objects/``), or None when there
    is nothing of the kind: a new cache (its index empty, or without tables, for a moment while
    its sampler makes it, or for good when that sampler was killed then), which holds only the
    marker folder in ``objects/``. An index without schema beside any of it is damage: made into a
    fresh index, the sampler's recovery would remove every epoch's members file ("never cut") and
    every object file (orphans). Cheap, and no descriptor on the index: the ``epochs/`` folder's
    names, ``objects/``'s fan-out folders up to the first file, the high-water mark's presence."""
    parts = []
    numbers = sorted(present(root))
    if numbers:
        shown = ", ".join(map(str, numbers[:SHOWN_EPOCHS])) + (", ..." if len(numbers) > SHOWN_EPOCHS else "")
        parts.append(f"the members file(s) of epoch(s) {shown}")
    if _any_object(root / OBJECTS_DIR):
        parts.append(f"object files in {OBJECTS_DIR}/")
    if not parts and os.path.isfile(root / HWM_NAME):
        parts.append(f"the epochs' high-water mark ({HWM_NAME})")
    return " and ".join(parts) or None


def blank_damage(root: Path, what: str) -> str | None:
    """The damage in words when the index of the cache folder ``root`` is ``what`` (``missing``,
    ``an empty file``...) while the folder holds what only an index with its schema came before
    (:func:`cache_content`); None for a new cache, whose index is made fresh. One wording for the
    opener (:mod:`.handle`) and the commands' check of ``--cache`` (:mod:`..volumes`)."""
    held = cache_content(root)
    return None if held is None else f"the index is {what}, but the cache holds {held}"


TEMP_NAME = re.compile(r"[0-9a-f]{32}\.part")
"""A download's temp file in ``tmp/`` (:meth:`.objects.ObjectFiles.temp_path`)."""
SID_NAME = re.compile(r"[0-9a-f]{32}")
"""An object file in a fan-out folder of ``objects/``: its sample id (:func:`..keys.sample_id`)."""
SHOWN_FOREIGN = 3
"""Entries a refusal names, at most."""


def foreign_entries(root: Path) -> list[str]:
    """Entries of ``root``'s ``tmp/`` and ``objects/`` that no cache makes (a temp file, a fan-out
    folder, an object file by its sample id), relative to ``root``, at most
    :data:`SHOWN_FOREIGN` + 1 of them: what a cache's start would remove (every temp, every
    object file its index does not know) that is someone else's. A marker in ``objects/`` says
    epochfs made the folder: nothing is foreign then."""
    objects = root / OBJECTS_DIR
    if markers(objects):
        return []
    found = [f"{TMP_DIR}/{name}" for name in _names(root / TMP_DIR) if not TEMP_NAME.fullmatch(name)]
    for top in _names(objects):
        if len(found) > SHOWN_FOREIGN:
            break
        if not (FAN_NAME.fullmatch(top) and (objects / top).is_dir()):
            found.append(f"{OBJECTS_DIR}/{top}")
            continue
        for name in _names(objects / top):
            if not (SID_NAME.fullmatch(name) and name.startswith(top)):
                found.append(f"{OBJECTS_DIR}/{top}/{name}")
                break
    return found[:SHOWN_FOREIGN + 1]


def _names(folder: Path) -> list[str]:
    try:
        with os.scandir(folder) as entries:
            return sorted(e.name for e in entries)
    except OSError:
        return []


def _any_object(objects: Path) -> bool:
    """Whether ``objects`` holds a file in one of its fan-out folders (or at its top); its marker
    folder (a dot name, made before the index) is none."""
    try:
        with os.scandir(objects) as entries:
            tops = [e for e in entries if not e.name.startswith(".")]
        for top in tops:
            if not top.is_dir(follow_symlinks=False):
                return True
            with os.scandir(top.path) as inner:
                if next(inner, None) is not None:
                    return True
    except OSError:
        return False
    return False


__all__ = ["blank_damage", "cache_content", "foreign_entries", "foreign_index"]
