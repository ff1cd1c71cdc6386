"""Segments: the admission order's members written ahead of a cut, so that a big epoch's members
file is in place at its cut.

A cut writes its epoch's members file inside its write transaction (:func:`.memberfiles.at_cut`),
but only up to :data:`.memberfiles.AT_CUT` members of its own (about 2.5 us a member under the
index's write lock): chained on the previous live epoch's file (:mod:`.memberchain`) that covers a
snapshot epoch whose cut admitted fewer since that epoch's. The first epoch of a big cache, and a
cut after more than that many admissions, got their file from the keeper seconds later, and an
index damaged meanwhile lost that live epoch. So the keeper (the sampler's thread, paced) writes
the part that is known before the cut ahead of it:

    <cache>/epochs/segment-<lo>-<hi>.members

lists the samples with ids in ``[lo, hi]`` (format :data:`.memberformat.SEGMENTED`: the lines of a
members file, the hash over them), and names as its base the previous segment, or for the first
of a chain the newest live epoch's file (its *anchor*; no base when no epoch is live). A new
segment is written when more than :func:`step` samples were admitted past the newest one's ``hi``;
a chain is kept to :data:`DEPTH` segments: the next one after that covers everything since its
anchor and chains on it alone (the others go once no file names them).

**At a cut** (:func:`base_at_cut`), when the previous live epoch is no base for a file of at most
``AT_CUT`` members: the epoch's file chains on the newest segment, taking from its chain
``base_span`` (the ids where the chain is checked) and listing the rest of its range itself
(format :data:`.memberformat.SEGMENTED`), when the chain holds exactly the index's samples there.
Ids only grow (nothing is ever added inside a written range) and a sample leaves the index only by
a ``DELETE`` that keeps the running total ``cache_samples`` in its transaction, so each segment
records a *mark* (that total and its ``hi``, read in one snapshot as its write begins), and when
the total grew since by exactly the samples above ``hi`` and the sample at ``hi`` is the one it
listed, no sample at or below ``hi`` left since (:func:`_unchanged`: a count of the samples
admitted since, not of the range). Each link was checked the same way by the keeper when it wrote
the next one on it, so the newest one's check covers the chain; the anchor is taken only when it is
a live epoch (its range cannot change). When the check fails (a sample dropped inside a written
range: eviction never takes one above the newest cut), each segment's range is counted and
compared with its count (0.3 s for a 1M-id range), and the cut chains on the newest segment from
which every link down to the epoch's first id passes, listing a failing one above it itself. When
what the cut would list is more than ``AT_CUT``, it writes no file and the keeper writes it whole.
A rebuilt index hands out again the ids above its newest restored epoch: the rebuild
removes the segments over them (:func:`clear`) and those no restored file names, and a segment's
sample at ``hi`` must still be its own.

**What is kept**: a segment a live epoch's file (or a base file) reaches through its chain, and
the chain being written above the newest epoch; the others go (:func:`tidy`, the keeper, under the
write lock that cuts hold). The keeper rewrites a file chained on segments whole on its next pass
(:func:`.memberfiles.unchained`), so chains do not grow with every big cut and the segments go
soon after the cut.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from epochfs.sidecar.store import memberchain
from epochfs.sidecar.store.index import Index, Meta
from epochfs.sidecar.store.memberformat import (
    BASE_SUFFIX,
    SEGMENTED,
    SUFFIX,
    fill,
    folder,
    matching,
    path_of,
    present,
)
from epochfs.sidecar.store.memberformat import PREFIX as EPOCH_PREFIX
from epochfs.sidecar.store.objects import fsync_dir, staged

log = logging.getLogger("epochfs.store")

PREFIX = "segment-"
_NAME = re.compile(r"^segment-(0|[1-9][0-9]*)-(0|[1-9][0-9]*)\.members$")
DEPTH = 8
"""Segments a chain may hold; the next one covers everything since its anchor (one link)."""


def step(limit: int) -> int:
    """Samples admitted past the newest segment after which the keeper writes the next one: half
    of what a cut may write itself, so that what a cut lists stays under ``limit`` with the
    keeper a pass behind."""
    return max(1, limit // 2)


def name_ok(name: str) -> bool:
    """Whether ``name`` is a segment's (a file name never taken from elsewhere)."""
    return _NAME.match(f"{name}{SUFFIX}") is not None


def path_for(root: Path, lo: int, hi: int) -> Path:
    return folder(root) / f"{PREFIX}{lo}-{hi}{SUFFIX}"


def segments(root: Path) -> dict[str, Path]:
    """The segment files in ``root``'s ``epochs/`` folder by name (without the suffix)."""
    return {path.name[:-len(SUFFIX)]: path for _, path in matching(root, _NAME)}


def _heads(root: Path) -> dict[str, tuple[Path, dict[str, Any]]]:
    out = {}
    for name, path in segments(root).items():
        h = memberchain.head(path)
        if h is not None and h.get("segment") == name and h.get("epochfs_members") == SEGMENTED \
                and isinstance(h.get("max_sample"), int) and _own(h) is not None:
            out[name] = (path, h)
    return out


def _own(h: dict[str, Any]) -> tuple[int, int] | None:
    own = h.get("own")
    if isinstance(own, list) and len(own) == 2 and all(isinstance(x, int) for x in own):
        return int(own[0]), int(own[1])
    return None


def _chain(heads: dict[str, tuple[Path, dict[str, Any]]], top: str) -> list[tuple[Path, dict[str, Any]]]:
    """The segments from ``top`` down its chain (each its base's), newest first."""
    out: list[tuple[Path, dict[str, Any]]] = []
    name: str | None = top
    while name is not None and name in heads and len(out) < memberchain.MAX_DEPTH:
        out.append(heads[name])
        base = heads[name][1].get("base")
        name = base.get("segment") if isinstance(base, dict) else None
    return out


def _unchanged(db: sqlite3.Connection, h: dict[str, Any]) -> bool:
    """No sample with an id up to segment ``h``'s ``hi`` left the index since its write began:
    the running total of samples (kept in the transactions that add and remove them) grew by
    exactly the samples above that ``hi`` (ids only grow). A count of the samples admitted since,
    not of the segment's range."""
    mark = h.get("mark")
    if not isinstance(mark, list) or len(mark) != 2 or not all(isinstance(x, int) for x in mark):
        return False
    total = db.execute("SELECT value FROM counters WHERE name='cache_samples'").fetchone()
    above = db.execute("SELECT COUNT(*) FROM samples WHERE id > ?", (mark[1],)).fetchone()[0]
    return total is not None and int(total[0]) - mark[0] == int(above)


def _same_top(db: sqlite3.Connection, h: dict[str, Any]) -> bool:
    """:func:`_unchanged`, and the sample at segment ``h``'s ``hi`` is the one it listed there
    (not an id handed out again by a rebuilt index)."""
    at_hi = db.execute("SELECT sid FROM samples WHERE id=?", (h.get("max_sample"),)).fetchone()
    return at_hi is not None and at_hi[0] == h.get("hi_sid") and _unchanged(db, h)


def _passes(db: sqlite3.Connection, path: Path, h: dict[str, Any], unchanged: bool) -> bool:
    """The index holds exactly the samples segment ``h`` lists (see the module's docstring):
    ``unchanged`` (:func:`_unchanged` of a segment at or above it), else counted over its range."""
    own, last = _own(h), memberchain.end(path)
    if own is None or last is None:
        return False
    if unchanged:
        return True
    lo, hi = own
    count = db.execute("SELECT COUNT(*) FROM samples WHERE id BETWEEN ? AND ?", (lo, hi)).fetchone()[0]
    at_hi = db.execute("SELECT sid FROM samples WHERE id=?", (hi,)).fetchone()
    return int(count) == last["end"] and at_hi is not None and at_hi[0] == h.get("hi_sid")


def _anchor_live(db: sqlite3.Connection, root: Path, ref: Any) -> int | None:
    """The first id of anchor ``ref``'s range when it is a live epoch with its file whole."""
    if not isinstance(ref, dict) or not isinstance(ref.get("epoch"), int):
        return None
    row = db.execute("SELECT cut_at, max_sample FROM epochs WHERE n=? AND retired=0",
                     (ref["epoch"],)).fetchone()
    if row is None or not memberchain.names({"epoch": ref["epoch"], "cut_at": float(row[0]),
                                             "max_sample": int(row[1])}, ref):
        return None
    path = path_of(root, int(ref["epoch"]))
    h = memberchain.head(path)
    if h is None or not memberchain.names(h, ref) or not memberchain.ends_whole(path):
        return None
    first = h.get("first_sample")
    return int(first) if isinstance(first, int) else None


Chained = tuple[dict[str, Any], list[int], list[tuple[int, int]]]
"""The segment a cut's file chains on, the ``base_span`` it takes from it, the ranges it lists."""


def base_at_cut(db: sqlite3.Connection, n: int, root: Path, limit: int) -> Chained | None:
    """For a cut of epoch ``n`` inside its write transaction ``db`` (its row in): the segment its
    file chains on, the ``base_span`` it takes from it and the id ranges it lists itself (at most
    ``limit`` samples), or None. A segment file that cannot be read fails no cut: None."""
    try:
        return _base_at_cut(db, n, root, limit)
    except (OSError, ValueError, TypeError, KeyError) as e:
        log.warning("epoch %d: the segments could not be read at its cut (%s)", n, e)
        return None


def _base_at_cut(db: sqlite3.Connection, n: int, root: Path, limit: int) -> Chained | None:
    row = db.execute("SELECT first_sample, max_sample FROM epochs WHERE n=?", (n,)).fetchone()
    if row is None or row[0] is None:
        return None
    first, top = int(row[0]), int(row[1])
    heads = _heads(root)
    tops = sorted(heads, key=lambda s: int(heads[s][1]["max_sample"]), reverse=True)
    if not tops:
        return None
    base: dict[str, Any] | None = None
    lo = hi = 0
    chain = _chain(heads, tops[0])
    unchanged = _same_top(db, chain[0][1])
    for i, (path, h) in enumerate(chain):
        own = _own(h)
        if own is None or own[1] > top or own[1] < first:
            break
        if base is not None and own[1] != lo - 1:
            break  # not contiguous: never made so, stop here
        if not _passes(db, path, h, unchanged):
            if base is None:
                continue  # listed by the cut itself
            break
        if base is None:
            base, hi = memberchain.reference(h), own[1]
        lo = own[0]
        if i == len(chain) - 1 and lo > first:
            anchor_first = _anchor_live(db, root, h.get("base"))
            if anchor_first is not None and int(h["base"]["max_sample"]) == lo - 1:
                lo = anchor_first
    if base is None:
        return None
    span = [max(lo, first), hi]
    spans = memberchain.ranges(first, top, span[0], span[1])
    if memberchain.count(db, spans, limit) > limit:
        return None
    return base, span, spans


def advance(ix: Index, root: Path, limit: int, stop: threading.Event | None = None) -> str | None:
    """One look of the keeper: write the next segment when more than :func:`step` samples were
    admitted past the newest one (snapshot mode only); returns its name, None when none was due
    or ``stop`` was set. Not under the write lock: a segment is checked when a cut uses it. Its
    temp name starts as an epoch file's does, so start-up recovery clears a dead writer's
    (:func:`.memberfiles.clear_temps`)."""
    schedule = ix.get(Meta.SCHEDULE)
    if schedule:
        return None  # schedule windows are not ranges of the admission order
    with ix.read() as db:
        newest = db.execute("SELECT n, cut_at, max_sample FROM epochs WHERE retired=0 ORDER BY n DESC "
                            "LIMIT 1").fetchone()
    anchor: dict[str, Any] | None = None
    start = chain_lo = 1
    if newest is not None:
        path = path_of(root, int(newest[0]))
        h = memberchain.head(path)
        ref = {"epoch": int(newest[0]), "cut_at": float(newest[1]), "max_sample": int(newest[2])}
        if h is None or not memberchain.names(h, ref) or not isinstance(h.get("first_sample"), int) \
                or not memberchain.ends_whole(path):
            return None  # its file first (the keeper writes it), or not a range
        anchor, start, chain_lo = memberchain.reference(h), int(newest[2]) + 1, int(h["first_sample"])
    heads = {s: v for s, v in _heads(root).items() if v[1].get("anchor") == anchor}
    tops = sorted(heads, key=lambda s: int(heads[s][1]["max_sample"]), reverse=True)
    top = heads[tops[0]][1] if tops else None
    covered = int(top["max_sample"]) if top is not None else start - 1
    with ix.read() as db:  # one snapshot: the new segment's mark, and its base's check
        top_id = int(db.execute("SELECT COALESCE(MAX(id), 0) FROM samples").fetchone()[0])
        total = db.execute("SELECT value FROM counters WHERE name='cache_samples'").fetchone()
        pending = int(db.execute("SELECT COUNT(*) FROM samples WHERE id > ? AND id <= ?",
                                 (covered, top_id)).fetchone()[0])
        hi_sid = db.execute("SELECT sid FROM samples WHERE id=?", (top_id,)).fetchone()
        whole = top is not None and _same_top(db, top) and memberchain.end(heads[tops[0]][0]) is not None
    if pending <= step(limit) or hi_sid is None or total is None:
        return None
    depth = int(top.get("depth", 0)) + 1 if top is not None else 1
    if top is None or depth > DEPTH or not whole:  # a new chain on the anchor alone
        lo, base, depth = start, anchor, 1
    else:
        lo, base = covered + 1, memberchain.reference(top)
    name = f"{PREFIX}{lo}-{top_id}"
    final = path_for(root, lo, top_id)
    if final.exists():
        return None
    head: dict[str, Any] = {"epochfs_members": SEGMENTED, "segment": name, "cut_at": time.time(),
                            "first_sample": min(chain_lo, lo), "max_sample": top_id, "own": [lo, top_id],
                            "hi_sid": hi_sid[0], "mark": [int(total[0]), top_id], "anchor": anchor,
                            "depth": depth}
    if base is not None:  # what it takes from its base: the ids below its own (none opened above)
        head["base"], head["base_span"] = base, [min(chain_lo, lo), lo - 1]
    folder(root).mkdir(exist_ok=True)
    tmp = folder(root) / f".{EPOCH_PREFIX}{name}{SUFFIX}.{os.getpid()}.{threading.get_ident()}.tmp"
    with staged(final, tmp) as s:
        if fill(s.temp, ix.read, head, stop, [(lo, top_id)]) is None:
            return None
        s.install()
    return name


def unneeded(root: Path, newest: dict[str, Any] | None, *, active: bool = True) -> list[Path]:
    """The segments that no epoch's file reaches through its chain and that are not of the
    chain anchored at ``newest`` (the newest live epoch's file's reference, None: no live epoch;
    ``active`` False: only those a file reaches, for a rebuild)."""
    heads = _heads(root)
    needed: set[str] = set()
    for p in [*present(root).values(), *present(root, BASE_SUFFIX).values()]:
        h = memberchain.head(p)
        base = h.get("base") if h is not None else None
        name = base.get("segment") if isinstance(base, dict) else None
        if isinstance(name, str) and name in heads:
            needed.update(str(x[1]["segment"]) for x in _chain(heads, name))
    mine = sorted((int(h["max_sample"]), name) for name, (_, h) in heads.items()
                  if h.get("anchor") == newest)
    if active and mine:  # the chain being written: from its newest segment down
        needed.update(str(x[1]["segment"]) for x in _chain(heads, mine[-1][1]))
    return [p for name, p in segments(root).items() if name not in needed]


def tidy(root: Path, newest: dict[str, Any] | None, *, active: bool = True) -> list[Path]:
    """Remove the :func:`unneeded` segments (under the write lock: cuts read segments under it)."""
    gone = unneeded(root, newest, active=active)
    for p in gone:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
    if gone:
        fsync_dir(folder(root))
    return gone


def clear(root: Path, *, above: int = -1) -> int:
    """Remove the segments that reach above id ``above`` (every one by default): a rebuild's
    index hands out again the ids above its newest restored epoch, so no segment over them may
    ever be checked against it. Returns how many went."""
    gone = 0
    for p in segments(root).values():
        h = memberchain.head(p)
        top = h.get("max_sample") if h is not None else None
        if isinstance(top, int) and top <= above:
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
            gone += 1
    return gone
