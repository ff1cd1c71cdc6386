"""Catalog queries: the listed remote objects, their sampling order, and what is left to fetch.

The catalog is written by the listing (:mod:`epochfs.sidecar.catalog`) and read by the sampler's
fetch order; a row's ``rank`` is the keyed hash that defines the sampling order, and ``pos`` its
0-based position once the listing is complete (schedule-mode windows are ranges of ``pos``).
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
    """Number the catalog in sampling order (positions define schedule-mode windows)."""
    with ix.write() as db:
        db.execute(
            "UPDATE catalog SET pos = (SELECT p FROM (SELECT key AS k, "
            "ROW_NUMBER() OVER (ORDER BY rank, key) - 1 AS p FROM catalog) WHERE k = catalog.key)"
        )
        total = int(db.execute("SELECT COUNT(*) FROM catalog").fetchone()[0])
        ix.put(Meta.CATALOG_OBJECTS, str(total))
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
    """Catalog entries at positions [lo, hi) that are neither cached nor skipped, in order."""
    return _candidates(ix, "c.pos >= ? AND c.pos < ? ORDER BY c.pos LIMIT ?", (lo, hi, limit),
                       order_column="pos")


def mark_skipped(ix: Index, key: str) -> None:
    """Record that a key will not be fetched (failed downloads, refused by policy)."""
    with ix.write() as db:
        db.execute("UPDATE catalog SET skipped=1 WHERE key=?", (key,))
        ix.bump("skipped_total", 1)


def count_skip(ix: Index, n: int = 1) -> None:
    """Count keys skipped before they reached the catalog (hostile names, too large)."""
    with ix.write():
        ix.bump("skipped_total", n)
