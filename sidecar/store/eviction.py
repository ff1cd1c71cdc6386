"""Eviction: the samples admitted first go first, except those a live epoch holds, or an epoch
retired less than the policy's ``retire_grace`` ago (a view may still show it: see there).

Index rows go first (committed), files second: a crash in between leaves orphan files that
recovery removes, never an index row without its object. Samples admitted after the newest cut
are never taken either: they wait for the next epoch, and evicting them would only trade one new
sample for another (the sampler pauses instead: backpressure).
"""

from __future__ import annotations

import sqlite3
import time

from epochfs.sidecar.store import epochs, heldback, publisherlock
from epochfs.sidecar.store.epochpins import HOLDS, grace_bounds
from epochfs.sidecar.store.index import Index
from epochfs.sidecar.store.objects import ObjectFiles
from epochfs.sidecar.store.records import Policy
from epochfs.sidecar.store.windows import IN_WINDOW


def gaps(db: sqlite3.Connection, now: float, grace: float) -> list[tuple[int, int]]:
    """Ranges of sample ids no holding epoch's range holds (live, or retired within ``grace`` at
    ``now``: :data:`~.epochpins.HOLDS`), up to the newest cut, lowest first (a handful: one below,
    between and above the holders' ranges)."""
    newest = int(db.execute("SELECT COALESCE(MAX(max_sample), 0) FROM epochs").fetchone()[0])
    held = db.execute(f"SELECT first_sample, max_sample FROM epochs WHERE {HOLDS} "
                      "AND first_sample IS NOT NULL AND first_sample <= max_sample "
                      "ORDER BY first_sample", grace_bounds(now, grace)).fetchall()
    out, lo = [], 1
    for first, last in held:
        if int(first) > lo:
            out.append((lo, int(first) - 1))
        lo = max(lo, int(last) + 1)
    if lo <= newest:
        out.append((lo, newest))
    return out


def _evictable(db: sqlite3.Connection, limit: int, now: float, grace: float) -> list[tuple[int, str, int]]:
    """The oldest samples outside every holding epoch (as :func:`gaps`): each gap between their
    ranges is read from its start, so pinned samples are never walked (an epoch listed row by row,
    or a schedule-mode window recorded by its bounds, is checked too; a retired epoch's rows stay
    until its grace is over: :func:`.epochpins.retire`)."""
    out: list[tuple[int, str, int]] = []
    windows = [int(n) for (n,) in db.execute(
        f"SELECT n FROM epochs WHERE {HOLDS} AND lo_key IS NOT NULL", grace_bounds(now, grace)).fetchall()]
    in_window = (f"AND NOT EXISTS (SELECT 1 FROM epochs e WHERE e.n IN ({','.join('?' * len(windows))}) "
                 f"AND {IN_WINDOW}) ") if windows else ""
    for lo, hi in gaps(db, now, grace):
        rows = db.execute(
            "SELECT s.id, s.sid, s.size FROM samples s WHERE s.id BETWEEN ? AND ? "
            "AND NOT EXISTS (SELECT 1 FROM epoch_samples e WHERE e.sample = s.id) "
            f"{in_window}ORDER BY s.id LIMIT ?",
            (lo, hi, *windows, limit - len(out)),
        ).fetchall()
        out += [(int(a), str(b), int(c)) for a, b, c in rows]
        if len(out) >= limit:
            break
    return out


def evict(ix: Index, files: ObjectFiles, policy: Policy, need: int, *, now: float | None = None) -> int:
    """Retire what may retire, then evict the oldest unpinned samples until ``need`` bytes are
    free; returns the bytes freed. Nothing while the cache's folder view has no publisher
    running (:mod:`.publisherlock`): an epoch the store retired may still be shown, its folder not
    taken down yet, and the sampler waits (backpressure) rather than break its files. The FUSE
    view's lag is covered by the grace instead (``now``: the clock both are read at). Once the
    store has given up waiting for a publisher, what is evicted is held back from a fetch
    (:mod:`.heldback`): a retired epoch's folder may still name its object's path."""
    if not publisherlock.may_release(ix.path.parent):
        return 0
    now = time.time() if now is None else now
    epochs.retire(ix, policy, now=now)  # releases the holds where a publisher is back
    held_back = publisherlock.gave_up(ix.path.parent)
    freed = 0
    victims: list[tuple[int, str, int]] = []
    with ix.write() as db:
        while freed < need:
            batch = _evictable(db, 256, now, policy.retire_grace)
            if not batch:
                break
            for v in batch:
                if freed >= need:
                    break
                db.execute("DELETE FROM samples WHERE id=?", (v[0],))
                db.execute("DELETE FROM repairs WHERE sample=?", (v[0],))
                victims.append(v)
                freed += v[2]
        if victims:
            if held_back:
                heldback.hold(ix, db, [sid for _, sid, _ in victims])
            ix.bump("evicted_total", len(victims))
            ix.bump("cache_samples", -len(victims))
            ix.bump("cache_bytes", -freed)
            ix.bump("evicted_bytes_total", freed)
    files.remove(sid for _, sid, _ in victims)
    return freed
