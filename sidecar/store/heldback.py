"""Keys held back from a fetch while a folder view may still show their old objects.

Why: an object's file is named by its key's hash alone (``objects/<ab>/<sid>``), so a key evicted
and fetched again lands on the path that the links of every epoch that showed it name, with
whatever the remote holds now. With a publisher running, a retired epoch's folder is down before
its objects go (:mod:`.publisherlock`). Once the store has given up waiting for an absent
publisher (:data:`~.publisherlock.GONE_AFTER`) it retires and evicts while the folder still shows
the retired epochs: a fetch of a changed object would then show new bytes under an old epoch's
name and manifest, with no error. So every object evicted then is recorded here (table
:data:`TABLE` in the index, in the eviction's transaction: a sampler restart keeps it), and until
the holds are released the key is no candidate of the fetch order (:func:`clause`, which the
catalog's reads add) and a download of it that comes anyway is dropped at its admission
(:func:`among`). The link that names its object dangles meanwhile: a missing file, as documented.

The holds go (:func:`release`) once the publisher lock is held again (a publisher is back: it
takes the lock only after its recovery has taken the retired epochs' folders down) or is gone
(the cache left the folder view: :func:`.publisherlock.forget`). The keys stay in the catalog and
are fetched again by a later pass (or a schedule-mode window), like any key not cached.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import weakref

from epochfs.sidecar.store import publisherlock
from epochfs.sidecar.store.index import Index

log = logging.getLogger("epochfs.store")

TABLE = "held_back"
_DDL = f"CREATE TABLE IF NOT EXISTS {TABLE} (sid TEXT PRIMARY KEY) WITHOUT ROWID"

_empty: weakref.WeakSet[Index] = weakref.WeakSet()
"""Indexes this process knows to hold no holds: :func:`release` runs at every retirement look
(the sampler's every tick) and reads nothing for them. Only the sampler, which makes every
eviction, adds holds, so its own knowledge is enough."""
_told: weakref.WeakSet[Index] = weakref.WeakSet()
"""Indexes whose holds this process has logged (once, with their number, until released)."""
_lock = threading.Lock()


def _held(db: sqlite3.Connection) -> int:
    """Keys held back now (the table made)."""
    return int(db.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0])


def holding(ix: Index) -> bool:
    """Asked after :func:`.publisherlock.may_release` said yes: whether objects evicted now must be
    held back (the store gave up waiting for an absent publisher). Otherwise the holds left are
    released: a publisher holds the lock again, or the cache has no folder view now."""
    if publisherlock.gave_up(ix.path.parent):
        return True
    release(ix)
    return False


def hold(ix: Index, db: sqlite3.Connection, sids: list[str]) -> None:
    """Hold back the keys of ``sids``, evicted now (in the eviction's write transaction ``db``)."""
    if not sids:
        return
    db.execute(_DDL)
    db.executemany(f"INSERT OR IGNORE INTO {TABLE}(sid) VALUES(?)", [(s,) for s in sids])
    with _lock:
        _empty.discard(ix)
        told = ix in _told
        _told.add(ix)
    if not told:
        log.warning("holding back %d evicted key(s) from being fetched again: the folder view's "
                    "publisher has not run for %.0fs, so retired epochs' folders may still show "
                    "their objects, and a fetch would put the remote's current bytes under them; "
                    "their files are missing there until a publisher is back", _held(db),
                    publisherlock.GONE_AFTER)


def release(ix: Index) -> None:
    """Let every held-back key be fetched again."""
    with _lock:
        if ix in _empty:
            return
    with ix.read() as db:
        some = _any(db)
    if some:
        with ix.write() as db:
            count = db.execute(f"DELETE FROM {TABLE}").rowcount
        log.info("released %d held-back key(s): the folder view has no retired epoch's folder left "
                 "(a publisher runs, or the cache has no folder view now); they are fetched again",
                 count)
    with _lock:
        _empty.add(ix)
        _told.discard(ix)


def _any(db: sqlite3.Connection) -> bool:
    """Whether a key is held back now (the common case, none, costs one look at the schema)."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (TABLE,)).fetchone() is None:
        return False
    return db.execute(f"SELECT 1 FROM {TABLE} LIMIT 1").fetchone() is not None


def clause(db: sqlite3.Connection, sid_column: str) -> str:
    """SQL to add to a catalog read of candidates (``AND ...``) that passes over held-back keys;
    empty while none is held."""
    return f" AND NOT EXISTS (SELECT 1 FROM {TABLE} h WHERE h.sid = {sid_column})" if _any(db) else ""


def among(db: sqlite3.Connection, sids: list[str]) -> set[str]:
    """Which of ``sids`` are held back."""
    if not sids or not _any(db):
        return set()
    found: set[str] = set()
    for start in range(0, len(sids), 500):  # SQLite's bound on a statement's variables
        part = sids[start:start + 500]
        marks = ",".join("?" * len(part))
        found.update(str(s) for (s,) in db.execute(f"SELECT sid FROM {TABLE} WHERE sid IN ({marks})", part))
    return found
