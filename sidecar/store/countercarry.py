"""What a rebuilt index keeps of the damaged one's counters, so they never go backwards.

A rebuilt index (:mod:`.reset`, :mod:`.memberrestore`) gets its epochs and their samples back
from the members files, and :mod:`.memberrestore` recounts the running totals (``cache_samples``,
``cache_bytes``) from them. The counters that only grow (:data:`.meta.COUNTER_NAMES`: fetched,
evicted, skipped, failed, cuts, corrupt, repaired) are in no members file; the fresh index started
them at 0, and ``/metrics`` went from, say, ``epochfs_cuts_total`` 40 to 0 with a live epoch:
Prometheus reads that as a reset of every store counter at once.

So :func:`carry` gives the fresh index, for each counter, the larger of:

* its value in the damaged index, where the ``counters`` table can still be read (the damage is
  most often a few pages of the big tables: samples, catalog, epoch members). A query that fails
  (its page damaged, a file that is no database) gives nothing of that table; a value that is no
  non-negative integer is left out.
* what the rebuilt index proves (:func:`floors`): the cuts at least the epochs restored, the
  fetches at least the samples restored and their bytes.

And the supervisor's saved totals (:data:`.meta.Meta.SIDECAR_TOTALS`, ``SIDECAR_RESTARTS``), when
they can be read as JSON objects, so a supervisor that restarts after the rebuild resumes them.
What cannot be read is gone with the damaged index: those counters restart at their floor.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from pathlib import Path

from epochfs.sidecar.store.dburi import uri
from epochfs.sidecar.store.index import Index
from epochfs.sidecar.store.meta import COUNTER_NAMES, Meta

log = logging.getLogger("epochfs.store")

CARRIED_META = (Meta.SIDECAR_TOTALS, Meta.SIDECAR_RESTARTS)
"""The ``meta`` values a rebuilt index takes from the damaged one when they can be read."""


def read_damaged(index: Path) -> tuple[dict[str, int] | None, dict[Meta, str]]:
    """The counters (None: the table could not be read; a counter never counted is absent) and
    :data:`CARRIED_META` values that can still be read from the damaged ``index`` (read only, one
    query a table; nothing of a table whose query fails)."""
    counters: dict[str, int] | None = None
    meta: dict[Meta, str] = {}
    if not index.is_file():
        return counters, meta
    try:
        db = sqlite3.connect(uri(index, "ro"), uri=True, timeout=1.0)
    except sqlite3.Error:
        return counters, meta
    try:
        marks = ",".join("?" * len(COUNTER_NAMES))
        with contextlib.suppress(sqlite3.Error):
            rows = db.execute(f"SELECT name, value FROM counters WHERE name IN ({marks})",
                              COUNTER_NAMES).fetchall()
            counters = {str(name): value for name, value in rows if isinstance(value, int) and value >= 0}
        marks = ",".join("?" * len(CARRIED_META))
        with contextlib.suppress(sqlite3.Error):
            known = {m.value: m for m in CARRIED_META}
            for name, value in db.execute(f"SELECT name, value FROM meta WHERE name IN ({marks})",
                                          [m.value for m in CARRIED_META]).fetchall():
                with contextlib.suppress(ValueError, TypeError):
                    if isinstance(json.loads(value), dict):
                        meta[known[str(name)]] = str(value)
    finally:
        db.close()
    return counters, meta


def floors(db: sqlite3.Connection) -> dict[str, int]:
    """What the rebuilt index proves of its counters: each restored epoch was cut, each restored
    sample was fetched (with its bytes)."""
    cuts = int(db.execute("SELECT COUNT(*) FROM epochs").fetchone()[0])
    samples, nbytes = db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM samples").fetchone()
    return {"cuts_total": cuts, "fetched_total": int(samples), "fetched_bytes_total": int(nbytes)}


def carry(ix: Index, damaged: Path) -> dict[str, int]:
    """Give the fresh index ``ix`` (nothing else uses it yet) the counters and saved totals of the
    ``damaged`` index, at least :func:`floors` (see the module's docstring); returns the counters
    set. Logs what could not be read."""
    counters, meta = read_damaged(damaged)
    with ix.write() as db:
        least = floors(db)
        done = {name: max((counters or {}).get(name, 0), least.get(name, 0)) for name in COUNTER_NAMES}
        for name, value in done.items():
            ix.set_counter(name, value)
        for key, saved in meta.items():
            ix.put(key, saved)
    if counters is None:
        log.warning("the damaged index's counters could not be read: they restart from what the "
                    "restored epochs prove (their cuts, their samples' fetches), the others from 0")
    return done
