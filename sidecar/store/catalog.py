"""Catalog queries: the listed remote objects, their sampling order, and what is left to fetch.

The catalog is written by the listing (:mod:`epochfs.sidecar.catalog`) and read by the sampler's
fetch order; a row's ``rank`` is the keyed hash that defines the sampling order. Positions in that
order (schedule-mode windows are ranges of them) are counted along the rank index, never stored, so
neither a listing nor a relist renumbers rows. ``seen`` is the listing generation that last saw a
row: a complete relist drops the rows it did not see.
"""

from __future__ import annotations

from collections.abc import Iterable

from epochfs.sidecar.store.index import Index, Meta
from epochfs.sidecar.store.records import Candidate, CatalogRow


def add(ix: Index, rows: Iterable[CatalogRow]) -> int:
    """Insert or refresh listed objects (one transaction per call; call in batches)."""
    count = 0
    with ix.write() as db:
        for r in rows:
            db.execute(
                "INSERT INTO catalog(key, path, sid, size, version, rank) VALUES(?,?,?,?,?,?) "
                "ON CONFLICT(key) DO UPDATE SET size=excluded.size, version=excluded.version",
                (r.key, r.key, r.sid, r.size, r.version, r.rank),
            )
            count += 1
    return count


def finalize(ix: Index) -> int:
    """Record that the running listing is complete: the catalog's count, and the generation that
    windows and relists go by. Rows are not numbered (positions are implicit in the rank order),
    so this touches the meta table only; counting is one scan of the rank index, outside any
    write transaction."""
    total = int(ix.query("SELECT COUNT(*) FROM catalog")[0][0])
    with ix.write():
        ix.put(Meta.CATALOG_OBJECTS, str(total))
        ix.put(Meta.LISTING_COMPLETE, ix.get(Meta.LISTING_GENERATION) or "0")
    return total


def _candidates(
    ix: Index, where: str, args: tuple[object, ...], *, order_column: str
) -> list[tuple[int, Candidate]]:
    """Catalog rows matching ``where`` that are neither cached nor skipped, as (order, candidate)."""
    rows = ix.query(
        f"SELECT c.{order_column}, c.key, c.sid, c.size, c.version FROM catalog c "
        f"WHERE c.skipped = 0 AND NOT EXISTS (SELECT 1 FROM samples s WHERE s.key = c.key) "
        f"AND {where}",
        args,
    )
    return [(int(r[0]), Candidate(str(r[1]), str(r[2]), int(r[3]), str(r[4]))) for r in rows]


def candidates(ix: Index, *, after_rank: int | None, limit: int) -> list[tuple[int, Candidate]]:
    """The next catalog entries in sampling order that are neither cached nor skipped."""
    lower = -(2**63) if after_rank is None else after_rank
    op = ">=" if after_rank is None else ">"
    return _candidates(ix, f"c.rank {op} ? ORDER BY c.rank, c.key LIMIT ?", (lower, limit),
                       order_column="rank")


def window_candidates(ix: Index, lo: int, hi: int, *, limit: int) -> list[tuple[int, Candidate]]:
    """Catalog entries at positions [lo, hi) of the rank order that are neither cached nor
    skipped, in order (positions are counted, not stored: no row is ever renumbered)."""
    rows = ix.query(
        "SELECT w.n, w.key, w.sid, w.size, w.version FROM (SELECT ROW_NUMBER() OVER () - 1 + ? AS n, "
        "key, sid, size, version, skipped FROM (SELECT key, sid, size, version, skipped FROM catalog "
        "ORDER BY rank, key LIMIT ? OFFSET ?)) w WHERE w.skipped = 0 "
        "AND NOT EXISTS (SELECT 1 FROM samples s WHERE s.key = w.key) ORDER BY w.n LIMIT ?",
        (lo, max(0, hi - lo), lo, limit),
    )
    return [(int(r[0]), Candidate(str(r[1]), str(r[2]), int(r[3]), str(r[4]))) for r in rows]


def mark_skipped(ix: Index, key: str) -> None:
    """Record that a key will not be fetched (failed downloads, refused by policy)."""
    with ix.write() as db:
        db.execute("UPDATE catalog SET skipped=1 WHERE key=?", (key,))
        ix.bump("skipped_total", 1)


def count_skip(ix: Index, n: int = 1) -> None:
    """Count keys skipped before they reached the catalog (hostile names, too large)."""
    with ix.write():
        ix.bump("skipped_total", n)
