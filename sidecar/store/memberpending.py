"""A schedule-mode window's members file written ahead of its cut, renamed into place by the cut.

A cut writes its epoch's members file inside its write transaction only up to
:data:`.memberfiles.AT_CUT` members (about 2.5 us a member under the index's write lock); a
snapshot epoch above that chains on segments of the admission order (:mod:`.membersegments`), but
a schedule-mode window is not a range of ids, so a big window got its file from the keeper seconds
later (23-27 s at 1M under load) and an index damaged in between lost that live epoch.

The next window is known before its cut: :mod:`.ahead` keeps its facts (ends, keys missing, keys
cached) exact in the index. So the keeper (:func:`write_ahead`, one pass of
:class:`.memberfiles.Keeper`, paced as its other writes) writes the members of that predicted
window once it is complete (no key missing: the cut condition can hold) to
``epochs/pending-<N>.members``, a whole file of format :data:`.memberformat.AHEAD`: the samples
between the window's ends with an id up to the newest id then, in key order, as a cut lists a
window. Its first line (padded: :data:`SLACK`) records what it was written for: the ends, the
members' count and bytes, the sample of each end, and a *mark* (the running total of samples and
the newest id, as a segment's).

**At the cut** (:func:`place`, inside the cut's write transaction, after the epoch's row): the
file is used only when the epoch is that window recorded by its bounds with no excluded sample,
the same ends, the same count and bytes, the same sample at each end, and none of the samples it
lists left the index since: the running total grew by exactly the samples above the mark's id
(nothing at or below it was deleted), or else (a sample outside the window evicted since) the
samples between the ends up to the newest id it lists still number its count (a 0.26 s walk of
the rank index at 1M). A sample admitted since has a higher id, so with the same count none of
them is in the window. Then the cut writes the epoch's first line over the padded one, and the
last line again with that line's hash, fsyncs, renames the file to ``epoch-<N>.members`` and
fsyncs the folder: a cost that does not grow with the window. Otherwise the file is removed (stale:
its window is being cut) and the cut takes its other path (a whole file up to ``AT_CUT`` members,
else the keeper's a second later). A pending file is never read whole at the cut: one damaged on
the volume is renamed into place and refused whole by a rebuild (its hash), as any damaged file.

**The keeper's look** at a file already there is the cut's check, in a read: one that holds only
by the count (a sample outside the window evicted since) gets that snapshot's mark (its first line
and the last line's hash rewritten in place, under the write lock), so the cut's check is the
cheap one again; one that no longer holds is written again.

**Stale files**: the keeper removes a pending file for any number other than the next epoch's
(under the write lock, as it puts its own in place: a cut never checks one file and renames
another); the rebuild removes them all (its index hands out ids again); a dead writer's temp
file goes with the others (:func:`.memberfiles.clear_temps`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from epochfs.sidecar.store import hwm, memberchain
from epochfs.sidecar.store.index import Index, Meta
from epochfs.sidecar.store.memberformat import (
    AHEAD,
    DUTY,
    KEPT_META,
    PREFIX,
    SUFFIX,
    between,
    folder,
    matching,
    path_of,
)
from epochfs.sidecar.store.objects import fsync_dir, staged

log = logging.getLogger("epochfs.store")

PENDING = "pending-"
_NAME = re.compile(r"^pending-(0|[1-9][0-9]*)\.members$")
SLACK = 1024
"""Bytes the padded first line holds beyond the longer of its own and the epoch's first line as
predicted with the widest numbers: room for the cut's line, which must fit."""
_WIDE = {"cut_at": 9_999_999_999.999998, "samples": 10**15, "bytes": 10**18, "new": 10**15,
         "evicted": 10**15, "max_sample": 10**15, "listed": 10**15, "estimated": 10**15,
         "first_sample": None}
_encode = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), check_circular=False).encode


def path_for(root: Path, n: int) -> Path:
    return folder(root) / f"{PENDING}{n}{SUFFIX}"


def pending(root: Path) -> dict[int, Path]:
    """The pending files in ``root``'s ``epochs/`` folder by epoch number."""
    return {int(m.group(1)): path for m, path in matching(root, _NAME)}


def clear(root: Path, *, keep: int | None = None) -> int:
    """Remove the pending files (all, or all but epoch ``keep``'s); returns how many went."""
    gone = 0
    for n, p in pending(root).items():
        if n != keep:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
                gone += 1
    return gone


Ends = tuple[int, str, int, str]


def _mark_holds(db: sqlite3.Connection, mark: Any) -> bool:
    """No sample with an id up to the mark's left the index since it was taken (ids only grow):
    the running total grew by exactly the samples above the mark's id."""
    if not isinstance(mark, list) or len(mark) != 2 or not all(isinstance(x, int) for x in mark):
        return False
    total = db.execute("SELECT value FROM counters WHERE name='cache_samples'").fetchone()
    above = db.execute("SELECT COUNT(*) FROM samples WHERE id > ?", (mark[1],)).fetchone()[0]
    return total is not None and int(total[0]) - mark[0] == int(above)


def _at(db: sqlite3.Connection, key: str, top: int) -> list[Any] | None:
    """The (id, sid) of the sample of ``key`` when its id is at most ``top``."""
    row = db.execute("SELECT id, sid FROM samples WHERE key=? AND id <= ?", (key, top)).fetchone()
    return None if row is None else [int(row[0]), str(row[1])]


def _window(db: sqlite3.Connection, n: int) -> tuple[Ends, int, int] | None:
    """Window ``n``'s ends, cached keys and their bytes as :mod:`.ahead` keeps them exact, when it
    is complete (no key missing) and bounds describe it (no stray); None otherwise."""
    row = db.execute("SELECT lo_rank, lo_key, hi_rank, hi_key, cached, cached_bytes FROM ahead "
                     "WHERE n=? AND complete AND valid AND missing=0 AND strays=0", (n,)).fetchone()
    if row is None:
        return None
    return (int(row[0]), str(row[1]), int(row[2]), str(row[3])), int(row[4]), int(row[5])


def _still(db: sqlite3.Connection, h: dict[str, Any], ends: Ends, count: int, nbytes: int) -> bool:
    """Pending file ``h`` (its first line) still lists window ``ends`` of ``count`` members (their
    bytes ``nbytes``): the same ends, count and bytes, the same sample at each end, and none of
    the samples it lists gone: the mark holds (:func:`_mark_holds`), else (a sample outside the
    window evicted since) the samples between the ends up to its ``top`` id still number
    ``count``: ids only grow, so those are a subset of the ones listed."""
    top = h.get("top")
    if not isinstance(top, int):
        return False
    if (h.get("ends") != list(ends) or h.get("count") != count or h.get("bytes") != nbytes
            or h.get("first") != _at(db, ends[1], top) or h.get("last") != _at(db, ends[3], top)):
        return False
    return _mark_holds(db, h.get("mark")) or _between(db, ends, top) == count


def _between(db: sqlite3.Connection, ends: Ends, top: int) -> int:
    """The samples whose (rank, key) lies between ``ends`` with an id up to ``top`` (a walk of the
    rank index over the window: 0.26 s wall, 0.22 s CPU for 1M on the 2-core test machine)."""
    return int(db.execute("SELECT COUNT(*) FROM samples WHERE rank IS NOT NULL AND (rank, key) >= (?, ?) "
                          "AND (rank, key) <= (?, ?) AND id <= ?", (*ends, top)).fetchone()[0])


def _next(ix: Index, root: Path) -> int:
    """The number the next cut gets, as :func:`.epochs._cut` finds it."""
    newest = ix.query("SELECT MAX(n) FROM epochs")[0][0]
    top = hwm.floor(hwm.read(root), None if newest is None else int(newest))
    return 0 if top is None else top + 1


def write_ahead(ix: Index, root: Path, stop: threading.Event | None = None) -> int | None:
    """One look of the keeper: remove the stale pending files, then write the next window's when
    it is complete and has none that still holds; returns its epoch, None when none was written."""
    n = _next(ix, root)
    if set(pending(root)) - {n}:
        with ix.write():  # serialized with the cuts, which read and rename pending files under it
            if clear(root, keep=_next(ix, root)):
                fsync_dir(folder(root))
    if not ix.get(Meta.SCHEDULE):
        return None
    with ix.read() as db:  # one snapshot: the window, the mark and the ends' samples
        window = _window(db, n)
        if window is None:
            return None
        ends, count, nbytes = window
        old = memberchain.head(path_for(root, n))
        top = int(db.execute("SELECT COALESCE(MAX(id), 0) FROM samples").fetchone()[0])
        row = db.execute("SELECT value FROM counters WHERE name='cache_samples'").fetchone()
        if row is None:
            return None
        total = int(row[0])
        if old is not None and _still(db, old, ends, count, nbytes):
            if _mark_holds(db, old.get("mark")):
                return None
            remark = True  # counted all there in this snapshot: its mark, for the cut's cheap check
        else:
            remark = False
            if _between(db, ends, top) != count:
                return None  # a sample between the ends outside the window (a key relisted away)
            marks = ",".join("?" * len(KEPT_META))
            meta = dict(db.execute(f"SELECT name, value FROM meta WHERE name IN ({marks})",
                                   [m.value for m in KEPT_META]).fetchall())
            first, last = _at(db, ends[1], top), _at(db, ends[3], top)
    if remark and old is not None:
        _remark(ix, path_for(root, n), old, [total, top])
        return None
    head = {"epochfs_members": AHEAD, "pending": n, "ends": list(ends), "count": count, "bytes": nbytes,
            "first": first, "last": last, "top": top, "mark": [total, top],
            "written_at": time.time()}
    wide = {"epochfs_members": AHEAD, "epoch": n, **_WIDE, "meta": meta}
    reserve = max(len(_encode({**head, "count": 10**15, "bytes": 10**18})), len(_encode(wide))) + SLACK
    tmp = folder(root) / f".{PREFIX}{PENDING}{n}{SUFFIX}.{os.getpid()}.{threading.get_ident()}.tmp"
    folder(root).mkdir(exist_ok=True)
    with staged(path_for(root, n), tmp) as s:
        if not _fill(s.temp, ix, head, ends, top, reserve, stop):
            return None
        with ix.write():  # never under a cut that checks the file it would replace
            s.install()
    return n


def _remark(ix: Index, p: Path, h: dict[str, Any], mark: list[int]) -> None:
    """Give pending file ``p`` (first line ``h``) the mark of a snapshot in which its members were
    counted all there (:func:`_still`), so that the cut's check is the cheap one again: its first
    line and the last line's hash rewritten in place, under the write lock (never under a cut)."""
    with ix.write(), contextlib.suppress(FileNotFoundError):
        if memberchain.head(p) == h:
            _rewrite(p, {**h, "mark": mark})


def _padded(head: dict[str, Any], reserve: int) -> bytes | None:
    """``head`` as a first line of exactly ``reserve`` bytes (None: it does not fit)."""
    line = _encode(head).encode("ascii")
    return None if len(line) + 1 > reserve else line + b" " * (reserve - 1 - len(line)) + b"\n"


def _end(count: int, nbytes: int, members: str, first: bytes) -> bytes:
    return (_encode({"end": count, "bytes": nbytes, "sha256": members,
                     "head_sha256": hashlib.sha256(first).hexdigest()}) + "\n").encode("ascii")


def _fill(path: Path, ix: Index, head: dict[str, Any], ends: Ends, top: int, reserve: int,
          stop: threading.Event | None) -> bool:
    """Write the pending file to ``path`` (first line last, over its padding) and fsync it; False
    when the window's members turned out another count than ``head``'s or ``stop`` was set."""
    digest = hashlib.sha256()
    count = nbytes = 0
    with open(path, "wb") as f:
        f.write(b" " * (reserve - 1) + b"\n")
        began = time.monotonic()
        for data, members, size in between(ix.read, ends, top):
            digest.update(data)
            f.write(data)
            count, nbytes = count + members, nbytes + size
            worked = time.monotonic() - began
            if stop is not None and stop.wait(worked * (1 - DUTY) / DUTY):
                return False
            began = time.monotonic()
        if (count, nbytes) != (head["count"], head["bytes"]):
            return False  # changed while it was read: the next look writes it again
        first = _padded(head, reserve)
        if first is None:
            return False
        f.write(_end(count, nbytes, digest.hexdigest(), first))
        f.seek(0)
        f.write(first)
        f.flush()
        os.fsync(f.fileno())
    return True


def placed(db: sqlite3.Connection, root: Path, n: int, head: dict[str, Any]) -> bool:
    """:func:`place`, an error logged (False: the cut takes its other paths)."""
    try:
        return place(db, root, n, head)
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("epoch %d: its pending members file could not be used (%s)", n, e)
        return False


def place(db: sqlite3.Connection, root: Path, n: int, head: dict[str, Any]) -> bool:
    """Inside the cut of epoch ``n`` (its write transaction ``db``, its row in; ``head`` its first
    line): put its pending file in place as its members file when the file lists exactly the
    epoch (see the module's docstring); False otherwise, and the pending file removed."""
    p = path_for(root, n)
    if not p.exists():
        return False
    try:
        if _usable(db, p, n):
            return _rename(p, path_of(root, n), {**head, "epochfs_members": AHEAD})
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)  # not used, or used and renamed: n is being cut


def _usable(db: sqlite3.Connection, p: Path, n: int) -> bool:
    h = memberchain.head(p)
    row = db.execute("SELECT lo_rank, lo_key, hi_rank, hi_key, samples, bytes, max_sample FROM epochs "
                     "WHERE n=? AND first_sample IS NULL AND lo_key IS NOT NULL", (n,)).fetchone()
    if h is None or row is None or h.get("epochfs_members") != AHEAD or h.get("pending") != n:
        return False
    ends, count, nbytes = (int(row[0]), str(row[1]), int(row[2]), str(row[3])), int(row[4]), int(row[5])
    if db.execute("SELECT 1 FROM epoch_excluded WHERE epoch=? LIMIT 1", (n,)).fetchone() is not None:
        return False
    end = memberchain.end(p)
    return (end is not None and end.get("end") == count and end.get("bytes") == nbytes
            and isinstance(end.get("sha256"), str) and _still(db, h, ends, count, nbytes))


def _rename(p: Path, final: Path, head: dict[str, Any]) -> bool:
    """Put the epoch's first line over the padded one and the last line again with its hash,
    fsync, rename to ``final``, fsync the folder; False when the line does not fit."""
    if not _rewrite(p, head):
        return False
    os.replace(p, final)
    fsync_dir(final.parent)
    return True


def _rewrite(p: Path, head: dict[str, Any]) -> bool:
    """Put ``head`` over file ``p``'s padded first line and its last line again with that line's
    hash, fsync; False when the line does not fit (nothing changed)."""
    with open(p, "r+b") as f:
        reserve = len(f.readline())
        first = _padded(head, reserve)
        if first is None:
            return False
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - memberchain.TAIL))
        tail = f.read()
        last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1] + b"\n"
        end = json.loads(last)
        f.seek(0)
        f.write(first)
        f.seek(size - len(last))
        f.truncate()
        f.write(_end(int(end["end"]), int(end["bytes"]), str(end["sha256"]), first))
        f.flush()
        os.fsync(f.fileno())
    return True
