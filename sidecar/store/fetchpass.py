"""Where the snapshot-mode pass was, recorded for a restart: how far it offered the catalog's rows
(:data:`Meta.FETCH_OFFERED`, the rowid owed rows are looked for after) and its cursor in the rank
order (:data:`Meta.FETCH_CURSOR`).

The cursor is recorded because it cannot be found again from what is cached: a key the pass
admitted and a cut evicted looks like one never fetched. Guessed from the newest admissions (the
lowest rank among the last 256, :func:`.catalog.resume_rank`), a restart of a cache that turns
over went back below keys listed late (owed, low ranks, admitted last) and fetched again every
evicted key above them (219 of 436 in a reviewer's run). The guess stays for a cache recorded by
an older version. Both values are written in one transaction, and the cursor is read only beside
the rows' record: whatever forgets that record (another remote taking an empty cache,
:mod:`epochfs.sidecar.sampler.identity`; an index rebuilt from the members files) forgets the
cursor with it.
"""

from __future__ import annotations

from epochfs.sidecar.store import catalog
from epochfs.sidecar.store.index import Index, Meta

FRONT = "front"
"""The recorded cursor of a pass that starts from the front of the order."""


def offered_upto(ix: Index) -> int | None:
    """Where the last run's pass had offered every catalog row (None: never recorded)."""
    value = ix.get(Meta.FETCH_OFFERED)
    return None if value is None else int(value)


def record(ix: Index, *, offered_upto: int, cursor: int | None) -> None:
    """Record the pass's position (``cursor`` None: the front), both values in one transaction."""
    with ix.write():
        ix.put(Meta.FETCH_OFFERED, str(offered_upto))
        ix.put(Meta.FETCH_CURSOR, FRONT if cursor is None else str(cursor))


def resume_rank(ix: Index) -> int | None:
    """The cursor a restarted pass goes on from (None: the front): the recorded one, else (a cache
    recorded by an older version, or none) the guess from the newest admissions."""
    value = ix.get(Meta.FETCH_CURSOR)
    if value is None or ix.get(Meta.FETCH_OFFERED) is None:
        return catalog.resume_rank(ix)
    return None if value == FRONT else int(value)
