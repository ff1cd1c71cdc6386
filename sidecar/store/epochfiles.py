"""The files of an epoch: the live epochs' rows and each epoch's file list, read in chunks.

Apart from :mod:`.epochs` (cuts and their condition) because listing an epoch is a read of its own
kind: the FUSE view and the folder view build an epoch's tree from it long after the cut, whatever
way the epoch was recorded (a range of the admission order, a window's bounds, or rows).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from epochfs.sidecar.store.index import Index
from epochfs.sidecar.store.objects import object_name
from epochfs.sidecar.store.records import EpochInfo, FileEntry
from epochfs.sidecar.store.windows import FILES_IN_WINDOW


def listing(ix: Index) -> list[EpochInfo]:
    """The live (visible) epochs, oldest first."""
    rows = ix.query("SELECT n, samples, bytes, new, evicted, cut_at, listed, estimated FROM epochs "
                    "WHERE retired=0 ORDER BY n")
    return [EpochInfo(int(a), int(b), int(c), int(d), int(e), float(f), g, h)
            for a, b, c, d, e, f, g, h in rows]


FILE_CHUNK = 20_000
"""Rows per read of :func:`iter_files`: each chunk is its own short read, so a reader building a
large epoch's tree never holds the index (or its connection) for the whole epoch."""

_FILES_OF = {
    "range": ("SELECT path, size, checksum, sid, key FROM samples WHERE key > ? AND +id BETWEEN ? AND ? "
              "ORDER BY key LIMIT ?"),
    "rows": ("SELECT s.path, s.size, s.checksum, s.sid, s.key FROM samples s WHERE s.key > ? AND EXISTS "
             "(SELECT 1 FROM epoch_samples e WHERE e.epoch = ? AND e.sample = s.id) "
             "ORDER BY s.key LIMIT ?"),
}


def _query(db: sqlite3.Connection, n: int) -> tuple[str, tuple[int, ...]]:
    """The query listing live epoch ``n`` after a key, and its arguments after that key (the
    limit follows); KeyError when it is not live."""
    row = db.execute("SELECT retired, first_sample, max_sample, lo_key FROM epochs WHERE n=?",
                     (n,)).fetchone()
    if row is None or int(row[0]):
        raise KeyError(n)
    if row[1] is not None:
        return _FILES_OF["range"], (int(row[1]), int(row[2]))
    if row[3] is not None:
        return FILES_IN_WINDOW, ()
    return _FILES_OF["rows"], (n,)


def iter_files(ix: Index, n: int, *, chunk: int = FILE_CHUNK) -> Iterator[FileEntry]:
    """The files of live epoch ``n`` in path order (a sample's path is its key), read in chunks;
    KeyError when it is not live. Nothing of the epoch is held but the chunk being read."""
    with ix.read() as db:
        sql, args = _query(db, n)
    after = ""
    while True:
        with ix.read() as db:
            if sql is FILES_IN_WINDOW:
                rows = db.execute(sql, (n, after, chunk)).fetchall()
            else:
                rows = db.execute(sql, (after, *args, chunk)).fetchall()
        for p, sz, c, sid, _ in rows:
            yield FileEntry(str(p), int(sz), str(c), object_name(str(sid)))
        if len(rows) < chunk:
            return
        after = str(rows[-1][4])


def files(ix: Index, n: int) -> list[FileEntry]:
    """The files of live epoch ``n`` sorted by path; KeyError when it is not live."""
    return list(iter_files(ix, n))
