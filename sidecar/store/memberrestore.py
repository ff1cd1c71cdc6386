"""Rebuilding a lost index from the epochs' members files: the reading side of :mod:`.memberfiles`.

:mod:`.memberfiles` writes each live epoch's members beside the index (its docstring has the
format and who writes the files); this module reads them back when the index is damaged. It is
apart because it runs at another time and in another place: only in :mod:`.reset`, on a fresh index
no other process has opened yet, while the writing side runs at every cut and on the sampler's
keeper thread. The two share only the file format (:data:`.memberfiles.FORMAT`,
:data:`.memberfiles.KEPT_META`, :func:`.memberfiles.present`).

**What a rebuild does** (:func:`rebuild`, called by :mod:`.reset` on the fresh index before it
takes the damaged one's place, so no process ever opens the fresh index without its epochs): for
each file, lowest epoch first, in one transaction, every member gets its sample row back with its
old id (the admission order, which eviction follows, is kept) and the epoch its row, its members as
``epoch_samples`` rows and its last read set to now (in use: it stays for the in-use window). An
object file of the recorded size is kept as is: recovery knows it (no orphan), the sampler's
relisting finds its key cached (not fetched), and its digest is kept for the scrub, which checks
its bytes later (a rebuild reads no object: a ``stat`` per member, not a terabyte of md5). A member
whose file is missing or of another size waits for a repair in place (``repairs``: fetched again
under the same name; a wrong-size file is removed first, never served). The next sample id stays
above every restored epoch's ``max_sample``, the running totals are recounted, and the newest
file's rules and identity go back into ``meta`` (the FUSE server reads the rules before the sampler
records them again; the sampler refuses another seed, which made the restored ranks).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from epochfs.sidecar.store.hwm import MAX_EPOCH
from epochfs.sidecar.store.index import Index
from epochfs.sidecar.store.memberfiles import FORMAT, KEPT_META, present
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
    refused: dict[int, str] = field(default_factory=dict)
    """Members files that could not be used, and why (their epochs stay lost)."""


class _Damaged(Exception):
    pass


def _parse(path: Path, n: int) -> Iterator[Any]:
    """The header, then each line's list of member rows: _Damaged (raised after the last line,
    so the caller's transaction rolls back) when the last line's count or hash does not match."""
    digest = hashlib.sha256()
    count = 0
    with open(path, "rb") as f:
        first = f.readline()
        digest.update(first)
        try:
            head = json.loads(first)
        except ValueError as e:
            raise _Damaged(f"bad first line ({e})") from None
        if not isinstance(head, dict) or head.get("epochfs_members") != FORMAT or head.get("epoch") != n:
            raise _Damaged("not the members file of this epoch")
        yield head
        for number, line in enumerate(f, start=2):
            if line.startswith(b"{"):
                try:
                    end = json.loads(line)
                except ValueError as e:
                    raise _Damaged(f"bad last line ({e})") from None
                if end.get("end") != count or end.get("sha256") != digest.hexdigest():
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


def _insert(db: sqlite3.Connection, n: int, rows: list[list[Any]], objects: str,
            now: float) -> tuple[int, int]:
    """Restore one line of epoch ``n``'s members: the sample rows not restored yet (by an older
    epoch's file) with their object files looked at, a repair for each missing or short one,
    and the epoch's ``epoch_samples`` rows. Returns (object files kept, repairs)."""
    ids = [r[0] for r in rows]
    have: set[int] = set()
    for i in range(0, len(ids), 500):
        part = ids[i:i + 500]
        have.update(int(x[0]) for x in db.execute(
            f"SELECT id FROM samples WHERE id IN ({','.join('?' * len(part))})", part))
    fresh = [r for r in rows if r[0] not in have]
    db.executemany(
        "INSERT OR IGNORE INTO samples(id, sid, key, path, size, checksum, version, admitted_at, digest, "
        "verified, rank) VALUES(?,?,?,?,?,?,?,?,?,?,?)",
        [(r[0], r[1], r[2], r[2] if r[3] is None else r[3], *r[4:]) for r in fresh])
    missing = []
    for r in fresh:
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
    return len(fresh) - len(missing), len(missing)


def _restore(ix: Index, n: int, path: Path, objects: str, now: float) -> tuple[int, int, dict[str, str]]:
    """Restore epoch ``n`` from its members file in one write transaction (rolled back whole
    when the file turns out damaged); returns (object files kept, repairs, the meta values it
    recorded)."""
    kept = repairs = 0
    with ix.write() as db:
        lines = _parse(path, n)
        head = next(lines)
        for rows in lines:
            k, r = _insert(db, n, rows, objects, now)
            kept, repairs = kept + k, repairs + r
        count, nbytes = db.execute("SELECT COUNT(*), COALESCE(SUM(s.size), 0) FROM epoch_samples e "
                                   "JOIN samples s ON s.id = e.sample WHERE e.epoch=?", (n,)).fetchone()
        db.execute(
            "INSERT INTO epochs(n, cut_at, samples, bytes, new, evicted, max_sample, last_read, listed, "
            "estimated) VALUES(?,?,?,?,?,?,?,?,?,?)",
            (n, float(head["cut_at"]), int(count), int(nbytes), int(head["new"]), int(head["evicted"]),
             int(head["max_sample"]), now, head.get("listed"), head.get("estimated")))
    meta = head.get("meta")
    return kept, repairs, {str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else {}


def rebuild(ix: Index, root: Path) -> Rebuilt:
    """Restore into the fresh index ``ix`` (nothing else uses it yet) every epoch that has a
    members file in ``root``, with its samples (see the module's docstring). A file that is
    damaged is refused whole (logged); its epoch stays lost, and the high-water mark keeps its
    number from being cut again."""
    done = Rebuilt()
    objects = f"{root / OBJECTS_DIR}"
    now = time.time()
    meta: dict[str, str] = {}
    for n, path in sorted(present(root).items()):
        if n > MAX_EPOCH:
            continue
        try:
            kept, repairs, meta = _restore(ix, n, path, objects, now)
        except (_Damaged, OSError, ValueError, KeyError, TypeError, sqlite3.IntegrityError) as e:
            done.refused[n] = str(e) or type(e).__name__
            log.error("epoch %d cannot be restored from %s: %s; it stays lost", n, path, done.refused[n])
            continue
        done.epochs.append(n)
        done.kept += kept
        done.repairs += repairs
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
    return done
