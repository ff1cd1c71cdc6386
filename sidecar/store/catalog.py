"""Catalog queries: the listed remote objects, their sampling order, and what is left to fetch.

The catalog is written by the listing (:mod:`epochfs.sidecar.catalog`) and read by the sampler's
fetch order; a row's ``rank`` is the keyed hash that defines the sampling order. Positions in that
order (schedule-mode windows are ranges of them) are counted along the rank index, never stored, so
neither a listing nor a relist renumbers rows. ``seen`` is the listing generation that last saw a
row: a complete relist drops the rows it did not see. The listing's side (its parts, page commits
and a relist's end) is :mod:`.listings`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from epochfs.sidecar.store import heldback
from epochfs.sidecar.store.index import Index, Meta
from epochfs.sidecar.store.records import Candidate, CatalogRow
from epochfs.sidecar.store.stats import FIRST_ROUND_WAIT, awaits_first_round, listing_known


def add(ix: Index, rows: Iterable[CatalogRow]) -> int:
    """Insert or refresh listed objects (one transaction per call; call in batches)."""
    count = 0
    with ix.write() as db:
        for r in rows:
            db.execute(
                "INSERT INTO catalog(key, path, sid, size, version, rank) VALUES(?,?,?,?,?,?) "
                "ON CONFLICT(key) DO UPDATE SET size=excluded.size, version=excluded.version, pos=CASE "
                "WHEN size IS excluded.size AND version IS excluded.version THEN pos END",
                (r.key, r.key, r.sid, r.size, r.version, r.rank),
            )
            count += 1
    return count


def finalize(ix: Index) -> int:
    """Record that the running listing is complete: the catalog's count, and the generation that
    windows and relists go by. Rows are not numbered (positions are implicit in the rank order),
    so this touches the meta table only; counting is one scan of the catalog, outside any write
    transaction. The count is of the keys the sampler can show (:data:`SHOWN`): a clash-skipped
    row is kept for the repair and the relist, not counted as an object of the dataset."""
    total = int(ix.query(f"SELECT COUNT(*) FROM catalog WHERE {SHOWN}")[0][0])
    with ix.write():
        ix.put(Meta.CATALOG_OBJECTS, str(total))
        ix.put(Meta.LISTING_COMPLETE, ix.get(Meta.LISTING_GENERATION) or "0")
    return total


SKIPPED_CLASH = 2
"""``catalog.skipped`` of a key that is also a folder of other keys (a file/folder name clash,
:mod:`epochfs.sidecar.listing.filter`): like any skip (1) it is never fetched as a new sample, but
the remote still lists it, so its row stays (a relist does not drop it as gone from the remote)
and a cached sample of it that is damaged is fetched again into its place
(:mod:`.integrity`), not marked lost."""

SKIP_COUNTED = -1
"""``catalog.pos`` (unused since schema 3) of a row whose skip ``skipped_total`` has counted: a
relist that lists the key again unchanged (same size and version) gives it another try but keeps
the mark, so skipping it again does not count it again; a listing that changed it clears the mark.
``skipped_total`` counts keys, as the EpochfsSamplerStalled alert reads it (catalog objects against
cached samples plus skipped keys), not one more at every relist (1800 for 300 keys refused in 30 s
of relists every 5 s)."""

SHOWN = f"skipped IS NOT {SKIPPED_CLASH}"
"""SQL: a catalog row counted as an object of the dataset (``catalog_objects``, what a listing
reports cataloged, the estimates and epoch headers drawn from them): every row but a clash-skipped
one, which a file/folder name clash keeps out of every epoch (before such rows were kept, a clash
never reached the catalog, and a complete listing must not look short of its keys)."""

REPAIRABLE = f"skipped IN (0, {SKIPPED_CLASH})"
"""SQL: a catalog row whose key the remote still lists and may be fetched for a repair in place."""

_UNFETCHED = ("FROM catalog c WHERE c.skipped = 0 "
              "AND NOT EXISTS (SELECT 1 FROM samples s WHERE s.key = c.key)")
"""Catalog rows that are neither cached nor skipped."""


def _candidates(
    ix: Index, where: str, args: tuple[object, ...], *, order_column: str, indexed_by: str | None = None
) -> list[tuple[int, Candidate]]:
    """Catalog rows matching ``where`` that are neither cached nor skipped, as (order, candidate)."""
    unfetched = _UNFETCHED if indexed_by is None else _UNFETCHED.replace(
        "FROM catalog c", f"FROM catalog c INDEXED BY {indexed_by}", 1)
    with ix.read() as db:
        unfetched += heldback.clause(db, "c.sid")
        rows = db.execute(f"SELECT c.{order_column}, c.key, c.sid, c.size, c.version {unfetched} AND {where}",
                          args).fetchall()
    return [(int(r[0]), Candidate(str(r[1]), str(r[2]), int(r[3]), str(r[4]))) for r in rows]


@dataclass(frozen=True)
class Refill:
    """One read of the snapshot-mode fetch order (:func:`refill`)."""

    owed: list[tuple[int, int, Candidate]]
    """(rank, rowid, candidate) of the rows owed to the pass: listed after its cursor had passed
    their rank (in the order they were listed)."""
    walk: list[tuple[int, Candidate]]
    """(rank, candidate): the walk's next rows above the cursor, in rank order."""
    offered_upto: int
    """Every catalog row up to this rowid has now been offered in this pass (as owed, or above
    the cursor, where the walk will find it): the next refill looks for owed rows after it."""


def refill(ix: Index, *, cursor: int | None, offered_upto: int, owed_limit: int, walk_limit: int,
           walk_below: int | None = None) -> Refill:
    """The rows **owed** to a snapshot-mode pass, then (``walk_limit``) the walk's next rows.

    The pass walks the rank order of the keys listed so far, ``cursor`` being the highest rank it
    has offered. A key listed after the walk passed its rank is owed: without this it would wait
    for the next pass (behind everything else when the dataset fits the cache), and the keys that
    list first would be over-represented long after the listing is complete. Rows are numbered
    in the order they enter the catalog (SQLite's rowid: a new row takes the highest plus one), so
    the rows inserted since the last refill are those after ``offered_upto``; of them, those at or
    below the cursor are owed. The owed rows and the walk are read in one transaction, so a row
    is offered once per pass, by one or the other; when ``owed_limit`` rows are owed the walk
    waits for the next refill. ``walk_below``: the walk goes no higher than this rank (the fetch
    order's pace while a listing runs). A key held back (:mod:`.heldback`) is neither owed nor
    walked: it is left to a later pass.
    """
    walk_from = -(2**63) if cursor is None else cursor
    op = ">=" if cursor is None else ">"
    select = "SELECT c.rowid, c.rank, c.key, c.sid, c.size, c.version"
    top_rank = 2**63 - 1 if walk_below is None else walk_below
    with ix.read() as db:
        unfetched = _UNFETCHED + heldback.clause(db, "c.sid")  # held back: a later pass's
        top = int(db.execute("SELECT COALESCE(MAX(rowid), 0) FROM catalog").fetchone()[0])
        # A relist that dropped the newest rows lets new ones take lower numbers again.
        upto = min(offered_upto, top)
        owed = []
        walk_ok = walk_limit > 0
        if cursor is not None and top > upto:
            if owed_limit > 0:
                owed = db.execute(f"{select} {unfetched} AND c.rowid > ? AND c.rank <= ? "
                                  "ORDER BY c.rowid LIMIT ?", (upto, cursor, owed_limit)).fetchall()
            if owed_limit <= 0 or len(owed) >= owed_limit:
                # Rows after these are not looked at yet (some may be owed): no walk past them.
                top = int(owed[-1][0]) if owed else upto
                walk_ok = False
        walk = db.execute(
            f"{select} {unfetched} AND c.rank {op} ? AND c.rank <= ? ORDER BY c.rank, c.key LIMIT ?",
            (walk_from, top_rank, walk_limit)).fetchall() if walk_ok else []
    return Refill([(int(r[1]), int(r[0]), Candidate(str(r[2]), str(r[3]), int(r[4]), str(r[5])))
                   for r in owed],
                  [(int(r[1]), Candidate(str(r[2]), str(r[3]), int(r[4]), str(r[5]))) for r in walk],
                  top)


def folder_lowest(ix: Index, lo: str, hi: str, *, below: int, limit: int = 8,
                  by_key: bool = False) -> list[tuple[int, Candidate]]:
    """The lowest-ranked rows with a key in [``lo``, ``hi``) and a rank below ``below``, neither
    cached nor skipped (a folder's next keys drawn by its estimated share,
    :mod:`epochfs.sidecar.sampler.earlypicks`). Read by the rank index from the order's start: the
    rows it passes are those below ``below``, a few times the samples taken (by the key index, a
    folder of 300k listed keys took 170 ms a look, its rows sorted by rank); ``by_key``: by the key
    index, where the folder has fewer rows listed than the order has below ``below``."""
    return _candidates(ix, "c.rank < ? AND c.key >= ? AND c.key < ? ORDER BY c.rank LIMIT ?",
                       (below, lo, hi, limit), order_column="rank",
                       indexed_by="sqlite_autoindex_catalog_1" if by_key else "catalog_rank")


def cached_under(ix: Index, ranges: list[tuple[str, str]], *, below: int) -> tuple[int, list[int]]:
    """The samples cached, and those with a key in each [lo, hi) of ``ranges`` (by the key index:
    as many index entries as the ranges hold), read together; no range is counted (an empty list)
    where the samples cached are ``below`` or more."""
    with ix.read() as db:
        row = db.execute("SELECT value FROM counters WHERE name='cache_samples'").fetchone()
        total = int(row[0]) if row else 0
        if total >= below:
            return total, []
        counts = [int(db.execute("SELECT COUNT(*) FROM samples WHERE key >= ? AND key < ?", r).fetchone()[0])
                  for r in ranges]
    return total, counts


def cached_among(ix: Index, keys: list[str]) -> set[str]:
    """Which of ``keys`` have a sample: read after a look at which keys are busy, it sees every
    admission that look missed (the admitter lets a key go only once its batch is committed)."""
    found: set[str] = set()
    with ix.read() as db:
        for start in range(0, len(keys), 500):  # SQLite's bound on a statement's variables
            part = keys[start:start + 500]
            marks = ",".join("?" * len(part))
            found.update(k for (k,) in db.execute(f"SELECT key FROM samples WHERE key IN ({marks})", part))
    return found


def last_row(ix: Index) -> int:
    """The highest rowid of the catalog (0 when empty)."""
    return int(ix.query("SELECT COALESCE(MAX(rowid), 0) FROM catalog")[0][0])


def candidates(ix: Index, *, after_rank: int | None, limit: int) -> list[tuple[int, Candidate]]:
    """The next catalog entries in sampling order that are neither cached nor skipped."""
    lower = -(2**63) if after_rank is None else after_rank
    op = ">=" if after_rank is None else ">"
    return _candidates(ix, f"c.rank {op} ? ORDER BY c.rank, c.key LIMIT ?", (lower, limit),
                       order_column="rank")


RESUME_RECENT = 256
"""Admissions looked at for a restarted sampler's starting rank (downloads finish out of order, up
to ``--concurrency`` apart)."""


def resume_rank(ix: Index) -> int | None:
    """Where a restarted snapshot-mode sampler's cursor goes on from when the last run recorded no
    cursor (:mod:`.fetchpass`, an older version): before the lowest rank among the newest
    :data:`RESUME_RECENT` admissions. From the front, its first candidates query stepped over every
    cached key (12.9 s to the first fetch after a restart with 1M cached samples). None (the front)
    when none of them has a rank (a store from before schema 4)."""
    row = ix.query("SELECT MIN(rank) FROM (SELECT rank FROM samples ORDER BY id DESC LIMIT ?)",
                   (RESUME_RECENT,))
    return None if not row or row[0][0] is None else int(row[0][0]) - 1


def window_candidates(ix: Index, lo: int, hi: int, *, limit: int) -> list[tuple[int, Candidate]]:
    """Catalog entries at positions [lo, hi) of the rank order that are neither cached nor
    skipped, in order (positions are counted, not stored: no row is ever renumbered)."""
    with ix.read() as db:
        rows = db.execute(
            "SELECT w.n, w.key, w.sid, w.size, w.version FROM (SELECT ROW_NUMBER() OVER () - 1 + ? AS n, "
            "key, sid, size, version, skipped FROM (SELECT key, sid, size, version, skipped FROM catalog "
            "ORDER BY rank, key LIMIT ? OFFSET ?)) w WHERE w.skipped = 0 "
            f"AND NOT EXISTS (SELECT 1 FROM samples s WHERE s.key = w.key){heldback.clause(db, 'w.sid')} "
            "ORDER BY w.n LIMIT ?",
            (lo, max(0, hi - lo), lo, limit),
        ).fetchall()
    return [(int(r[0]), Candidate(str(r[1]), str(r[2]), int(r[3]), str(r[4]))) for r in rows]


def _skip(db: sqlite3.Connection, key: str, value: int) -> bool | None:
    """Set ``key``'s row skipped (``value``) and marked counted: True when its skip is new (not
    counted since the listing last changed the object), None when the catalog has no such key."""
    row = db.execute("SELECT pos FROM catalog WHERE key=?", (key,)).fetchone()
    if row is None:
        return None
    db.execute("UPDATE catalog SET skipped=?, pos=? WHERE key=?", (value, SKIP_COUNTED, key))
    return row[0] != SKIP_COUNTED


def mark_skipped(ix: Index, key: str, *, failed: bool = False) -> bool:
    """Record that a key will not be fetched (``failed``: its downloads kept failing; otherwise
    refused by policy, as an object larger than the volume). ``skipped_total`` (and with
    ``failed``, ``failed_total``) counts the key unless its skip was counted already and no listing
    changed the object since (:data:`SKIP_COUNTED`): a relist's retry that fails or is refused again
    is the same key. Returns whether it was counted."""
    with ix.write() as db:
        counted = _skip(db, key, 1) is not False  # (no row: a relist dropped it meanwhile; counted)
        if counted:
            ix.bump("skipped_total", 1)
            if failed:
                ix.bump("failed_total", 1)
    return counted


def count_skip(ix: Index, n: int = 1) -> None:
    """Count keys skipped before they reached the catalog (hostile names, too large)."""
    with ix.write():
        ix.bump("skipped_total", n)



def first_round_pending(db: sqlite3.Connection) -> bool:
    """The first epoch ever, while a listing has not yet read a page of every folder (span) and
    began less than :data:`FIRST_ROUND_WAIT` seconds ago: an epoch cut then would sample the
    folders that happened to list first (the listing reads every folder's first page before any
    second one, in random order: docs/sampler.md)."""
    if db.execute("SELECT 1 FROM epochs LIMIT 1").fetchone() is not None:
        return False
    return awaits_first_round(listing_known(db, 0), FIRST_ROUND_WAIT)

