"""A members file's names and lines: what :mod:`.memberfiles` writes and :mod:`.memberrestore` reads.

One file per live epoch, ``<cache>/epochs/epoch-<N>.members``: a first JSON line for the epoch
(its ``epochs`` row: cut time, counts, ``max_sample``, what the listing knew; and the cache's
rules and identity from ``meta``, :data:`KEPT_META`), then lines of members, each a JSON array of
up to :data:`CHUNK` member arrays (:data:`COLUMNS`: id, sid, key, path (null: the key), size,
manifest checksum, version, admission time, digest, what verified it, rank), and a last line with
the number of members, their bytes and the SHA-256 of every line before it: a file damaged on the
volume is refused whole, never half used. A chained file (:data:`CHAINED`, :mod:`.memberchain`)
has the same lines; its first line names its base.

**Why SQLite writes the member lines.** A member line was made in Python: each row fetched as
a tuple of eleven objects (2.7 us a row of CPU on the 2-core test machine) and encoded again by
the ``json`` module (2.5 us): 5.5 us a member, 0.43 s wall for 100,000 under the index's write
lock at a cut, 8.9 s for 1M. Now one statement per chunk has SQLite render each member
(``json_array``) and join the chunk (``group_concat``), and Python gets one bytes object per
line, with the chunk's count, bytes and last id from the same statement: about 2.5 us a member.
The lines hold the same values in the same places (format 1 and 2 are unchanged); two
differences in spelling, which the hash covers and every reader accepts: a non-ASCII character is
written as UTF-8, not as a ``\\u`` escape, and the admission time as 17 significant digits
(``printf('%!.17g')``; ``json_array`` alone would write 15 and lose the last microseconds), which
reads back as the same float. An SQLite without its JSON functions (built without them: before
3.38 they were optional) gets the Python encoder (:data:`SQL_JSON`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from epochfs.sidecar.store.index import Meta
from epochfs.sidecar.store.windows import IN_WINDOW

MEMBERS_DIR = "epochs"
SUFFIX = ".members"
BASE_SUFFIX = ".base"
"""A retired epoch's file kept only as the base of a live epoch's chained file (never restored
as an epoch): :func:`.memberfiles.remove`."""
PREFIX = "epoch-"
FORMAT = 1
"""A whole file: every member of its epoch."""
CHAINED = 2
"""A chained file: its epoch's members admitted outside its base's range, and its base (an older
epoch's file) for the rest; an epochfs that reads only :data:`FORMAT` refuses it whole."""
SEGMENTED = 3
"""A segment (:mod:`.membersegments`: a range of the admission order the keeper wrote ahead of a
cut), or an epoch's file chained on one; its first line may say which part of its base it takes
(``base_span``). An epochfs that reads only :data:`FORMAT` and :data:`CHAINED` refuses it whole."""
AHEAD = 4
"""A whole file written ahead of its cut (:mod:`.memberpending`: a schedule-mode window's, as
``pending-<N>.members``): its first line is padded to a fixed length so that the cut can put the
epoch's own first line over it in place, and its last line's ``sha256`` covers the member lines
only, ``head_sha256`` the first line (padding and newline included). An epochfs that reads only
formats 1-3 refuses it whole."""
FORMATS = (FORMAT, CHAINED, SEGMENTED, AHEAD)
CHUNK = 20_000
"""Members per line, read in one statement (never the whole epoch at once: a line of 20,000 is
about 5 MB)."""
DUTY = 0.5
"""Share of one core the keeper (:class:`.memberfiles.Keeper`) may use while it writes a file
(it rests between lines; a cut's write is not paced)."""
KEPT_META = (Meta.CAPACITY, Meta.KEEP_EPOCHS, Meta.MIN_SAMPLES, Meta.HEADROOM, Meta.IN_USE_SECONDS,
             Meta.RETIRE_GRACE, Meta.SCHEDULE, Meta.SAMPLER_REMOTE, Meta.SAMPLER_ENDPOINT, Meta.SAMPLER_SEED,
             Meta.SAMPLER_SHARD)
"""The index's ``meta`` values a rebuilt index gets back (from the newest epoch's file): the
cache's rules, which the FUSE server reads before the sampler records them again, and what the
cache was filled from (remote, its endpoint, seed, shard), which the sampler checks at start: the restored
samples' ranks were made with that seed."""
HEADER_COLUMNS = ("cut_at", "samples", "bytes", "new", "evicted", "max_sample", "listed", "estimated",
                  "first_sample")
"""The ``epochs`` row's fields in a file's first line; ``first_sample`` (null: not a range of
the admission order) is what a later cut needs to chain its file on this one (:mod:`.memberchain`)."""

_PATH = "nullif(s.path, s.key)"
COLUMNS = (f"s.id, s.sid, s.key, {_PATH}, s.size, s.checksum, s.version, s.admitted_at, s.digest, "
           "s.verified, s.rank")
"""A member's fields, in the order of its array in the file (the path is null when it is the key,
as it is since schema 1: not a second copy of every key)."""
_JSON = (f"json_array(s.id, s.sid, s.key, {_PATH}, s.size, s.checksum, s.version, "
         "json(printf('%!.17g', s.admitted_at)), s.digest, s.verified, s.rank)")
""":data:`COLUMNS` as one JSON array, rendered by SQLite (the admission time with every digit)."""
_BLOB = "CAST('[' || group_concat({json}, ',') || ']' || char(10) AS BLOB)"
"""The chunk's member arrays as one line (bytes: no decoding and encoding of 5 MB in Python), in
the order the rows come (a reader takes a line as a set of members)."""
_RANGE = ("SELECT COUNT(*), COALESCE(SUM(s.size), 0), {line}, "
          "(SELECT MIN(t.id) FROM samples t WHERE t.id > :top AND t.id <= :hi) "
          "FROM samples s WHERE s.id BETWEEN :lo AND :top")
"""A line of the samples whose ids lie in ``[lo, top]`` (a window of at most :data:`CHUNK` ids of
a range ending at ``hi``), and the next id of the range after it: read straight off the table's
rowid order, no sort and no subquery (a range of the admission order is dense: the next window
starts at a sample, so a line is only shorter than :data:`CHUNK` where ids were skipped)."""
_PAGED = {
    "rows": ("FROM epoch_samples e JOIN samples s ON s.id = e.sample WHERE e.epoch = ? AND e.sample > ? "
             "ORDER BY e.sample LIMIT ?"),
    "window": ("FROM samples s, epochs e WHERE e.n = ? AND s.key > ? AND "
               f"{IN_WINDOW.replace('(s.rank, s.key) ', '(+s.rank, s.key) ')} ORDER BY s.key LIMIT ?"),
    "ends": ("FROM samples s WHERE s.key > ? AND s.rank IS NOT NULL AND (+s.rank, s.key) >= (?, ?) "
             "AND (+s.rank, s.key) <= (?, ?) AND s.id <= ? ORDER BY s.key LIMIT ?"),
}
"""The other epochs' members, :data:`CHUNK` at a time after the last one's id (a window's: its key;
``ends``: a window not cut yet, by its ends and top id, :func:`between`)."""
_PAGE = ("SELECT COUNT(*), COALESCE(SUM(size), 0), {line}, MAX(id), MAX(key) "
         "FROM (SELECT s.id AS id, s.size AS size, s.key AS key, {json} AS j {source})")
"""A line of :data:`_PAGED`'s members, its last id and last key."""
_RANGE_SQL = _RANGE.format(line=_BLOB.format(json=_JSON))
_PAGE_SQL = {kind: _PAGE.format(line=_BLOB.format(json="j"), json=_JSON, source=source)
             for kind, source in _PAGED.items()}


def _has_json() -> bool:
    with contextlib.closing(sqlite3.connect(":memory:")) as db:
        try:
            db.execute("SELECT json_array(json(printf('%!.17g', 1.5)))").fetchone()
        except sqlite3.OperationalError:
            return False
    return True


SQL_JSON = _has_json()
"""Whether this SQLite renders the member lines (its JSON functions); else the Python encoder."""


def folder(root: Path) -> Path:
    return root / MEMBERS_DIR


def matching(root: Path, pattern: re.Pattern[str]) -> list[tuple[re.Match[str], Path]]:
    """The files of ``root``'s ``epochs/`` folder whose names match ``pattern``, with the match
    (none when the folder is missing): the segments' and the pending files' one listing."""
    try:
        names = os.listdir(folder(root))
    except FileNotFoundError:
        return []
    return [(m, folder(root) / name) for name in names if (m := pattern.match(name))]


def path_of(root: Path, n: int) -> Path:
    """The members file of epoch ``n`` in the cache folder ``root``."""
    return folder(root) / f"{PREFIX}{n}{SUFFIX}"


def number_of(name: str) -> int | None:
    """The epoch a members file name is for (None: not a members file)."""
    if not (name.startswith(PREFIX) and name.endswith(SUFFIX)):
        return None
    digits = name[len(PREFIX):-len(SUFFIX)]
    plain = digits.isascii() and digits.isdigit()  # int() fails on "²", which isdigit() passes
    return int(digits) if plain and (digits == "0" or not digits.startswith("0")) else None


def base_path_of(root: Path, n: int) -> Path:
    """The file of retired epoch ``n`` kept as a chained file's base (:func:`.memberfiles.remove`)."""
    return folder(root) / f"{PREFIX}{n}{BASE_SUFFIX}"


def present(root: Path, suffix: str = SUFFIX) -> dict[int, Path]:
    """The members files in ``root``'s ``epochs/`` folder by epoch number (none: no folder);
    with ``suffix`` :data:`BASE_SUFFIX`, the base files instead."""
    try:
        names = os.listdir(folder(root))
    except FileNotFoundError:
        return {}
    out = {}
    for name in names:
        n = number_of(name[:-len(suffix)] + SUFFIX) if name.endswith(suffix) else None
        if n is not None:
            out[n] = folder(root) / name
    return out


Reader = Callable[[], contextlib.AbstractContextManager[sqlite3.Connection]]
"""Opens one read of the index: ``ix.read`` (the keeper), or the cut's own write transaction."""
Line = tuple[bytes, int, int]
"""One line of members as written (newline included), its members and their bytes."""


def _plan(read: Reader, n: int, spans: list[tuple[int, int]] | None
          ) -> tuple[str, list[tuple[int, int]]]:
    """How live epoch ``n``'s members are listed (KeyError when it is not live): ``("range",
    id ranges)`` (``spans`` when given: a chained file's own members), or ``("rows", [])`` /
    ``("window", [])`` (:data:`_PAGED`)."""
    with read() as db:
        row = db.execute("SELECT retired, first_sample, max_sample, lo_key FROM epochs WHERE n=?",
                         (n,)).fetchone()
    if row is None or int(row[0]):
        raise KeyError(n)
    if spans is not None:
        return "range", spans
    if row[3] is not None and row[1] is None:
        return "window", []
    if row[1] is not None:
        return "range", [(int(row[1]), int(row[2]))]
    return "rows", []


def ranged(read: Reader, ranges: list[tuple[int, int]]) -> Iterator[Line]:
    """The lines of the samples in these id ranges, a line per read transaction (a segment's, or
    a range epoch's)."""
    for lo, hi in ranges:
        at: int | None = lo
        while at is not None:
            args = {"lo": at, "top": min(at + CHUNK - 1, hi), "hi": hi}
            with read() as db:
                if SQL_JSON:
                    count, nbytes, data, at = db.execute(_RANGE_SQL, args).fetchone()
                else:
                    count, nbytes, data, at = _python_range(db, args)
            if count:
                yield bytes(data), int(count), int(nbytes)


def lines(read: Reader, n: int, spans: list[tuple[int, int]] | None = None) -> Iterator[Line]:
    """The member lines of live epoch ``n``, a line per read transaction (the epoch cannot
    change while it is live); KeyError when it is not live. ``spans``: only the samples in these
    id ranges (a chained file's own members)."""
    kind, ranges = _plan(read, n, spans)
    yield from ranged(read, ranges)
    after: int | str = "" if kind == "window" else 0
    while kind in _PAGED:
        with read() as db:
            if SQL_JSON:
                count, nbytes, data, last_id, last_key = db.execute(
                    _PAGE_SQL[kind], (n, after, CHUNK)).fetchone()
            else:
                count, nbytes, data, last_id, last_key = _python_page(db, _PAGED[kind], (n, after, CHUNK))
        if count:
            yield bytes(data), int(count), int(nbytes)
        if count < CHUNK:
            return
        after = str(last_key) if kind == "window" else int(last_id)


def between(read: Reader, ends: tuple[int, str, int, str], top: int) -> Iterator[Line]:
    """The lines of the samples whose (rank, key) lies between ``ends`` and whose id is at most
    ``top``, in key order, a line per read transaction: a window's members before its cut
    (:mod:`.memberpending`), listed as :func:`lines` lists a cut window's."""
    after = ""
    while True:
        args = (after, *ends, top, CHUNK)
        with read() as db:
            if SQL_JSON:
                count, nbytes, data, _, last_key = db.execute(_PAGE_SQL["ends"], args).fetchone()
            else:
                count, nbytes, data, _, last_key = _python_page(db, _PAGED["ends"], args)
        if count:
            yield bytes(data), int(count), int(nbytes)
        if count < CHUNK:
            return
        after = str(last_key)


_encode = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), check_circular=False).encode


def _python_lines(rows: list[Any]) -> tuple[int, int, bytes]:
    """Rows of :data:`COLUMNS` as a line, encoded here (an SQLite without JSON functions)."""
    data = (_encode(rows) + "\n").encode("ascii") if rows else b""
    return len(rows), sum(int(r[4]) for r in rows), data


def _python_range(db: sqlite3.Connection, args: dict[str, int]) -> tuple[int, int, bytes, int | None]:
    """:data:`_RANGE`, the rows fetched and encoded here."""
    rows = db.execute(f"SELECT {COLUMNS} FROM samples s WHERE s.id BETWEEN :lo AND :top ORDER BY s.id",
                      args).fetchall()
    at = db.execute("SELECT MIN(id) FROM samples WHERE id > :top AND id <= :hi", args).fetchone()[0]
    return (*_python_lines(rows), at)


def _python_page(db: sqlite3.Connection, source: str, args: tuple[Any, ...]
                 ) -> tuple[int, int, bytes, int | None, str | None]:
    """:data:`_PAGE`, the rows fetched and encoded here."""
    rows = db.execute(f"SELECT {COLUMNS} {source}", args).fetchall()
    last = rows[-1] if rows else (None,) * 3
    return (*_python_lines(rows), last[0], last[2])


def header(read: Reader, n: int) -> dict[str, Any] | None:
    """Live epoch ``n``'s first line as a dict (None: not a live epoch)."""
    with read() as db:
        row = db.execute(f"SELECT {', '.join(HEADER_COLUMNS)} FROM epochs WHERE n=? AND retired=0",
                         (n,)).fetchone()
        marks = ",".join("?" * len(KEPT_META))
        meta = dict(db.execute(f"SELECT name, value FROM meta WHERE name IN ({marks})",
                               [m.value for m in KEPT_META]).fetchall())
    if row is None:
        return None
    return {"epochfs_members": FORMAT, "epoch": n, **dict(zip(HEADER_COLUMNS, row, strict=True)),
            "meta": meta}


def temp(root: Path, n: int) -> Path:
    """A temp name for epoch ``n``'s file in the folder (its pid and thread: see
    :func:`.memberfiles.clear_temps`), the folder made if missing."""
    where = folder(root)
    where.mkdir(exist_ok=True)
    return where / f".{PREFIX}{n}{SUFFIX}.{os.getpid()}.{threading.get_ident()}.tmp"


def fill(path: Path, read: Reader, head: dict[str, Any], stop: threading.Event | None,
         spans: list[tuple[int, int]] | None = None) -> tuple[int, int] | None:
    """Write epoch ``head["epoch"]``'s file to ``path`` and fsync it; returns its members and
    their bytes, None when the epoch retired meanwhile or ``stop`` was set (the caller removes
    the file). ``stop`` also paces the write to :data:`DUTY` of a core (the keeper: the
    sampler's threads share this process's GIL); without it the write runs at full speed (a cut,
    under the write lock). ``spans``: a chained file (``head`` names its base), listing only the
    members in these id ranges. A segment's ``head`` (its ``segment`` name, no epoch) lists the
    samples in ``spans`` whatever epoch holds them."""
    source = (ranged(read, spans or []) if "segment" in head
              else lines(read, int(head["epoch"]), spans))
    digest = hashlib.sha256()
    count = nbytes = 0
    with open(path, "wb") as f:
        first = (_encode(head) + "\n").encode("ascii")
        digest.update(first)
        f.write(first)
        try:
            began = time.monotonic()
            for data, members, size in source:
                digest.update(data)
                f.write(data)
                count += members
                nbytes += size
                worked = time.monotonic() - began
                if stop is not None and stop.wait(worked * (1 - DUTY) / DUTY):
                    return None
                began = time.monotonic()
        except KeyError:
            return None  # retired meanwhile
        f.write((_encode({"end": count, "bytes": nbytes, "sha256": digest.hexdigest()}) + "\n")
                .encode("ascii"))
        f.flush()
        os.fsync(f.fileno())
    return count, nbytes
