"""Start-up recovery: make a cache folder consistent after a crash, before anything writes.

What a crash can leave, given the order of writes (temp -> fsync -> rename -> dir fsync -> index
commit; eviction: index commit -> unlink): partial temp files, objects the index does not know, and
index rows whose object is missing or short (a volume that lost writes). Each is repaired here, and
the running totals are recounted from the samples table.

Samples are compared with their object files a chunk at a time in admission order, and object
files with the index a batch of names at a time: memory stays flat at any number of samples (the
scan itself, a ``stat`` per sample, still grows with them).
"""

from __future__ import annotations

import sqlite3

from epochfs.sidecar.store import hwm
from epochfs.sidecar.store.index import Index, Meta
from epochfs.sidecar.store.objects import ObjectFiles
from epochfs.sidecar.store.records import RecoveryReport, StoreError

CHUNK = 10_000
"""Samples read (or dropped) per transaction by recovery."""


def drop_samples(db: sqlite3.Connection, sample_ids: list[int]) -> None:
    """Forget samples whose objects are gone; epochs that listed them stop listing them (and stop
    counting their bytes)."""
    for sample_id in sample_ids:
        size = int(db.execute("SELECT size FROM samples WHERE id=?", (sample_id,)).fetchone()[0])
        db.execute("UPDATE epochs SET samples=samples-1, bytes=bytes-:size WHERE retired=0 AND "
                   "(first_sample <= :id AND :id <= max_sample OR first_sample IS NULL AND n IN "
                   "(SELECT epoch FROM epoch_samples WHERE sample=:id))",
                   {"size": size, "id": sample_id})
        db.execute("DELETE FROM epoch_samples WHERE sample=?", (sample_id,))
        db.execute("DELETE FROM samples WHERE id=?", (sample_id,))


def recount(ix: Index) -> None:
    """Reset the running totals from the samples table; call inside :meth:`Index.write`."""
    count, total = ix.db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM samples").fetchone()
    ix.set_counter("cache_bytes", int(total))
    ix.set_counter("cache_samples", int(count))


def recover(ix: Index, files: ObjectFiles, *, integrity: str | None = None) -> RecoveryReport:
    """Remove temp files, drop index rows whose object is missing or has the wrong size, remove
    objects the index does not know, and run ``PRAGMA integrity_check`` (unless ``integrity``
    gives the result of one just made). Sizes only: the scrub compares contents."""
    with ix.lock:
        if integrity is None:
            integrity = ix.integrity()
        if integrity != "ok":
            raise StoreError(f"{ix.path}: integrity check failed: {integrity}")
        temp_removed = files.clear_temps() + hwm.clear_temps(files.objects_dir.parent)
        bad: list[int] = []
        after = 0
        while True:  # in admission order, a chunk per read: no set of every sample id in memory
            with ix.read() as db:
                rows = db.execute("SELECT id, sid, size FROM samples WHERE id > ? ORDER BY id LIMIT ?",
                                  (after, CHUNK)).fetchall()
            for sample_id, sid, size in rows:
                if files.size_of(str(sid)) != int(size):
                    bad.append(int(sample_id))
            if len(rows) < CHUNK:
                break
            after = int(rows[-1][0])
        for i in range(0, len(bad), CHUNK):
            with ix.write() as db:
                drop_samples(db, bad[i:i + CHUNK])

        def known(names: list[str]) -> set[str]:
            marks = ",".join("?" * len(names))
            with ix.read() as db:
                return {str(r[0]) for r in db.execute(f"SELECT sid FROM samples WHERE sid IN ({marks})",
                                                       names)}

        orphans = files.remove_orphans(known, batch=500)
        with ix.write():
            recount(ix)
            ix.put(Meta.INFLIGHT_BYTES, "0")
    return RecoveryReport(temp_removed, len(bad), orphans, integrity)
