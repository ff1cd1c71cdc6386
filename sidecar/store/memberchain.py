"""Chained members files: a snapshot epoch's file written at its cut for the cost of what changed.

A whole members file (:mod:`.memberfiles`) lists every member of its epoch: about 2.5 us a member
(4 s for 1M) under the index's write lock, too much for a cut, so an epoch above
:data:`.memberfiles.AT_CUT` members gets its file from the keeper seconds later, and an index
damaged in between loses that epoch. A snapshot-mode epoch is a range of the admission
order, ``first_sample <= id <= max_sample`` (:mod:`.epochs`), and while an epoch B is live nothing
inside its range changes: ids only grow (AUTOINCREMENT; a rebuilt index continues above every
restored ``max_sample``) and eviction (:mod:`.eviction`, the only ``DELETE FROM samples``) never
takes a sample inside a live epoch's range or one it lists row by row; a repair keeps the sample's
row and id. So the samples in B's range at a later cut of N are exactly B's members, and N's
members are

    (B's members inside N's range)  +  (the samples in N's range outside B's range),

the second part being the samples admitted after B's cut (``(B.max_sample, N.max_sample]``) and,
rarely, older ones below B's range that N's budget reaches (``[N.first_sample, B.first_sample)``).
A *chained* file (format :data:`.memberfiles.CHAINED`) lists only that second part and names B
(:func:`reference`: its number, cut time and ``max_sample``, which a rebuilt or refolded file of
B keeps; a file of another cut of the same number does not match). Its cost at the cut is two
range reads of the rowid and a line per changed member.

**When a cut chains** (:func:`base_at_cut`): N is a range of the admission order (schedule-mode
windows and epochs listed row by row are not: they keep the whole file, or the keeper), and the
newest live epoch below N has a members file whose first line matches its row and records its
range, and that file ends with its last line (put in place whole by a rename; the rebuild still
checks every line's hash). Otherwise the cut writes a whole file, or, for an epoch too
big for one, chains on the keeper's segments (:mod:`.membersegments`, format 3: the same lines,
a base that is a segment, and ``base_span``, the ids taken from it: :func:`span`).

**What keeps a chain whole**: a retirement renames its epoch's file to ``epoch-B.base``
(:func:`.memberfiles.remove`, before the retirement's commit) instead of removing it; a base file
is never restored as an epoch, only read through a live file that names it. The keeper rewrites
a live file whose base is no longer a live epoch's file as a whole one (at its duty), then
removes the base files no file names (:func:`unreferenced`). A file whose base is missing or
damaged is refused whole by the rebuild, as a damaged whole file is: that epoch is lost, as is
an epoch whose file is missing.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

Head = dict[str, Any]
"""A members file's first line (see :mod:`.memberfiles`)."""
_REF = ("epoch", "segment", "cut_at", "max_sample")
"""What a chained file records of its base, and what the base's first line must repeat (an
epoch's file names no segment, a segment (:mod:`.membersegments`) no epoch)."""
MAX_DEPTH = 64
"""Links a rebuild follows down a chain before it refuses the file (a loop, or a chain no keeper
made: the keeper keeps its segments' chains to :data:`.membersegments.DEPTH`, and a live epoch's
file is chained on at most the other live epochs' and one segment chain)."""
TAIL = 4096
"""Bytes read from a file's end to see that its last line is there (an end line is ~120 bytes)."""


def head(path: Path) -> Head | None:
    """The first line of a members file (None: missing, unreadable, not a JSON object)."""
    try:
        with open(path, "rb") as f:
            value = json.loads(f.readline())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _last_line(path: Path) -> bytes | None:
    """The file's last line when it ends with a whole ``{"end": ...}`` line (read from its tail)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TAIL))
            tail = f.read()
    except OSError:
        return None
    last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    return last if tail.endswith(b"\n") and last.startswith(b'{"end":') else None


def ends_whole(path: Path) -> bool:
    """The file ends with its last line (``{"end": ...}``); a cheap look, not the hash check."""
    return _last_line(path) is not None


def reference(h: Head) -> dict[str, Any]:
    """What a chained file records of its base ``h`` (a first line)."""
    return {k: h.get(k) for k in _REF if k in h}


def span(h: Head) -> tuple[int, int] | None:
    """The ids a chained file takes from its base: its ``base_span`` where it records one (a
    file chained on a segment), else its own range (None: neither recorded)."""
    part = h.get("base_span")
    if isinstance(part, list) and len(part) == 2 and all(isinstance(x, int) for x in part):
        lo, hi = part
    else:
        lo, hi = h.get("first_sample"), h.get("max_sample")
    if not isinstance(lo, int) or not isinstance(hi, int):
        return None
    first, top = h.get("first_sample"), h.get("max_sample")
    if isinstance(first, int) and isinstance(top, int):
        lo, hi = max(lo, first), min(hi, top)
    return lo, hi


def end(path: Path) -> dict[str, Any] | None:
    """A file's last line when it ends whole (None otherwise); a cheap look, not the hash check."""
    last = _last_line(path)
    if last is None:
        return None
    try:
        value = json.loads(last)
    except ValueError:
        return None
    return value if isinstance(value, dict) and isinstance(value.get("end"), int) else None


def names(h: Head, ref: Mapping[str, Any]) -> bool:
    """Whether the first line ``h`` is that of the base ``ref`` names (same number, cut, range top)."""
    return all(h.get(k) == ref.get(k) for k in _REF)


def base_of(h: Head) -> int | None:
    """The epoch a chained file's first line names as its base (None: a whole file)."""
    ref = h.get("base")
    if not isinstance(ref, dict) or not isinstance(ref.get("epoch"), int):
        return None
    return int(ref["epoch"])


def ranges(first: int, top: int, base_first: int, base_top: int) -> list[tuple[int, int]]:
    """The id ranges of ``[first, top]`` outside ``[base_first, base_top]`` (at most two, lowest
    first, none empty): where a chained file's own members lie."""
    out = [(first, min(top, base_first - 1)), (max(first, base_top + 1), top)]
    return [(lo, hi) for lo, hi in out if lo <= hi]


def count(db: sqlite3.Connection, spans: list[tuple[int, int]], limit: int | None = None) -> int:
    """Samples inside ``spans`` (rowid ranges: the cost is their size, not the cache's); with
    ``limit``, counted only up to ``limit + 1`` (a cut asks whether it may write them: a range of
    1M ids costs 0.3 s to count whole on the 2-core test machine)."""
    if limit is None:
        return sum(int(db.execute("SELECT COUNT(*) FROM samples WHERE id BETWEEN ? AND ?",
                                  (lo, hi)).fetchone()[0]) for lo, hi in spans)
    total = 0
    for lo, hi in spans:
        total += int(db.execute("SELECT COUNT(*) FROM (SELECT 1 FROM samples WHERE id BETWEEN ? AND ? "
                                "LIMIT ?)", (lo, hi, limit + 1 - total)).fetchone()[0])
        if total > limit:
            break
    return total


def base_at_cut(db: sqlite3.Connection, n: int, path_of: Callable[[int], Path]
                ) -> tuple[dict[str, Any], list[tuple[int, int]]] | None:
    """For a cut of epoch ``n`` inside its write transaction ``db`` (its row in): the base its
    file can chain on and the id ranges it must list itself, or None (a whole file). The base is
    the newest live epoch below ``n`` whose file (``path_of``) is whole on disk and whose first
    line matches its row and records its range; ``n`` must be a range of the admission order."""
    row = db.execute("SELECT first_sample, max_sample FROM epochs WHERE n=?", (n,)).fetchone()
    if row is None or row[0] is None:
        return None  # a schedule window, or an epoch listed row by row
    first, top = int(row[0]), int(row[1])
    prev = db.execute("SELECT n, cut_at, max_sample, first_sample FROM epochs WHERE n < ? AND retired=0 "
                      "ORDER BY n DESC LIMIT 1", (n,)).fetchone()
    if prev is None:
        return None
    b, cut_at, b_top, b_first = int(prev[0]), float(prev[1]), int(prev[2]), prev[3]
    path = path_of(b)
    h = head(path)
    if h is None or not names(h, {"epoch": b, "cut_at": cut_at, "max_sample": b_top}):
        return None
    recorded = h.get("first_sample")
    # A rebuilt epoch is listed row by row (no first_sample in its row): its file still says the
    # range it was cut as, and the samples in that range are still exactly its members.
    if not isinstance(recorded, int) or (b_first is not None and int(b_first) != recorded):
        return None
    if not ends_whole(path):
        return None
    return reference(h), ranges(first, top, recorded, b_top)


def unreferenced(heads: Mapping[Path, Head | None], bases: Mapping[int, Path]) -> list[Path]:
    """The base files (``bases``: epoch -> path) that no members file (``heads``) reaches through
    its chain: what the keeper may remove."""
    base_heads = {b: head(p) for b, p in bases.items()}
    needed: set[int] = set()
    todo = [h for h in heads.values() if h is not None]
    while todo:
        h = todo.pop()
        b = base_of(h)
        if b is None or b in needed or b not in base_heads:
            continue
        needed.add(b)
        bh = base_heads[b]
        if bh is not None:
            todo.append(bh)
    return [p for b, p in sorted(bases.items()) if b not in needed]
