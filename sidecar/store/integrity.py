"""Integrity of what the cache holds: object files against their recorded digest, and taking a
damaged one out.

The scrub (``epochfs verify``, and the sampler's background scrub) reads each object file and
compares its size and digest with what admission recorded (``samples.digest``), in the algorithm
the digest names (:mod:`.digests`: the CRC64NVME, CRC32C, CRC32 or SHA the download was verified
with, or md5; a bare hex digest of an older index is an md5), so that a body is never hashed in a
second algorithm just for the scrub. Start-up recovery
checks sizes only (it must be quick); a flipped byte is found here. A damaged sample is marked for
repair in place (:func:`take_out`), as recovery marks a lost one: its row stays, so every epoch
that lists it keeps listing it, ``corrupt_objects_total`` counts it, and the sampler fetches the
key again into the same sample (:func:`repair`). Its object file stays where it is until the
repair's download is renamed over it (one ``os.replace``): an entry that links to it always finds
a file, the old bytes until the repair lands and the right ones after, never ENOENT
(``epochfs verify`` keeps its quarantined copy as a second link). Only a sample that cannot be
repaired (lost) has its file removed, after the commit that marks it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from epochfs.sidecar.store import digests, journal, repairlog
from epochfs.sidecar.store.catalog import REPAIRABLE
from epochfs.sidecar.store.digests import BLOCK
from epochfs.sidecar.store.index import Index
from epochfs.sidecar.store.objects import ObjectFiles, object_name
from epochfs.sidecar.store.records import Admission, Candidate, FileEntry, StoredObject, TakenOut

QUARANTINE_DIR = "quarantine"
QUARANTINE_LOG = "quarantine.log"

Pace = Callable[[int], bool]
"""Charged the bytes each read takes, before it; False stops the check (rate limit, stop flag)."""
MIN_CHARGE = 4096
"""The least a check charges: a disk reads a block for any file, however small (or empty)."""

log = logging.getLogger("epochfs.store")


class Stopped(Exception):
    """The pace callback asked the check to stop."""


def objects_after(ix: Index, after_id: int, limit: int) -> list[StoredObject]:
    """Samples in admission order after ``after_id``: the scrub walks the cache in batches."""
    rows = ix.query(
        "SELECT id, sid, key, size, digest, verified FROM samples WHERE id > ? "
        "AND id NOT IN (SELECT sample FROM repairs) ORDER BY id LIMIT ?",
        (after_id, limit),
    )
    return [StoredObject(int(a), str(b), str(c), int(d), str(e), str(f)) for a, b, c, d, e, f in rows]


def check(path: Path, obj: StoredObject, *, pace: Pace | None = None,
          buffer: memoryview | None = None) -> str | None:
    """What is wrong with ``obj``'s file at ``path`` (None: nothing): missing, a size other than
    the recorded one, or a digest other than the recorded one (in the algorithm it names). A
    sample without a digest (an index from before digests were recorded), or with one in an
    algorithm that cannot be computed here (awscrt missing), has only its size checked. Raises
    :class:`Stopped`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return "missing"
    try:
        size = os.fstat(fd).st_size
        try:
            reference = digests.hasher(obj.digest) if size == obj.size else None
        except ValueError:
            reference = None
        if reference is None:  # nothing to read; the open and fstat still cost the least
            if pace is not None and not pace(MIN_CHARGE):
                raise Stopped()
            return None if size == obj.size else f"size {size}, recorded {obj.size}"
        h, algorithm, expected = reference
        total = _hash(fd, size, h, pace, buffer if buffer is not None else memoryview(bytearray(BLOCK)))
    finally:
        os.close(fd)
    if total != obj.size:
        return f"read {total} bytes, recorded {obj.size}"
    got = digests.value(algorithm, h)
    if got != expected:
        return f"{algorithm} {got}, recorded {expected}"
    return None


def _hash(fd: int, size: int, h: digests.Hasher, pace: Pace | None, buf: memoryview) -> int:
    """Hash the ``size`` bytes of ``fd`` into ``h``; the bytes read (fewer: the file was cut short).
    ``pace`` is charged each read's bytes, at least :data:`MIN_CHARGE`, not the buffer's (an 8 KiB
    object would cost 128 times its size of ``--scrub-rate``); no read just to find the end."""
    total = 0
    while True:
        want = min(len(buf), size - total)
        if pace is not None and not pace(want if total else max(want, MIN_CHARGE)):
            raise Stopped()
        n = os.readv(fd, [buf[:want]]) if want else 0
        h.update(buf[:n])
        total += n
        if not n or total == size:
            return total


def take_out(ix: Index, files: ObjectFiles, damaged: list[tuple[StoredObject, str]], *,
             quarantine: bool, corrupt: bool = True) -> list[TakenOut]:
    """Mark the damaged samples for repair in place and count them; the sampler fetches each
    again into the same sample (:func:`repairs_due`, :meth:`.Store.admit`). The samples row
    stays: every epoch that lists the sample keeps listing it, under the same name and inode
    number. Its object file stays too, until the repair renames the right bytes over it
    (:meth:`.ObjectFiles.install`): removing it here would make every entry that links to it
    answer ENOENT for the whole download; ``quarantine`` links a copy into ``quarantine/``
    instead of moving it. A sample whose key the catalog no longer lists (or lists skipped for
    another reason than a file/folder name clash: a clash-skipped key is still on the remote,
    :data:`.catalog.SKIPPED_CLASH`) cannot be fetched again: it is marked lost and its file moved
    to ``quarantine/`` or removed (:func:`_drop`).
    Dropping the row and fetching the key as a new sample would put it outside every live epoch:
    the epoch being read would shrink under its reader. A sample no longer in the index
    (evicted while it was checked) is left alone: its file is not the cache's any more.

    A file that goes is named in the recovery journal in the same transaction (:mod:`.journal`):
    the row stays, so no trigger journals it, and a crash between the commit and the unlink
    left the damaged file of a lost sample in place for good, served to readers and never
    checked again; the next start removes it. A file kept for its repair needs no name there:
    recovery keeps the file of a sample waiting for its repair (the repair replaces it).

    Two finders can hold the same damage (the scrub and ``epochfs verify`` each read a batch,
    then check it): a sample already waiting for its repair was taken out by the other, so it is
    left alone, counted once; and its repair may be landing (the file installed before the
    ``repairs`` row goes), which a second take-out would have removed again. A finding of a
    missing file that is back by now is stale the same way (the repair landed): left alone."""
    held: dict[int, Path | int] = {}  # verify's copies: a second link, or an open file to copy
    try:
        return _take_out(ix, files, damaged, quarantine=quarantine, corrupt=corrupt, held=held)
    finally:
        for aside in held.values():  # not handed on (the transaction failed): they go
            if isinstance(aside, Path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(aside)
            else:
                os.close(aside)


def _take_out(ix: Index, files: ObjectFiles, damaged: list[tuple[StoredObject, str]], *,
              quarantine: bool, corrupt: bool, held: dict[int, Path | int]) -> list[TakenOut]:
    taken: list[tuple[StoredObject, str, Candidate | None]] = []
    now_lost: list[tuple[StoredObject, str]] = []  # waiting for a repair, now lost: the kept file goes
    now = time.time()
    root = files.objects_dir.parent
    with ix.write() as db:
        journaled = journal.exists(db)
        for obj, problem in damaged:
            if db.execute("SELECT 1 FROM samples WHERE id=? AND sid=?", (obj.id, obj.sid)).fetchone() is None:
                continue
            if db.execute("SELECT 1 FROM repairs WHERE sample=?", (obj.id,)).fetchone() is not None:
                # Another finder took it out: counted once, its repair not undone; only lost if
                # its key has left the catalog since (nothing would fetch it again).
                listed = db.execute(f"SELECT 1 FROM catalog WHERE key=? AND {REPAIRABLE}",
                                    (obj.key,)).fetchone()
                if listed is None and db.execute("UPDATE repairs SET lost=1 WHERE sample=? AND lost=0",
                                                 (obj.id,)).rowcount:
                    now_lost.append((obj, problem))
                continue
            if problem == "missing" and files.path_of(obj.sid).exists():
                continue  # repaired since it was found missing
            if corrupt:  # damaged bytes; a file missing at start-up is not (corrupt=False)
                ix.bump("corrupt_objects_total", 1)
            row = db.execute(f"SELECT key, sid, size, version FROM catalog WHERE key=? AND {REPAIRABLE}",
                             (obj.key,)).fetchone()
            cand = None if row is None else Candidate(str(row[0]), str(row[1]), int(row[2]), str(row[3]))
            if journaled and cand is None:
                journal.add(db, [obj.sid])
            db.execute("INSERT INTO repairs(sample, lost, since) VALUES(?,?,?) ON CONFLICT(sample) "
                       "DO UPDATE SET lost=excluded.lost", (obj.id, int(cand is None), now))
            taken.append((obj, problem, cand))
            if cand is not None and quarantine and problem != "missing":
                # Verify's copy is taken before the commit: no repair lands on a sample before
                # its repairs row is committed, so this sees the damaged file. After the commit
                # a running sampler's repair could rename the right bytes over it first, and the
                # quarantine got the good file, logged as damaged.
                aside = _hold(files, obj)
                if aside is not None:
                    held[obj.id] = aside
        if journaled:
            journal.add(db, [obj.sid for obj, _ in now_lost])
        repairlog.note(db, root, [(obj.id, obj.sid, repairlog.WAITING if cand is not None else repairlog.LOST,
                                   now) for obj, _, cand in taken]
                       + [(obj.id, obj.sid, repairlog.LOST, now) for obj, _ in now_lost])
    out = [TakenOut(obj.key, obj.sid, obj.size, problem, _drop(files, obj, problem, quarantine=quarantine),
                    None) for obj, problem in now_lost]
    failed: list[tuple[str, str]] = []  # (key, why) of the copies that failed
    for obj, problem, cand in taken:
        if cand is None:
            moved = _drop(files, obj, problem, quarantine=quarantine)
        elif obj.id in held:  # kept for its repair; verify keeps a copy
            moved = _quarantine(files, obj, problem, keep=held.pop(obj.id), failed=failed)
        else:
            moved = None
        out.append(TakenOut(obj.key, obj.sid, obj.size, problem, moved, cand))
    if failed:
        log.warning("no copy kept in %s/ of %d damaged object file(s) (hard links refused, and the "
                    "copy failed: %s): %s", QUARANTINE_DIR, len(failed), failed[0][1],
                    ", ".join(repr(k) for k, _ in failed[:5]))
    return out


def _drop(files: ObjectFiles, obj: StoredObject, problem: str, *, quarantine: bool) -> Path | None:
    """The file of a sample marked lost goes: moved to ``quarantine/`` or removed (also after a
    move: a rename onto another link of the same file, verify's earlier copy, does nothing)."""
    moved = _quarantine(files, obj, problem, keep=None) if quarantine else None
    files.remove([obj.sid])
    return moved


def repair(ix: Index, files: ObjectFiles, fixes: list[tuple[Admission, int, int, str, str]]) -> None:
    """Repairs in place: each download of a sample waiting for its repair (the samples row
    ``id`` with its recorded ``size``, ``digest`` and ``version``) becomes its object file
    again when it holds the same bytes, renamed over the damaged file the take-out kept (one
    ``os.replace``: a reader opens the old file or the new one, never no file), and the
    sample is whole; every epoch listing it is unchanged (same row, same name). Other bytes
    (the remote's object changed since) cannot stand for the sample in the epochs cut with the
    old ones: the download is dropped, the sample marked lost and its kept file removed after
    that commit (its entry stays; a read of it fails until it is evicted). The samples' bytes
    were counted when they were first admitted: no running total moves."""
    good: list[tuple[Admission, int]] = []
    bad: list[tuple[Admission, int]] = []
    for a, i, size, digest, version in fixes:
        (good if _same_bytes(a, size, digest, version) else bad).append((a, i))
    for a, _ in bad:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(a.temp)
        log.warning("cannot repair %r: the remote's object is not the bytes the epochs hold (its "
                    "version or digest changed): marked lost; its entries stay, a read of one fails "
                    "(EIO)", a.key)
    installed = {a.sid for a in files.install([a for a, _ in good])} if good else set()
    good = [(a, i) for a, i in good if a.sid in installed]  # a temp found replaced: still due
    with ix.write() as db:
        journaled = journal.exists(db)
        for _, i in good:
            db.execute("DELETE FROM repairs WHERE sample=?", (i,))
        for _, i in bad:
            db.execute("UPDATE repairs SET lost=1 WHERE sample=?", (i,))
        if journaled:  # the installs are whole now; a lost one's kept file goes below
            journal.forget(db, [a.sid for a, _ in good])
            journal.add(db, [a.sid for a, _ in bad])
        now = time.time()
        repairlog.note(db, files.objects_dir.parent,
                       [(i, a.sid, repairlog.REPAIRED, now) for a, i in good]
                       + [(i, a.sid, repairlog.LOST, now) for a, i in bad])
        ix.bump("repaired_total", len(good))
        ix.bump("fetched_total", len(good))
        ix.bump("fetched_bytes_total", sum(a.size for a, _ in good))
    files.remove([a.sid for a, _ in bad])
    if good:
        log.info("repaired %d sample(s) in place: %s", len(good),
                 ", ".join(repr(a.key) for a, _ in good[:5]))


def _same_bytes(a: Admission, size: int, digest: str, version: str) -> bool:
    """Whether download ``a`` holds the bytes a sample of ``size``, ``digest`` and ``version``
    held: the same digest where both are in one algorithm, else the same version and size."""
    if a.size != size:
        return False
    mine, theirs = digests.parse(a.local_digest), digests.parse(digest)
    if mine is not None and theirs is not None and mine[0] == theirs[0]:
        return mine[1] == theirs[1]
    return a.version == version


def lose_unfetchable(ix: Index, files: ObjectFiles) -> list[str]:
    """Mark lost every sample waiting for a repair whose key the catalog no longer offers (its
    download failed for good and the key was skipped, or a relist dropped it: gone from the
    remote; a key a relist skipped as a file/folder name clash is still listed, and repaired), and
    remove the damaged files they kept; returns their keys. Without this they waited for ever:
    :func:`repairs_due` offers only keys the catalog still fetches, every finder passes over
    samples in ``repairs``, and the damaged bytes the take-out kept in place were served with no
    error until evicted. The files are named in the recovery journal in the same transaction."""
    with ix.write() as db:
        rows = db.execute(
            "SELECT s.id, s.sid, s.key FROM repairs r JOIN samples s ON s.id = r.sample WHERE r.lost = 0 "
            f"AND NOT EXISTS (SELECT 1 FROM catalog c WHERE c.key = s.key AND c.{REPAIRABLE})").fetchall()
        if not rows:
            return []
        db.executemany("UPDATE repairs SET lost=1 WHERE sample=?", [(int(r[0]),) for r in rows])
        if journal.exists(db):
            journal.add(db, [str(r[1]) for r in rows])
        now = time.time()
        repairlog.note(db, files.objects_dir.parent,
                       [(int(r[0]), str(r[1]), repairlog.LOST, now) for r in rows])
    files.remove([str(r[1]) for r in rows])
    keys = [str(r[2]) for r in rows]
    log.warning("%d sample(s) waiting for a repair can no longer be fetched (their keys were skipped "
                "or are gone from the remote): marked lost, their damaged files removed; their entries "
                "stay, a read of one fails (EIO): %s", len(keys), ", ".join(repr(k) for k in keys[:5]))
    return keys


def repairs_due(ix: Index, *, limit: int) -> list[Candidate]:
    """Samples waiting for a repair whose key the catalog still lists, as the candidates to
    fetch again (the catalog's size and version: a download of other bytes is refused at
    admission and the sample marked lost)."""
    rows = ix.query("SELECT c.key, c.sid, c.size, c.version FROM repairs r JOIN samples s ON s.id = r.sample "
                    f"JOIN catalog c ON c.key = s.key AND c.{REPAIRABLE} WHERE r.lost = 0 ORDER BY r.sample "
                    "LIMIT ?", (limit,))
    return [Candidate(str(a), str(b), int(c), str(d)) for a, b, c, d in rows]


def awaits_repair(ix: Index, key: str) -> bool:
    """Whether a sample of ``key`` waits for its repair in place (and is not lost)."""
    return bool(ix.query("SELECT 1 FROM repairs r JOIN samples s ON s.id = r.sample WHERE r.lost = 0 "
                         "AND s.key = ? LIMIT 1", (key,)))


LostDigest = tuple[int, int, int, int]
"""(count, sum, min, max) of the ids of the samples marked lost: what changes when that set does."""


def lost(ix: Index, *, unless: LostDigest | None = None) -> tuple[LostDigest, list[FileEntry] | None]:
    """The samples marked lost (the remote no longer has their bytes: they cannot be repaired),
    as (digest, entries by key: path = key, size, object name; checksum empty), in one read.

    The FUSE view asks twice a second whether the set changed, so the rows are read only when
    the digest differs from ``unless`` (None then): the digest is a scan of ``repairs`` (the
    samples waiting, a handful), the rows a join with ``samples``."""
    with ix.read() as db:
        row = db.execute("SELECT COUNT(*), COALESCE(SUM(sample), 0), COALESCE(MIN(sample), 0), "
                         "COALESCE(MAX(sample), 0) FROM repairs WHERE lost = 1").fetchone()
        digest: LostDigest = (int(row[0]), int(row[1]), int(row[2]), int(row[3]))
        if digest == unless:
            return digest, None
        rows = db.execute("SELECT s.key, s.size, s.sid FROM repairs r JOIN samples s ON s.id = r.sample "
                          "WHERE r.lost = 1 ORDER BY s.key").fetchall()
    return digest, [FileEntry(str(k), int(size), "", object_name(str(sid))) for k, size, sid in rows]


def _hold(files: ObjectFiles, obj: StoredObject) -> Path | int | None:
    """A second link to ``obj``'s damaged file at a temp name in ``quarantine/`` (cheap: taken
    in the take-out's write transaction), or where links are refused the file opened, to copy
    after the commit (the open file is the damaged one even if the repair lands first); None
    when the file is already gone."""
    folder = files.objects_dir.parent / QUARANTINE_DIR
    folder.mkdir(exist_ok=True)
    temp = folder / f".{obj.sid}.{os.getpid()}.tmp"
    source = files.path_of(obj.sid)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)
    try:
        os.link(source, temp)
        return temp
    except FileNotFoundError:
        return None
    except OSError:
        pass  # a volume without hard links
    try:
        return os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


def _quarantine(files: ObjectFiles, obj: StoredObject, problem: str, *, keep: Path | int | None,
                failed: list[tuple[str, str]] | None = None) -> Path | None:
    """Put the object file at ``<cache>/quarantine/<sid>`` and note why in ``quarantine.log``
    (one JSON line each); None when the file is already gone. ``keep`` (from :func:`_hold`):
    the object file stays where it is for its repair (the repair renames over it), so the
    quarantine gets the second link to it taken before the commit, or a copy of the open file
    where links are refused; a copy that fails (ENOSPC) is removed and its key added to
    ``failed``: no copy, and the take-out's report goes on. None: the file is moved."""
    folder = files.objects_dir.parent / QUARANTINE_DIR
    folder.mkdir(exist_ok=True)
    target = folder / obj.sid
    try:
        if isinstance(keep, Path):
            os.replace(keep, target)
        elif keep is not None:
            temp = folder / f".{obj.sid}.{os.getpid()}.tmp"
            try:
                with os.fdopen(keep, "rb") as src, open(temp, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            except OSError as e:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
                if failed is not None:
                    failed.append((obj.key, str(e.strerror or e)))
                return None
            os.replace(temp, target)
        else:
            os.replace(files.path_of(obj.sid), target)
    except FileNotFoundError:
        return None
    note = {"time": time.time(), "key": obj.key, "sid": obj.sid, "size": obj.size, "problem": problem}
    with contextlib.suppress(OSError), open(folder / QUARANTINE_LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(note) + "\n")
    return target
