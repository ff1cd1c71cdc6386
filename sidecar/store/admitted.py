"""Reads of the admission order for a reader that follows the cache as it grows: the folder view's
next epoch, built ahead (:mod:`epochfs.sidecar.folderview_ahead`).

Why a module of its own: a snapshot-mode epoch is a range of the admission order (``first_sample
<= id <= max_sample``, :mod:`.epochs`), so whoever wants the *next* cut's set before it is cut
follows the samples as they are admitted (ids only grow) and the front of the range as it moves
(the epoch budget, eviction). These reads say exactly that and nothing more: the samples admitted
after an id, the lowest and highest ids held, and a live epoch's range as its row records it. They
change nothing, and a reader outside the store needs no SQL of its own (it reached into the
store's private index handle before).
"""

from __future__ import annotations

from dataclasses import dataclass

from epochfs.sidecar.store.index import Index


@dataclass(frozen=True)
class AdmittedSample:
    """One sample as an epoch's manifest and tree show it."""

    id: int
    """Its place in the admission order (ids only grow, never reused)."""
    path: str
    size: int
    checksum: str
    sid: str
    """Its sample id: the object file's name (:func:`.objects.object_name`)."""


@dataclass(frozen=True)
class EpochExtent:
    """A live snapshot-mode epoch as its row records it: every held sample with ``first <= id <=
    last``, ``samples`` of them, ``bytes`` in all."""

    first: int
    last: int
    samples: int
    bytes: int


def samples_after(ix: Index, after_id: int, limit: int) -> list[AdmittedSample]:
    """Up to ``limit`` samples with ids above ``after_id``, in admission order."""
    rows = ix.query("SELECT id, path, size, checksum, sid FROM samples WHERE id > ? ORDER BY id LIMIT ?",
                    (after_id, limit))
    return [AdmittedSample(int(i), str(p), int(s), str(c), str(sid)) for i, p, s, c, sid in rows]


def id_bounds(ix: Index) -> tuple[int, int]:
    """The lowest and highest sample ids held ((0, 0) when none is)."""
    # Two subqueries: SQLite answers a lone MIN or MAX from the index's ends, both in one SELECT by
    # a scan of the table (asked every step of the folder view, 0.1 s apart).
    lo, hi = ix.query("SELECT COALESCE((SELECT MIN(id) FROM samples), 0), "
                      "COALESCE((SELECT MAX(id) FROM samples), 0)")[0]
    return int(lo), int(hi)


def epoch_extent(ix: Index, n: int) -> EpochExtent | None:
    """Epoch ``n``'s range, count and bytes; None unless it is live and a range of the admission
    order (schedule-mode windows and epochs listed row by row are not)."""
    rows = ix.query("SELECT first_sample, max_sample, samples, bytes, retired FROM epochs WHERE n=?", (n,))
    if not rows or rows[0][0] is None or int(rows[0][4]):
        return None
    first, last, samples, nbytes, _ = rows[0]
    return EpochExtent(int(first), int(last), int(samples), int(nbytes))
