"""Checking the index without reading all of it at every start.

``PRAGMA integrity_check`` reads every page of ``index.sqlite``: 39 s at 10M samples, too long
for every start of the sampler. A restart does not need it -- SQLite's write-ahead log makes a
crash or ``kill -9`` safe; what needs it is a damaged file (a bad disk, a stray write), and that
can happen while the sampler runs as well as while it is down. So:

* **At start** (:func:`at_start`): the full check only when something asked for it -- the
  :mod:`.checkmark` marker, written by whatever found damage since (the background check below,
  or any process that SQLite told "database disk image is malformed") -- or when the index is
  small enough that the full check costs less than :data:`START_FULL_BYTES` of reading (a new or
  small cache: a damaged page is found before the first fetch). Otherwise
  a cheap check whose cost does not grow with the index (:func:`quick`): the file header, the
  schema, and the first and last entries of every table and index (the pages at both ends of each
  b-tree, where the newest rows are written). What the cheap check finds is confirmed by the full
  check. A damaged index is replaced (:mod:`.reset`: moved aside, a fresh one made, the
  catalog listed and the objects fetched again), in one log line, and the marker cleared.
* **In the background** (:class:`Background`, a thread of the sampler): the full check on a
  read-only connection of its own, paced to :data:`DUTY` of one core, :data:`EVERY` seconds after
  the last one began (the time and the result are kept in ``meta``). Damage it finds writes the
  marker, and the sampler's loop exits (status 74, :data:`~epochfs.sidecar.config.EXIT_INDEX`); the supervisor
  starts it again and that start runs the full check and the repair. The index is never replaced
  under a running sampler, so there is one repair path, the start-up one that was there already.

A crash loop is not possible: a start that finds damage replaces the index and clears the
marker; a start that finds none clears the marker too.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

from epochfs.sidecar.store import checkmark
from epochfs.sidecar.store.dburi import uri
from epochfs.sidecar.store.handle import IndexHandle
from epochfs.sidecar.store.index import WAL_SUFFIX, Index, Meta, is_corruption

log = logging.getLogger("epochfs.store")

START_FULL_BYTES = 8 << 20
"""An index (with its write-ahead log) smaller than this gets the full check at every start:
``integrity_check`` read 11-50 MiB/s on this 2-core machine (37 MiB in 0.78 s, 182 MiB in 6.8 s,
53 MiB in 4.6 s while the cores were busy), so well under a second."""
EVERY = 6 * 3600.0
"""Seconds from the start of one background full check to the next."""
DUTY = 0.25
"""Share of one core the background thread may use, for the full check and the object scan after it
(:mod:`.objectscan`): both are paced by one :class:`Pace`."""
SLICE = 0.05
"""Seconds the background thread works before it rests."""
PROGRESS_OPS = 10_000
"""SQLite virtual machine steps between two calls of the background check's pacing."""


class Pace:
    """False when the pass must stop; else rests so that the pass works ``duty`` of the time: after
    :data:`SLICE` seconds or more of work, a rest in proportion (0.05 s of work, 0.15 s of rest at
    :data:`DUTY`). Called often by the pass (SQLite's progress handler, the scan's loop)."""

    def __init__(self, stop: threading.Event, duty: float = DUTY) -> None:
        self.stop = stop
        self.duty = duty
        self._slice = time.monotonic()

    def __call__(self) -> bool:
        if self.stop.is_set():
            return False
        worked = time.monotonic() - self._slice
        if worked >= SLICE and self.duty < 1:
            if self.stop.wait(worked * (1 - self.duty) / self.duty):
                return False
            self._slice = time.monotonic()
        return True


def full(ix: Index) -> str:
    """``PRAGMA integrity_check`` on the index's own connection: "ok", or the damage (a
    malformed page may also make the check itself fail: that is damage too)."""
    try:
        return ix.integrity()
    except sqlite3.DatabaseError as e:
        if not is_corruption(e):
            raise
        return str(e)


def quick(ix: Index) -> str:
    """The cheap check: "ok", or what is wrong. Reads the header, the schema and a few pages at
    both ends of every b-tree (a dozen tables and indexes: a few dozen pages at any size)."""
    header = _header(ix.path)
    if header is not None:
        return header
    try:
        with ix.read() as db:
            objects = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                                 "WHERE type IN ('table', 'index')").fetchall()
            for kind, name, table, sql in objects:
                for statement in _ends(db, str(kind), str(name), str(table), str(sql or "")):
                    try:
                        db.execute(statement).fetchall()
                    except sqlite3.OperationalError as e:
                        if is_corruption(e):
                            raise
                        # A b-tree this statement cannot name (never a reason to refuse a start).
                        log.debug("index: quick check skipped %s: %s", name, e)
    except sqlite3.DatabaseError as e:
        if not is_corruption(e):
            raise
        return str(e)
    return "ok"


def _header(path: Path) -> str | None:
    """What is wrong with the header of the index file as it is on disk (None: nothing), read
    by SQLite itself on a connection of its own opened ``immutable`` (no locks, no write-ahead
    log: page 1 as the file holds it; SQLite checks the magic string, the page size and the
    format bytes, and says "file is not a database" otherwise).

    Never through a descriptor of this module's: this runs in the sampler, whose connection is
    open, and closing any descriptor of a file drops all of the process's POSIX locks on it, the
    SHARED lock that connection holds included. The next process to close its connection (the
    listing process at the stop after a crash restart) then got the EXCLUSIVE lock, took itself
    for the last user, checkpointed and deleted the write-ahead log under the sampler, which
    logged "write-ahead log deleted" at ERROR (task C54d). SQLite's own descriptor is kept open
    until this process's locks on the file are gone, so its close drops nothing."""
    try:
        with contextlib.closing(sqlite3.connect(uri(path, "ro", immutable=True), uri=True)) as db:
            db.execute("PRAGMA schema_version").fetchone()  # reads page 1 only, not the schema
    except sqlite3.DatabaseError as e:
        if is_corruption(e):
            return f"bad header ({e})"
        return f"header unreadable: {e}"
    return None


def _ends(db: sqlite3.Connection, kind: str, name: str, table: str, sql: str) -> list[str]:
    """Statements that read the first and the last entry of one b-tree (a table by its key, an
    index through itself)."""
    if kind == "table":
        if "WITHOUT ROWID" in sql.upper():
            key = [str(r[1]) for r in sorted(db.execute(f'PRAGMA table_info("{name}")'), key=lambda r: r[5])
                   if r[5]]
        else:
            key = ["rowid"]
        source = f'"{name}"'
    else:
        key = [str(r[2]) for r in db.execute(f'PRAGMA index_info("{name}")') if r[2] is not None]
        source = f'"{table}" INDEXED BY "{name}"'
    if not key:
        return []
    columns = ", ".join(f'"{k}"' if k != "rowid" else k for k in key)
    down = ", ".join((f'"{k}"' if k != "rowid" else k) + " DESC" for k in key)
    return [f"SELECT {columns} FROM {source} ORDER BY {columns} LIMIT 1",
            f"SELECT {columns} FROM {source} ORDER BY {down} LIMIT 1"]


def _size(path: Path) -> int:
    total = 0
    for p in (path, path.with_name(path.name + WAL_SUFFIX)):
        with contextlib.suppress(FileNotFoundError):
            total += p.stat().st_size
    return total


def record(ix: Index, started: float, result: str) -> None:
    """Keep the time and result of a full check in ``meta`` (best effort: a damaged index may
    refuse the write; the marker is what forces the repair)."""
    try:
        with ix.write():
            ix.put(Meta.INDEX_CHECKED_AT, repr(started))
            ix.put(Meta.INDEX_CHECK_RESULT, result)
    except sqlite3.DatabaseError as e:
        log.warning("could not record the index check in %s: %s", ix.path, e)


def at_start(handle: IndexHandle, *, full_below: int | None = None) -> str:
    """The sampler's start-up check, before anything else reads the index: "ok", or the damage
    of the index that was replaced. ``full_below``: the size under which the full check runs
    anyway (default :data:`START_FULL_BYTES`)."""
    root = handle.path.parent
    limit = START_FULL_BYTES if full_below is None else full_below
    asked = checkmark.reason(root)
    ix = handle.get()
    if asked is None and _size(handle.path) >= limit:
        result = quick(ix)
        if result == "ok":
            log.info("index: quick check ok; the full check runs in the background (last: %s)",
                     ix.get(Meta.INDEX_CHECK_RESULT) or "never")
            return "ok"
        asked = f"the quick check at start found: {result}"
    if asked is not None:
        log.warning("index: full check at start, asked for: %s", asked)
    started = time.time()
    result = full(ix)
    if result != "ok":
        handle.reset(result)
        ix = handle.get()
    record(ix, started, "ok")  # the index now in place passed (or is new and empty)
    checkmark.clear(root)
    return result


class Background:
    """The sampler's background full check: a thread that runs ``integrity_check`` on a
    read-only connection at :data:`DUTY` of a core, every :data:`EVERY` seconds.

    ``damage`` is what it (or any process, through the marker) found; the sampler's loop asks
    for it every tick and exits when it is set."""

    def __init__(self, handle: IndexHandle, stop: threading.Event, *, every: float = EVERY,
                 duty: float = DUTY, after: Callable[[threading.Event], object] | None = None) -> None:
        """``after``: run on this thread when it starts and once each full check passes (the
        store's scan of the object files, :mod:`.objectscan`)."""
        if not 0 < duty <= 1:
            raise ValueError("duty must be in (0, 1]")
        self.handle = handle
        self.root = handle.path.parent
        self.stop = stop
        self.every = every
        self.duty = duty
        self.checks = 0
        """Full checks this thread completed (tests and the log read it)."""
        self.found: str | None = None
        self.after = after
        self._thread = threading.Thread(target=self._run, name="index-check", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def damage(self) -> str | None:
        """Damage found by this thread or marked by any process since the start (None: none)."""
        return self.found or checkmark.reason(self.root)

    def _due_in(self) -> float:
        try:
            last = float(self.handle.get().get(Meta.INDEX_CHECKED_AT) or 0.0)
        except (sqlite3.Error, ValueError):
            last = 0.0
        return max(0.0, last + self.every - time.time())

    def _run(self) -> None:
        # Once at the start too: recovery checks only the journal's names, so a file deleted while
        # the sampler was stopped would wait for the first full check, up to EVERY seconds away.
        self._after()
        while not self.stop.wait(self._due_in()):
            started = time.time()
            try:
                result = self.check()
            except Exception as e:  # busy, unreadable: not damage; try again later
                log.warning("index: background check failed (%s); trying again in %.0fs", e, 60.0)
                self.stop.wait(60.0)
                continue
            if result is None:
                return  # stopped
            self.checks += 1
            if result != "ok":
                self.found = result
                checkmark.mark(self.root, f"background integrity_check: {result}")
                return
            log.info("index: background full check ok in %.1fs", time.time() - started)
            record(self.handle.get(), started, "ok")
            self._after()

    def _after(self) -> None:
        """The ``after`` duty (the object scan), its failure logged: the next round tries again."""
        if self.after is None or self.stop.is_set():
            return
        try:
            self.after(self.stop)
        except Exception as e:  # busy, unreadable
            log.warning("background object scan failed: %s", e)

    def check(self) -> str | None:
        """One paced full check on a read-only connection: "ok", the damage, or None if stopped.
        Its read transaction keeps checkpoints from passing its snapshot, so the write-ahead log
        grows by what is written meanwhile (until the next checkpoint after it ends)."""
        db = sqlite3.connect(uri(self.handle.path, "ro"), uri=True, timeout=30.0, check_same_thread=False)
        try:
            pace = Pace(self.stop, self.duty)
            # SQLite's progress handler: nonzero interrupts the check (the sampler stops).
            db.set_progress_handler(lambda: 0 if pace() else 1, PROGRESS_OPS)
            rows = db.execute("PRAGMA integrity_check").fetchall()
        except sqlite3.DatabaseError as e:
            if self.stop.is_set():
                return None
            if not is_corruption(e):
                raise
            return str(e)
        finally:
            db.close()
        return "; ".join(str(r[0]) for r in rows[:5])
