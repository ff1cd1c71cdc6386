"""Eviction: the samples admitted first go first, except those a live epoch holds.

Index rows go first (committed), files second: a crash in between leaves orphan files that
recovery removes, never an index row without its object. Samples admitted after the newest cut
are never taken either: they wait for the next epoch, and evicting them would only trade one new
sample for another (the sampler pauses instead: backpressure).
"""

from __future__ import annotations

import sqlite3

from epochfs.sidecar.store import epochs
from epochfs.sidecar.store.index import Index
from epochfs.sidecar.store.objects import ObjectFiles
from epochfs.sidecar.store.records import Policy


def _evictable(db: sqlite3.Connection, limit: int) -> list[tuple[int, str, int]]:
    newest = db.execute("SELECT COALESCE(MAX(max_sample), 0) FROM epochs").fetchone()[0]
    rows = db.execute(
        "SELECT s.id, s.sid, s.size FROM samples s WHERE s.id <= ? "
        "AND NOT EXISTS (SELECT 1 FROM epoch_samples e WHERE e.sample = s.id) "
        "ORDER BY s.id LIMIT ?",
        (newest, limit),
    ).fetchall()
    return [(int(a), str(b), int(c)) for a, b, c in rows]


def evict(ix: Index, files: ObjectFiles, policy: Policy, need: int) -> int:
    """Retire what may retire, then evict the oldest unpinned samples until ``need`` bytes are
    free; returns the bytes freed."""
    epochs.retire(ix, policy)
    freed = 0
    victims: list[tuple[int, str, int]] = []
    with ix.write() as db:
        while freed < need:
            batch = _evictable(db, 256)
            if not batch:
                break
            for v in batch:
                if freed >= need:
                    break
                db.execute("DELETE FROM samples WHERE id=?", (v[0],))
                victims.append(v)
                freed += v[2]
        if victims:
            ix.bump("evicted_total", len(victims))
            ix.bump("cache_samples", -len(victims))
            ix.bump("cache_bytes", -freed)
            ix.bump("evicted_bytes_total", freed)
    files.remove(sid for _, sid, _ in victims)
    return freed
