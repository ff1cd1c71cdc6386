"""Rebuilding a lost index from the epochs' members files: the reading side of :mod:`.memberfiles`.

:mod:`.memberfiles` writes each live epoch's members beside the index (its docstring has the
format and who writes the files); this module reads them back when the index is damaged. It is
apart because it runs at another time and in another place: only in :mod:`.reset`, on a fresh index
no other process has opened yet, while the writing side runs at every cut and on the sampler's
keeper thread. The two share only the file format (:data:`.memberfiles.FORMAT`,
:data:`.memberfiles.KEPT_META`, :func:`.memberfiles.present`).

**Chained files** (:mod:`.memberchain`): an epoch whose file names a base gets the base's members
inside its own range (from the base's restored rows when the base epoch was restored just before,
else read from the base's file: a live epoch's, or the ``epoch-<N>.base`` a retirement left, through
its own base when it is chained too) and then its file's own members; a base missing, of another
cut or damaged refuses the epoch whole (its transaction rolled back), as a damaged file does. A
file chained on a segment (:mod:`.membersegments`) takes the ids of its ``base_span`` from the
segment's chain, read link by link down to the links that hold none of them (never opened), at
most :data:`.memberchain.MAX_DEPTH` links; any link it needs missing or damaged refuses it whole.
The rebuild then removes the segments no restored file names and those over ids the new index
hands out again.

**What a rebuild does** (:func:`rebuild`, called by :mod:`.reset` on the fresh index before it
takes the damaged one's place, so no process ever opens the fresh index without its epochs): for
each file, lowest epoch first, in one transaction, every member gets its sample row back with its
old id (the admission order, which eviction follows, is kept) and the epoch its row, its members as
``epoch_samples`` rows and its last read set to now (in use: it stays for the in-use window). An
object file of the recorded size is kept as is: recovery knows it (no orphan), the sampler's
relisting finds its key cached (not fetched), and its digest is kept for the scrub, which checks
its bytes later (a rebuild reads no object: a ``stat`` per member, not a terabyte of md5). A member
whose file is missing or of another size waits for a repair in place (``repairs``: fetched again
under the same name; a wrong-size file is removed first, never served). A member that waited for
its repair, or was lost, when the index was damaged is marked so again from the repairs log
(:mod:`.repairlog`), whatever its file holds: the members files do not say it, and a damaged
file of the recorded size (a flipped byte kept in place for its repair) would otherwise be taken
back as sound and served until a scrub found it again; the log is then rewritten from the
rebuilt table. The next sample id stays
above every restored epoch's ``max_sample``, the running totals (``cache_samples``, ``cache_bytes``)
are recounted (the counters that only grow are :mod:`.countercarry`'s, called by :mod:`.reset`
after this), and the newest
file's rules and identity go back into ``meta`` (the FUSE server reads the rules before the sampler
records them again; the sampler refuses another seed, which made the restored ranks).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from epochfs.sidecar.store import memberchain, memberpending, membersegments, repairlog
from epochfs.sidecar.store.hwm import MAX_EPOCH
from epochfs.sidecar.store.index import Index
from epochfs.sidecar.store.memberfiles import (
    AHEAD,
    FORMATS,
    KEPT_META,
    SUFFIX,
    base_path_of,
    folder,
    path_of,
    present,
)
from epochfs.sidecar.store.objects import OBJECTS_DIR, object_name

log = logging.getLogger("epochfs.store")


@dataclass
class Rebuilt:
    """What :func:`rebuild` restored."""

    epochs: list[int] = field(default_factory=list)
    samples: int = 0
    """Sample rows restored (a sample in two epochs once)."""
    kept: int = 0
    """Of those, the ones whose object file is there with its size: nothing to fetch."""
    repairs: int = 0
    """Members whose object file was missing or short: fetched again in place."""
    remembered: int = 0
    """Members the repairs log (:mod:`.repairlog`) says wait for their repair or are lost:
    marked so again, whatever their file holds."""
    refused: dict[int, str] = field(default_factory=dict)
    """Members files that could not be used, and why (their epochs stay lost)."""


class _Damaged(Exception):
    pass


def _parse(path: Path, n: int | str) -> Iterator[Any]:
    """The header, then each line's list of member rows: _Damaged (raised after the last line,
    so the caller's transaction rolls back) when the last line's count or hash does not match.
    ``n``: the epoch the file must be of, or the segment's name (:mod:`.membersegments`)."""
    digest = hashlib.sha256()
    count = 0
    with open(path, "rb") as f:
        first = f.readline()
        try:
            head = json.loads(first)
        except ValueError as e:
            raise _Damaged(f"bad first line ({e})") from None
        if not isinstance(head, dict) or head.get("epochfs_members") not in FORMATS \
                or head.get("segment" if isinstance(n, str) else "epoch") != n:
            raise _Damaged(f"not the members file of {'segment' if isinstance(n, str) else 'epoch'} {n}")
        ahead = head.get("epochfs_members") == AHEAD  # its first line hashed apart (rewritten at the cut)
        if not ahead:
            digest.update(first)
        yield head
        for number, line in enumerate(f, start=2):
            if line.startswith(b"{"):
                try:
                    end = json.loads(line)
                except ValueError as e:
                    raise _Damaged(f"bad last line ({e})") from None
                if end.get("end") != count or end.get("sha256") != digest.hexdigest() or (
                        ahead and end.get("head_sha256") != hashlib.sha256(first).hexdigest()):
                    raise _Damaged("its count or checksum does not match its lines")
                if f.read(1):
                    raise _Damaged("lines after its last line")
                return
            digest.update(line)
            try:
                rows = json.loads(line)
            except ValueError as e:
                raise _Damaged(f"bad line {number} ({e})") from None
            if not isinstance(rows, list) or any(not isinstance(r, list) or len(r) != 11 for r in rows):
                raise _Damaged(f"bad line {number}")
            count += len(rows)
            yield rows
    raise _Damaged("cut short (no last line)")


def _insert(db: sqlite3.Connection, n: int, rows: list[list[Any]], objects: str, now: float,
            marks: dict[int, repairlog.Mark]) -> tuple[int, int, int]:
    """Restore one line of epoch ``n``'s members: the sample rows not restored yet (by an older
    epoch's file), each with its mark from the repairs log when it has one (same id and object
    name), else with its object file looked at (a repair for a missing or short one), and the
    epoch's ``epoch_samples`` rows. Returns (object files kept, repairs, marks restored).

    A marked sample waiting for its repair keeps its file whatever it holds, as recovery keeps
    it (:func:`.recovery._window`): the damaged bytes the take-out kept in place, until the
    repair renames the right ones over them (never no file where a reader had one). A lost one's
    file goes, if a crash left it: a lost sample is never served."""
    ids = [r[0] for r in rows]
    have: set[int] = set()
    for i in range(0, len(ids), 500):
        part = ids[i:i + 500]
        have.update(int(x[0]) for x in db.execute(
            f"SELECT id FROM samples WHERE id IN ({','.join('?' * len(part))})", part))
    fresh = [r for r in rows if r[0] not in have]
    marked = [(r, m) for r in fresh if (m := marks.get(int(r[0]))) is not None and m.sid == r[1]]
    db.executemany(
        "INSERT OR IGNORE INTO samples(id, sid, key, path, size, checksum, version, admitted_at, digest, "
        "verified, rank) VALUES(?,?,?,?,?,?,?,?,?,?,?)",
        [(r[0], r[1], r[2], r[2] if r[3] is None else r[3], *r[4:]) for r in fresh])
    db.executemany("INSERT OR IGNORE INTO repairs(sample, lost, since) SELECT id, ?, ? FROM samples "
                   "WHERE id=? AND sid=?", [(int(m.lost), m.since, r[0], r[1]) for r, m in marked])
    for r, m in marked:
        if m.lost:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{objects}/{object_name(str(r[1]))}")
    skip = {int(r[0]) for r, _ in marked}
    missing = []
    for r in fresh:
        if int(r[0]) in skip:
            continue
        path = f"{objects}/{object_name(str(r[1]))}"
        try:
            if os.stat(path).st_size == int(r[4]):
                continue
        except FileNotFoundError:
            pass
        else:  # short or long: damaged, never to be served
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        missing.append((now, r[0], r[1]))
    db.executemany("INSERT OR IGNORE INTO repairs(sample, lost, since) SELECT id, 0, ? FROM samples "
                   "WHERE id=? AND sid=?", missing)
    db.executemany("INSERT OR IGNORE INTO epoch_samples(epoch, sample) SELECT ?, id FROM samples "
                   "WHERE id=? AND sid=?", [(n, r[0], r[1]) for r in rows])
    return len(fresh) - len(missing) - len(marked), len(missing), len(marked)


def _span(head: dict[str, Any]) -> tuple[int, int]:
    """The ids a chained file takes from its base (_Damaged: not recorded)."""
    part = memberchain.span(head)
    if part is None:
        raise _Damaged("a chained file without its range")
    return part


def _base_rows(root: Path, n: int | str, ref: Any, lo: int, hi: int, depth: int = 0
               ) -> Iterator[list[list[Any]]]:
    """The members of base ``ref`` (an older epoch's, or a segment) with ids in ``[lo, hi]``,
    read from its file (a live epoch's, the base file a retirement left, or a segment's),
    through its own base when it is chained (none read when no id is asked for); _Damaged when
    no file of that base is there whole (the chain is broken: the epoch whose file named it is
    refused, its transaction rolled back), or the chain is longer than
    :data:`.memberchain.MAX_DEPTH`."""
    if lo > hi:
        return
    if depth >= memberchain.MAX_DEPTH:
        raise _Damaged("a chain of members files longer than any keeper makes")
    b = memberchain.base_of({"base": ref})
    seg = ref.get("segment") if isinstance(ref, dict) else None
    if isinstance(seg, str) and membersegments.name_ok(seg):
        key: int | str = seg
        paths = [folder(root) / f"{seg}{SUFFIX}"]
    elif b is not None and (isinstance(n, str) or b < n):
        key, paths = b, [path_of(root, b), base_path_of(root, b)]
    else:
        raise _Damaged("a chained file naming no older base")
    for path in paths:
        h = memberchain.head(path)
        if h is None or not memberchain.names(h, ref):
            continue
        lines = _parse(path, key)
        head = next(lines)
        if head.get("base") is not None:
            first, top = _span(head)
            yield from _base_rows(root, key, head["base"], max(lo, first), min(hi, top), depth + 1)
        for rows in lines:
            inside = [r for r in rows if isinstance(r[0], int) and lo <= r[0] <= hi]
            if inside:
                yield inside
        return
    raise _Damaged(f"its base, {'segment ' + str(seg) if seg else f'epoch {b}'}'s file, is missing or "
                   "of another cut")


def epoch_rows(root: Path, n: int) -> Iterator[list[list[Any]]]:
    """Epoch ``n``'s member rows as its members file in ``root`` gives them, a line at a time: a
    chained file's base members first (read through its chain as :func:`rebuild` reads it, never
    from an index), then its own; :class:`Damaged` after the last line when the file or a file of
    its chain fails its check, OSError when the file is missing. Only a reader that keeps every
    row until the end may use them (:mod:`.memberview`): a damaged file is refused whole."""
    lines = _parse(path_of(root, n), n)
    head = next(lines)
    if head.get("base") is not None:
        lo, hi = _span(head)
        yield from _base_rows(root, n, head["base"], lo, hi)
    yield from lines


Damaged = _Damaged
"""A members file, or a file of its chain, failed its check (:func:`epoch_rows`)."""


def _restore(ix: Index, n: int, path: Path, objects: str, now: float,
             marks: dict[int, repairlog.Mark], restored: dict[int, dict[str, Any]]
             ) -> tuple[int, int, int, dict[str, str]]:
    """Restore epoch ``n`` from its members file in one write transaction (rolled back whole
    when the file, or for a chained file a file of its chain, turns out damaged or missing);
    returns (object files kept, repairs, marks restored, the meta values it recorded).
    ``restored``: the epochs restored so far (number -> the reference a chained file records):
    a chained file's base restored already gives its members from the fresh index, not its file."""
    kept = repairs = remembered = 0
    root = Path(objects).parent
    with ix.write() as db:
        lines = _parse(path, n)
        head = next(lines)
        base = head.get("base")
        parts: Iterator[list[list[Any]]] = lines
        if base is not None:
            lo, hi = _span(head)
            b = memberchain.base_of(head)
            if b is not None and b < n and "segment" not in base \
                    and memberchain.names(restored.get(b, {}), base):
                db.execute("INSERT INTO epoch_samples(epoch, sample) SELECT ?, sample FROM epoch_samples "
                           "WHERE epoch=? AND sample BETWEEN ? AND ?", (n, b, lo, hi))
            else:
                parts = itertools.chain(_base_rows(root, n, base, lo, hi), lines)
        for rows in parts:
            k, r, m = _insert(db, n, rows, objects, now, marks)
            kept, repairs, remembered = kept + k, repairs + r, remembered + m
        count, nbytes = db.execute("SELECT COUNT(*), COALESCE(SUM(s.size), 0) FROM epoch_samples e "
                                   "JOIN samples s ON s.id = e.sample WHERE e.epoch=?", (n,)).fetchone()
        if base is not None and (int(count), int(nbytes)) != (head.get("samples"), head.get("bytes")):
            # The row's counts come from the running totals at the cut (:mod:`.snapshot`): a
            # drift there, as for a whole file (:func:`.memberformat.fill`), not a wrong chain.
            log.warning("epoch %d: its chain gives %d members (%d bytes), its row said %s (%s bytes)",
                        n, count, nbytes, head.get("samples"), head.get("bytes"))
        db.execute(
            "INSERT INTO epochs(n, cut_at, samples, bytes, new, evicted, max_sample, last_read, listed, "
            "estimated) VALUES(?,?,?,?,?,?,?,?,?,?)",
            (n, float(head["cut_at"]), int(count), int(nbytes), int(head["new"]), int(head["evicted"]),
             int(head["max_sample"]), now, head.get("listed"), head.get("estimated")))
    meta = head.get("meta")
    kept_meta = {str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else {}
    return kept, repairs, remembered, kept_meta


def rebuild(ix: Index, root: Path) -> Rebuilt:
    """Restore into the fresh index ``ix`` (nothing else uses it yet) every epoch that has a
    members file in ``root``, with its samples (see the module's docstring). A file that is
    damaged is refused whole (logged); its epoch stays lost, and the high-water mark keeps its
    number from being cut again."""
    done = Rebuilt()
    objects = f"{root / OBJECTS_DIR}"
    now = time.time()
    meta: dict[str, str] = {}
    marks = repairlog.load(root)
    restored: dict[int, dict[str, Any]] = {}
    for n, path in sorted(present(root).items()):
        if n > MAX_EPOCH:
            continue
        try:
            kept, repairs, remembered, meta = _restore(ix, n, path, objects, now, marks, restored)
        except (_Damaged, OSError, ValueError, KeyError, TypeError, sqlite3.IntegrityError) as e:
            done.refused[n] = str(e) or type(e).__name__
            log.error("epoch %d cannot be restored from %s: %s; it stays lost", n, path, done.refused[n])
            continue
        done.epochs.append(n)
        restored[n] = memberchain.head(path) or {}
        done.kept += kept
        done.repairs += repairs
        done.remembered += remembered
    known = {m.value: m for m in KEPT_META}
    with ix.write() as db:
        for name, value in meta.items():  # the newest restored epoch's
            if name in known:
                ix.put(known[name], value)
        count, total = db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM samples").fetchone()
        ix.set_counter("cache_samples", int(count))
        ix.set_counter("cache_bytes", int(total))
        # New samples get ids above every restored epoch's max_sample (eviction never takes a
        # sample above the newest cut's, and ids tell what a cut saw).
        top = int(db.execute("SELECT COALESCE(MAX(max_sample), 0) FROM epochs").fetchone()[0])
        seq = db.execute("SELECT seq FROM sqlite_sequence WHERE name='samples'").fetchone()
        if seq is None:
            db.execute("INSERT INTO sqlite_sequence(name, seq) VALUES('samples', ?)", (top,))
        elif int(seq[0]) < top:
            db.execute("UPDATE sqlite_sequence SET seq=? WHERE name='samples'", (top,))
        done.samples = int(count)
        # The log now says what this index holds: older marks (samples not restored, ids that
        # will be handed out again) never meet a later rebuild.
        try:
            repairlog.rewrite(db, root)
        except OSError as e:  # a full volume: the restored epochs matter more than the log
            log.warning("could not rewrite the repairs log %s (%s)", repairlog.path_of(root), e)
    # The new index hands out again the ids above its newest restored epoch: no segment of the old
    # one above it may ever be checked against it, nor one no restored epoch's file names
    # (:mod:`.membersegments`).
    membersegments.tidy(root, None, active=False)
    membersegments.clear(root, above=top)
    memberpending.clear(root)  # written against the old index's ids and totals
    if done.remembered:
        log.warning("%d restored sample(s) wait for their repair or are lost, as before the index "
                    "was damaged (%s): marked so again", done.remembered, repairlog.path_of(root))
    return done
