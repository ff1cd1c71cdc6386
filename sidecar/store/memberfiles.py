"""Each live epoch's members, kept outside the index: what a damaged index is rebuilt from.

A damaged ``index.sqlite`` is replaced (:mod:`.reset`), and before this module the fresh index knew
nothing: every published epoch vanished (a reader inside one got ENOENT for every file), start-up
recovery removed every object file as an orphan and the sampler fetched the whole cache again. The
objects were fine all along; what was lost was which samples each epoch holds. So that is written
down beside the index, one file per live epoch::

    <cache>/epochs/epoch-<N>.members

A first JSON line for the epoch (its ``epochs`` row: cut time, counts, ``max_sample``, what the
listing knew; and the cache's rules and identity from ``meta``, :data:`KEPT_META`), then lines of
members, each a JSON array of up to :data:`CHUNK` member rows (:data:`_COLUMNS`: id, sid, key, path
(null: the key), size, manifest checksum, version, admission time, digest, what verified it, rank),
and a last line with the number of members, their bytes and the SHA-256 of every line before it: a
file damaged on the volume is refused whole, never half used. Written to a temp name, fsynced,
renamed, its folder fsynced.

A snapshot epoch's file may be *chained* (:data:`CHAINED`, :mod:`.memberchain`): its first line
names an older live epoch's file as its base and its lines list only the members outside the
base's range, which is what lets a cut write the file of an epoch of any size.

**Who writes them.** The cut itself, for an epoch of up to :data:`AT_CUT` members, or a chained
file of up to :data:`AT_CUT` members of its own (:func:`at_cut`,
called by :func:`.epochs._cut` in every process that cuts: the sampler's timer and queued cuts, the
FUSE server's cut on lookup, ``/v1/cut``, ``epochfs cut``): inside its write transaction, after the
epoch's rows and before the commit, so the file is in place before any reader can see the epoch, and
an index damaged right after the cut is rebuilt with it. A commit that then fails removes the file.
A larger epoch (its file costs 0.2 s per 50,000 members under the index's write lock, which the FUSE
server's lookups and every admission wait on; 8.9 s at 1M) and one whose file could not be written
(a full volume: the cut stands) get theirs from the :class:`Keeper`, a thread of the sampler (the
one writer of the cache): every :data:`EVERY` seconds it looks for live epochs without a file (one
small query and a listing of ``epochs/``) and writes them, paced to :data:`DUTY` of a core. Its file
goes into place under the write lock after a last look that its epoch is still live, and a
retirement takes a file out before its commit (:func:`.epochs.retire`, :func:`remove`: renamed to
``epoch-<N>.base``, read only through a live chained file that names it), so an epoch's file never
outlives its epoch (a retired epoch's objects may be evicted at once). The keeper rewrites whole a
chained file whose base is no longer a live epoch's file, then removes the base files no file
names (:func:`unchained`, :func:`tidy`); otherwise a file is never rewritten: the epoch cannot
change while it is live.

**Who reads them.** :mod:`.memberrestore` (:func:`.memberrestore.rebuild`, called by :mod:`.reset`),
which restores each file's epoch into a fresh index when the old one is damaged; the format above
is the contract between the two modules (:data:`FORMAT`, :data:`KEPT_META`, :func:`present`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from epochfs.sidecar.store import memberchain
from epochfs.sidecar.store.index import Index, Meta
from epochfs.sidecar.store.objects import fsync_dir
from epochfs.sidecar.store.windows import IN_WINDOW

log = logging.getLogger("epochfs.store")

MEMBERS_DIR = "epochs"
SUFFIX = ".members"
BASE_SUFFIX = ".base"
"""A retired epoch's file kept only as the base of a live epoch's chained file (never restored
as an epoch): :func:`remove`."""
PREFIX = "epoch-"
FORMAT = 1
"""A whole file: every member of its epoch."""
CHAINED = 2
"""A chained file: its epoch's members admitted outside its base's range, and its base (an older
epoch's file) for the rest; an epochfs that reads only :data:`FORMAT` refuses it whole."""
FORMATS = (FORMAT, CHAINED)
EVERY = 1.0
"""Seconds between two looks of the :class:`Keeper` for live epochs without their file."""
CHUNK = 20_000
"""Members read per read transaction while a file is written (never the whole epoch at once)."""
DUTY = 0.5
"""Share of one core the :class:`Keeper` may use while it writes a file (it rests between chunks):
a 1M-member file took 6-8 s of CPU (13 s paced) on the 2-core test machine."""

_COLUMNS = ("s.id, s.sid, s.key, CASE WHEN s.path = s.key THEN NULL ELSE s.path END, s.size, s.checksum, "
            "s.version, s.admitted_at, s.digest, s.verified, s.rank")
"""A member's fields, in the order of its array in the file (the path is null when it is the key,
as it is since schema 1: not a second copy of every key)."""
_BY_ID = {
    "range": (f"SELECT {_COLUMNS} FROM samples s WHERE s.id > ? AND s.id BETWEEN ? AND ? "
              "ORDER BY s.id LIMIT ?"),
    "rows": (f"SELECT {_COLUMNS} FROM epoch_samples e JOIN samples s ON s.id = e.sample "
             "WHERE e.epoch = ? AND e.sample > ? ORDER BY e.sample LIMIT ?"),
}
_WINDOW = (f"SELECT {_COLUMNS} FROM samples s, epochs e WHERE e.n = ? AND s.key > ? AND "
           f"{IN_WINDOW.replace('(s.rank, s.key) ', '(+s.rank, s.key) ')} ORDER BY s.key LIMIT ?")
KEPT_META = (Meta.CAPACITY, Meta.KEEP_EPOCHS, Meta.MIN_SAMPLES, Meta.HEADROOM, Meta.IN_USE_SECONDS,
             Meta.SCHEDULE, Meta.SAMPLER_REMOTE, Meta.SAMPLER_SEED, Meta.SAMPLER_SHARD)
"""The index's ``meta`` values a rebuilt index gets back (from the newest epoch's file): the
cache's rules, which the FUSE server reads before the sampler records them again, and what the
cache was filled from (remote, seed, shard), which the sampler checks at start: the restored
samples' ranks were made with that seed."""
_HEADER_COLUMNS = ("cut_at", "samples", "bytes", "new", "evicted", "max_sample", "listed", "estimated",
                   "first_sample")
"""The ``epochs`` row's fields in a file's first line; ``first_sample`` (null: not a range of
the admission order) is what a later cut needs to chain its file on this one (:mod:`.memberchain`)."""


def folder(root: Path) -> Path:
    return root / MEMBERS_DIR


def path_of(root: Path, n: int) -> Path:
    """The members file of epoch ``n`` in the cache folder ``root``."""
    return folder(root) / f"{PREFIX}{n}{SUFFIX}"


def number_of(name: str) -> int | None:
    """The epoch a members file name is for (None: not a members file)."""
    if not (name.startswith(PREFIX) and name.endswith(SUFFIX)):
        return None
    digits = name[len(PREFIX):-len(SUFFIX)]
    return int(digits) if digits.isdigit() and (digits == "0" or not digits.startswith("0")) else None


def base_path_of(root: Path, n: int) -> Path:
    """The file of retired epoch ``n`` kept as a chained file's base (:func:`remove`)."""
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


def remove(root: Path, numbers: list[int]) -> None:
    """Take the members files of epochs that retire out of the epochs' files (before their
    retirement commits: a file must never outlive its epoch, whose objects may be evicted right
    after): each is renamed to ``epoch-<N>.base``, which a rebuild never restores as an epoch but
    a live epoch's chained file may still read its members from (:mod:`.memberchain`); the keeper
    removes it once no file names it. A retirement whose commit then fails leaves its epoch live
    without its file: start-up recovery renames it back (:func:`tidy`), the keeper writes it
    again otherwise."""
    for n in numbers:
        with contextlib.suppress(FileNotFoundError):
            os.replace(path_of(root, n), base_path_of(root, n))


def discard(root: Path, numbers: list[int]) -> None:
    """Remove the members files of epochs that were never cut (a cut killed or failed before its
    commit): no file may name them as a base (a cut chains only on a committed epoch's file)."""
    for n in numbers:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path_of(root, n))


def clear_temps(root: Path) -> int:
    """Remove the temp files of writers that died before their rename (kill -9 while a file was
    written; start-up recovery calls this, as it clears the other temp files); a live process's
    temp is left alone. Returns how many were removed."""
    try:
        names = os.listdir(folder(root))
    except FileNotFoundError:
        return 0
    removed = 0
    for name in names:
        if name.startswith(f".{PREFIX}") and name.endswith(".tmp"):
            pid = name.split(".")[-3]
            if pid.isdigit() and os.path.exists(f"/proc/{pid}"):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(folder(root) / name)
                removed += 1
    return removed


# ---------------------------------------------------------------------------- writing
Reader = Callable[[], contextlib.AbstractContextManager[sqlite3.Connection]]
"""Opens one read of the index: ``ix.read`` (the keeper), or the cut's own write transaction."""


def _chunks(read: Reader, n: int, spans: list[tuple[int, int]] | None = None
            ) -> Iterator[list[tuple[Any, ...]]]:
    """The members of live epoch ``n`` as rows of :data:`_COLUMNS`, a chunk per read transaction
    (the epoch cannot change while it is live); KeyError when it is not live. ``spans``: only
    the samples in these id ranges (a chained file's own members)."""
    with read() as db:
        row = db.execute("SELECT retired, first_sample, max_sample, lo_key FROM epochs WHERE n=?",
                         (n,)).fetchone()
    if row is None or int(row[0]):
        raise KeyError(n)
    if spans is not None:
        for lo, hi in spans:
            start = lo - 1
            while True:
                with read() as db:
                    part = db.execute(_BY_ID["range"], (start, lo, hi, CHUNK)).fetchall()
                if part:
                    yield part
                if len(part) < CHUNK:
                    break
                start = int(part[-1][0])
        return
    window = row[3] is not None and row[1] is None
    after: int | str = "" if window else 0
    while True:
        with read() as db:
            if window:
                rows = db.execute(_WINDOW, (n, after, CHUNK)).fetchall()
            elif row[1] is not None:
                rows = db.execute(_BY_ID["range"], (after, int(row[1]), int(row[2]), CHUNK)).fetchall()
            else:
                rows = db.execute(_BY_ID["rows"], (n, after, CHUNK)).fetchall()
        if rows:
            yield rows
        if len(rows) < CHUNK:
            return
        after = str(rows[-1][2]) if window else int(rows[-1][0])


def _header(read: Reader, n: int) -> dict[str, Any] | None:
    with read() as db:
        row = db.execute(f"SELECT {', '.join(_HEADER_COLUMNS)} FROM epochs WHERE n=? AND retired=0",
                         (n,)).fetchone()
        marks = ",".join("?" * len(KEPT_META))
        meta = dict(db.execute(f"SELECT name, value FROM meta WHERE name IN ({marks})",
                               [m.value for m in KEPT_META]).fetchall())
    if row is None:
        return None
    return {"epochfs_members": FORMAT, "epoch": n, **dict(zip(_HEADER_COLUMNS, row, strict=True)),
            "meta": meta}


def _temp(root: Path, n: int) -> Path:
    where = folder(root)
    where.mkdir(exist_ok=True)
    return where / f".{PREFIX}{n}{SUFFIX}.{os.getpid()}.{threading.get_ident()}.tmp"


def _fill(temp: Path, read: Reader, header: dict[str, Any], stop: threading.Event | None,
          spans: list[tuple[int, int]] | None = None) -> bool:
    """Write epoch ``header["epoch"]``'s file to ``temp`` and fsync it; False when the epoch
    retired meanwhile or ``stop`` was set (the caller removes the temp). ``spans``: a chained
    file (its header names its base), listing only the members in these id ranges."""
    n = int(header["epoch"])
    digest = hashlib.sha256()
    encode = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), check_circular=False).encode
    count = nbytes = 0
    with open(temp, "wb") as f:
        head = (encode(header) + "\n").encode("ascii")
        digest.update(head)
        f.write(head)
        try:
            began = time.monotonic()
            # One line per chunk: one call of the C encoder, not one per row.
            for rows in _chunks(read, n, spans):
                data = (encode(rows) + "\n").encode("ascii")
                digest.update(data)
                f.write(data)
                count += len(rows)
                nbytes += sum(r[4] for r in rows)
                # Paced to DUTY of a core: the sampler's threads share this process's GIL.
                worked = time.monotonic() - began
                if stop is not None and stop.wait(worked * (1 - DUTY) / DUTY):
                    return False
                began = time.monotonic()
        except KeyError:
            return False  # retired meanwhile
        f.write((encode({"end": count, "bytes": nbytes, "sha256": digest.hexdigest()}) + "\n")
                .encode("ascii"))
        f.flush()
        os.fsync(f.fileno())
    if spans is None and (count != header["samples"] or nbytes != header["bytes"]):
        log.warning("epoch %d lists %d samples (%d bytes), its row says %s (%s bytes): its members "
                    "file records what it lists", n, count, nbytes, header["samples"], header["bytes"])
    return True


def write(ix: Index, root: Path, n: int, *, stop: threading.Event | None = None) -> bool:
    """Write epoch ``n``'s members file (temp, fsync, rename under the write lock after a last
    look that the epoch is still live, folder fsync); False when it is not live or ``stop`` was
    set meanwhile (nothing left behind)."""
    header = _header(ix.read, n)
    if header is None:
        return False
    temp = _temp(root, n)
    try:
        if not _fill(temp, ix.read, header, stop):
            return False
        with ix.write() as db:  # retire() removes the file before its commit: serialized with it
            live = db.execute("SELECT 1 FROM epochs WHERE n=? AND retired=0", (n,)).fetchone()
            if live is None:
                return False
            os.replace(temp, path_of(root, n))
        fsync_dir(folder(root))
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


AT_CUT = 50_000
"""Members up to which a cut writes its new epoch's file itself, inside its write transaction
(:func:`at_cut`): the epoch's, or for a chained file those outside its base's range (the samples
admitted since the base's cut); more is left to the :class:`Keeper` (about a second later, more
for a big one). Measured on the 2-core test machine (110 KB samples, 48-character keys): 10,000
members 0.05 s, 50,000 0.22 s (9 MB), 100,000 0.43 s, 1M 8.9 s (188 MB). The cut holds the index's
write lock meanwhile, and another rank's lookup of the same epoch waits at most
:data:`~.index.READER_WAIT_MS` (0.25 s) for it before it answers "not yet": up to this limit it
usually gets the lock and finds the epoch cut."""


@contextlib.contextmanager
def at_cut(root: Path) -> Iterator[Callable[[sqlite3.Connection, int], bool]]:
    """Around a cut's write transaction (entered before it, left after its commit): yields
    ``keep(db, n)``, which the cut calls inside its transaction once epoch ``n``'s rows are in,
    before the commit. It puts ``n``'s members file in place (temp, fsync, rename, folder fsync)
    read through ``db``, so the file is there before any reader can see the epoch: an index
    damaged right after the cut is rebuilt with it. A chained file when the epoch can chain on
    the previous live epoch's file (:func:`.memberchain.base_at_cut`): its cost is the members
    admitted since that epoch's cut. Skipped (False; the keeper writes it a second later) when the
    file would list more than :data:`AT_CUT` members, and on a write error such as a full
    volume (logged: the cut stands, as before). When the transaction then fails (its commit
    included), the file is removed: no file for an epoch that was never cut."""
    placed: list[int] = []

    def keep(db: sqlite3.Connection, n: int) -> bool:
        header = _header(lambda: contextlib.nullcontext(db), n)
        if header is None:
            return False
        chain = memberchain.base_at_cut(db, n, lambda b: path_of(root, b))
        spans = None
        if chain is not None and memberchain.count(db, chain[1]) <= AT_CUT:
            header = {**header, "epochfs_members": CHAINED, "base": chain[0]}
            spans = chain[1]
        elif int(header["samples"]) > AT_CUT:
            # A file here was left by a cut of n killed between its rename and its commit (the
            # mark then lets n be cut again): never this epoch's, and the keeper writes none over it.
            with contextlib.suppress(OSError):
                discard(root, [n])
            return False
        temp: Path | None = None
        try:
            temp = _temp(root, n)
            if not _fill(temp, lambda: contextlib.nullcontext(db), header, None, spans):
                return False
            os.replace(temp, path_of(root, n))
            placed.append(n)
            fsync_dir(folder(root))
            return True
        except OSError as e:
            log.warning("epoch %d: its members file could not be written at its cut (%s); the "
                        "sampler's keeper writes it later", n, e)
            with contextlib.suppress(OSError):
                discard(root, [n])  # not a stale file of a killed cut (above)
            return False
        finally:
            if temp is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)

    try:
        yield keep
    except BaseException:
        discard(root, placed)
        raise


def _ref(row: tuple[Any, ...]) -> dict[str, Any]:
    """What a file's first line must say to be epoch row ``(n, _, cut_at, max_sample)``'s."""
    return {"epoch": int(row[0]), "cut_at": float(row[2]), "max_sample": int(row[3])}


def unchained(root: Path, live: dict[int, dict[str, Any]]) -> list[int]:
    """The live epochs (``live``: number -> :func:`_ref`) whose file is chained on something else
    than a live epoch's file: on a retired epoch's base file, or on a file that is not its
    base's. The keeper rewrites them whole (oldest first), so that base files can go."""
    files = present(root)
    heads = {n: memberchain.head(p) for n, p in files.items() if n in live}
    out = []
    for n in sorted(heads):
        h = heads[n]
        b = None if h is None else memberchain.base_of(h)
        if h is None or b is None:
            continue
        bh = heads.get(b)
        if b not in live or bh is None or not memberchain.names(bh, h["base"]) \
                or not memberchain.names(bh, live[b]):
            out.append(n)
    return out


def tidy(root: Path, live: dict[int, dict[str, Any]]) -> list[Path]:
    """Rename back the base file of a live epoch (``live``: number -> :func:`_ref`) that has no
    members file (a retirement killed or failed between its rename and its commit), then remove
    the base files no members file reaches through its chain; returns those removed. Called by
    start-up recovery (with the live epochs) and by the keeper under the write lock."""
    bases = present(root, BASE_SUFFIX)
    files = present(root)
    back = [n for n, p in bases.items() if n in live and n not in files
            and (h := memberchain.head(p)) is not None and memberchain.names(h, live[n])]
    for n in back:
        os.replace(bases.pop(n), path_of(root, n))
        files[n] = path_of(root, n)
    heads = {p: memberchain.head(p) for p in files.values()}
    gone = memberchain.unreferenced(heads, bases)
    for p in gone:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
    if back or gone:
        fsync_dir(folder(root))
    if back:
        log.info("epoch(s) %s: members file renamed back (a retirement that did not commit)", back)
    return gone


@dataclass
class Keeper:
    """Writes the members file of every live epoch that lacks one and removes those of retired
    epochs; on a thread of the sampler (:meth:`start`), or one pass at a time (:meth:`sync`)."""

    ix: Callable[[], Index]
    """The index to use now (the store's handle: it follows a reset)."""
    root: Path
    stop: threading.Event = field(default_factory=threading.Event)
    every: float = EVERY
    written: int = 0
    """Files this keeper wrote (tests and the log read it)."""
    _thread: threading.Thread | None = None
    _warned: float = float("-inf")

    def sync(self) -> list[int]:
        """One pass: write the files that are missing, newest epoch first, then rewrite whole
        the chained files whose base is no longer a live epoch's file (:func:`unchained`), then
        remove the base files no file names (:func:`tidy`); returns the epochs written. Only a
        file whose epoch the index says retired is taken out (a crash between
        :func:`.epochs.retire`'s rename and its commit leaves none, a failed commit leaves a live
        epoch without one): none of this trusts an index that may be damaged to say what is
        *not* there."""
        ix = self.ix()
        rows = ix.query("SELECT n, retired, cut_at, max_sample FROM epochs")
        files = present(self.root)
        remove(self.root, [int(r[0]) for r in rows if int(r[1]) and int(r[0]) in files])
        done = []
        for n in sorted((int(r[0]) for r in rows if not int(r[1])), reverse=True):
            if self.stop.is_set():
                break
            if n not in files and write(ix, self.root, n, stop=self.stop):
                self.written += 1
                done.append(n)
        live = {int(r[0]): _ref(r) for r in rows if not int(r[1])}
        for n in unchained(self.root, live):
            if self.stop.is_set():
                break
            if write(ix, self.root, n, stop=self.stop):  # replaces the chained file whole
                self.written += 1
                done.append(n)
        if not self.stop.is_set() and present(self.root, BASE_SUFFIX):
            with ix.write():  # serialized with the retirements' renames and the cuts' files
                tidy(self.root, {})
        return done

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="epoch-members", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            try:
                done = self.sync()
                if done:
                    log.debug("epoch members written for %s", done)
            except Exception as e:  # busy, a full disk, a damaged index: the next look tries again
                now = time.monotonic()
                if now - self._warned >= 60.0:
                    self._warned = now
                    log.warning("could not write the members of the live epochs (%s); trying again", e)
