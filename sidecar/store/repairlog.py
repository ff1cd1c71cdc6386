"""The samples waiting for a repair, or lost, kept outside the index: what a rebuild remembers.

A damaged ``index.sqlite`` is rebuilt from the live epochs' members files (:mod:`.memberrestore`),
and a member whose object file is there with its recorded size is taken back as sound: the rebuild
reads no object's bytes (a ``stat`` per member, not a terabyte of hashing). The ``repairs`` table
goes with the damaged index, so without this log a sample that a scrub had found damaged (its
damaged file kept in place until the repair renames the right bytes over it, :mod:`.integrity`)
would become an ordinary sample again: its damaged bytes served with no error until a scrub found
them again, and a sample marked lost (the remote's bytes changed) fetched again for nothing.
So every change of ``repairs`` is written down beside the members files::

    <cache>/epochs/repairs.log

one JSON array per line, ``[id, sid, state, since]`` (the sample's id and object name, which
together name one sample for the index's life; :data:`WAITING`, :data:`LOST` or :data:`REPAIRED`;
when it was found), appended and fsynced inside the write transaction that makes the change,
before its commit: every committed mark is in the file. A mark whose commit never came (kill -9
between the two) is in the file too; the next start's recovery, which runs before anything else
writes, replaces the file by the committed table (:func:`rewrite`), and so does a rebuild, on the
table it rebuilt. Between two rewrites the file only grows (a few marks a day on a sound volume);
it is rewritten from the table when it grows past :data:`COMPACT_BYTES` and four times the table.

The rebuild (:func:`load`) takes the last line of each sample; a line that does not parse (a
torn append of a killed writer, a damaged block) is skipped, never trusted. A mark is applied only
to a restored member with the same id *and* object name: the mark of a sample evicted since (its
row, not its line, is deleted) names no restored member, and a rebuild rewrites the file, so an id
handed out again after it never meets an older mark.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epochfs.sidecar.store.memberfiles import folder
from epochfs.sidecar.store.objects import clear_replace_temps, fsync_dir, replace_file

log = logging.getLogger("epochfs.store")

LOG_NAME = "repairs.log"
WAITING = 0
"""Taken out (damaged, missing or short): fetched again into its place; its file stays meanwhile."""
LOST = 1
"""Cannot be repaired (the remote no longer has its bytes): its entries stay, its file is gone."""
REPAIRED = -1
"""Repaired in place: whole again (no mark)."""
COMPACT_BYTES = 256 << 10
"""Size past which an append rewrites the file from the table (when it is also 4x the table's)."""
_LINE_BYTES = 64
"""About the bytes of one line: what a rewrite of the table would take."""
_BATCH = 1024
"""Lines a rewrite hands to one write(2) (about 64 KiB)."""


@dataclass(frozen=True)
class Mark:
    """The last line of one sample in the log."""

    sid: str
    lost: bool
    since: float


def path_of(root: Path) -> Path:
    """The log of the cache folder ``root``."""
    return folder(root) / LOG_NAME


def note(db: sqlite3.Connection, root: Path, marks: list[tuple[int, str, int, float]]) -> None:
    """Append ``marks`` (id, sid, state, since) and fsync, inside the write transaction ``db``
    that makes them, before its commit (the index's write lock orders the appends of every
    process as their commits). A write that fails (a full volume) is logged and the change goes
    on: the index holds it, and the next start's :func:`rewrite` records it here."""
    if not marks:
        return
    data = "".join(json.dumps([int(i), str(s), int(st), float(t)], separators=(",", ":")) + "\n"
                   for i, s, st, t in marks).encode("ascii")
    path = path_of(root)
    try:
        folder(root).mkdir(exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # a torn last line stays one bad line, never joins this one
            os.write(fd, data)
            os.fsync(fd)
            size += len(data)
        finally:
            os.close(fd)
        if size == len(data):
            fsync_dir(folder(root))  # a new file: its name is durable too
        if size > COMPACT_BYTES:
            count = int(db.execute("SELECT COUNT(*) FROM repairs").fetchone()[0])
            if size > 4 * _LINE_BYTES * count:
                rewrite(db, root)
    except OSError as e:
        log.warning("could not record %d repair mark(s) in %s (%s): the index holds them; the next "
                    "start records them there", len(marks), path, e)


def rewrite(db: sqlite3.Connection, root: Path) -> int:
    """Replace the log by the ``repairs`` table as ``db`` sees it (:func:`.objects.replace_file`:
    temp, fsync, rename, folder fsync; the file removed when the table is empty); returns the
    marks written. Called by recovery (the committed table, before anything writes) and by a
    rebuild (its table), and by :func:`note` when the file has grown."""
    rows = db.execute("SELECT r.sample, s.sid, r.lost, r.since FROM repairs r JOIN samples s "
                      "ON s.id = r.sample ORDER BY r.sample").fetchall()
    path = path_of(root)
    if not rows:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            os.unlink(path)
        return 0
    folder(root).mkdir(exist_ok=True)
    replace_file(path, _lines(rows))
    return len(rows)


def _lines(rows: list[Any]) -> Iterator[bytes]:
    """The log's lines for ``rows`` (sample, sid, lost, since), :data:`_BATCH` lines a piece: one
    write(2) a piece, never the whole table in memory as text."""
    for at in range(0, len(rows), _BATCH):
        yield "".join(json.dumps([int(i), str(sid), LOST if int(lost) else WAITING, float(since)],
                                 separators=(",", ":")) + "\n"
                      for i, sid, lost, since in rows[at:at + _BATCH]).encode("ascii")


def load(root: Path) -> dict[int, Mark]:
    """The marks of the log by sample id: each sample's last line; a sample whose last line says
    :data:`REPAIRED` has none. Lines that do not parse are skipped (logged)."""
    try:
        with open(path_of(root), "rb") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    marks: dict[int, Mark] = {}
    bad = 0
    for line in lines:
        try:
            i, sid, state, since = json.loads(line)
            if not (isinstance(i, int) and isinstance(sid, str) and state in (WAITING, LOST, REPAIRED)
                    and isinstance(since, (int, float))):
                raise ValueError(line)
        except (ValueError, TypeError):
            bad += 1
            continue
        if state == REPAIRED:
            marks.pop(i, None)
        else:
            marks[i] = Mark(sid, state == LOST, float(since))
    if bad:
        log.warning("%s: %d line(s) that do not parse skipped (a torn append, or damage)",
                    path_of(root), bad)
    return marks


def clear_temps(root: Path) -> int:
    """Remove the temp files of rewrites that died before their rename (a live process's temp is
    left alone); start-up recovery calls this. Returns how many were removed. The temps are
    :func:`.objects.replace_file`'s, so its clean-up is theirs."""
    return clear_replace_temps(path_of(root))
