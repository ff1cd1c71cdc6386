"""Each live epoch's members, kept outside the index: what a damaged index is rebuilt from.

A damaged ``index.sqlite`` is replaced (:mod:`.reset`), and without these files the fresh index
would know nothing: every published epoch would vanish (a reader inside one would get ENOENT for
every file), start-up recovery would remove every object file as an orphan and the sampler fetch
the whole cache again. The objects are fine; what is lost is which samples each epoch holds. So
that is written down beside the index, one file per live epoch::

    <cache>/epochs/epoch-<N>.members

Its lines (:mod:`.memberformat`, with the names and paths): a first line for the epoch (its
``epochs`` row, and the cache's rules and identity, :data:`KEPT_META`), lines of up to
:data:`CHUNK` members each (every column of each member's sample row), and a last line with the
number of members, their bytes and the SHA-256 of every line before it: a file damaged on the
volume is refused whole, never half used. Written to a temp name, fsynced, renamed, its folder
fsynced.

A snapshot epoch's file may be *chained* (:data:`CHAINED`, :mod:`.memberchain`): its first line
names an older live epoch's file as its base and its lines list only the members outside the
base's range; or (:data:`SEGMENTED`, :mod:`.membersegments`) it names a *segment* the keeper wrote
ahead of the cut and takes from it the ids its ``base_span`` says. That is what lets a cut write
the file of a snapshot epoch of any size.

**Who writes them.** The cut itself, for an epoch of up to :data:`AT_CUT` members, or a chained file
of up to :data:`AT_CUT` members of its own (:func:`at_cut`, called by :func:`.epochs._cut` in every
process that cuts: the sampler's timer and queued cuts, the FUSE server's cut on lookup,
``/v1/cut``, ``epochfs cut``): inside its write transaction, after the epoch's rows and before the
commit, so the file is in place before any reader can see the epoch, and an index damaged right
after the cut is rebuilt with it. A commit that then fails removes the file. A snapshot epoch
above that size is chained on the keeper's segments when they cover all but at most
:data:`AT_CUT` of its members (:func:`.membersegments.base_at_cut`); a schedule-mode window of any
size gets the file the keeper wrote ahead for it when that file lists exactly the window
(:func:`.memberpending.place`: a rename). A larger epoch (its
file costs about 2.5 us a member under the index's write lock, which the FUSE server's lookups and
every admission wait on: :data:`AT_CUT`) and one whose file could not be written (a full volume: the
cut stands) get theirs from the :class:`Keeper`, a thread of the sampler (the one writer of the
cache): every :data:`EVERY` seconds it looks for live epochs without a file (one small query and a
listing of ``epochs/``) and writes them, paced to :data:`DUTY` of a core. Its file goes into place
under the write lock after a last look that its epoch is still live, and a retirement takes a file
out before its commit (:func:`.epochs.retire`, :func:`remove`: renamed to ``epoch-<N>.base``, read
only through a live chained file that names it), so an epoch's file never outlives its epoch (a
retired epoch's objects may be evicted at once). The keeper rewrites whole a chained file whose base
is no longer a live epoch's file, or a segment, then removes the base files and segments no file
names (:func:`unchained`, :func:`tidy`, :func:`.membersegments.tidy`); otherwise a file is never
rewritten: the epoch cannot change while it is live. Each pass it also writes the next segment
when one is due (:meth:`Keeper.ahead`).

**Who reads them.** :mod:`.memberrestore` (:func:`.memberrestore.rebuild`, called by :mod:`.reset`),
which restores each file's epoch into a fresh index when the old one is damaged; the format
(:mod:`.memberformat`) is the contract between the two modules (:data:`FORMAT`, :data:`KEPT_META`,
:func:`present`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from epochfs.sidecar.store import memberchain, memberpending, membersegments
from epochfs.sidecar.store.index import Index
from epochfs.sidecar.store.memberformat import (
    AHEAD,
    BASE_SUFFIX,
    CHAINED,
    CHUNK,
    DUTY,
    FORMAT,
    FORMATS,
    KEPT_META,
    MEMBERS_DIR,
    PREFIX,
    SEGMENTED,
    SUFFIX,
    Reader,
    base_path_of,
    fill,
    folder,
    header,
    number_of,
    path_of,
    present,
    temp,
)
from epochfs.sidecar.store.objects import fsync_dir, staged, writer_gone

log = logging.getLogger("epochfs.store")

__all__ = [  # the format's names (its module is a part of this one) are used through this one
    "AHEAD", "AT_CUT", "BASE_SUFFIX", "CHAINED", "CHUNK", "DUTY", "EVERY", "FORMAT", "FORMATS", "KEPT_META",
    "MEMBERS_DIR", "PREFIX", "SEGMENTED", "SUFFIX", "Keeper", "at_cut", "base_path_of", "clear_temps",
    "discard", "folder", "number_of", "path_of", "present", "remove", "tidy", "unchained", "write",
]
EVERY = 1.0
"""Seconds between two looks of the :class:`Keeper` for live epochs without their file."""


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
    written; start-up recovery calls this, before this process starts any writer, as it clears
    the other temp files); another live process's temp is left alone, one with this process's pid
    is a killed predecessor's (:func:`.objects.writer_gone`). Returns how many were removed."""
    try:
        names = os.listdir(folder(root))
    except FileNotFoundError:
        return 0
    removed = 0
    for name in names:
        if name.startswith(f".{PREFIX}") and name.endswith(".tmp"):
            if not writer_gone(name.split(".")[-3]):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(folder(root) / name)
                removed += 1
    return removed


def _filled(path: Path, read: Reader, head: dict[str, Any], stop: threading.Event | None,
            spans: list[tuple[int, int]] | None = None) -> bool:
    """:func:`.memberformat.fill`, and a warning when a whole file's members do not add up to its
    row's counts (the row's come from the running totals at the cut: the file records what the
    epoch lists)."""
    done = fill(path, read, head, stop, spans)
    if done is None:
        return False
    if spans is None and done != (head["samples"], head["bytes"]):
        log.warning("epoch %d lists %d samples (%d bytes), its row says %s (%s bytes): its members "
                    "file records what it lists", head["epoch"], *done, head["samples"], head["bytes"])
    return True


def write(ix: Index, root: Path, n: int, *, stop: threading.Event | None = None) -> bool:
    """Write epoch ``n``'s members file (temp, fsync, rename under the write lock after a last
    look that the epoch is still live, folder fsync); False when it is not live or ``stop`` was
    set meanwhile (nothing left behind)."""
    head = header(ix.read, n)
    if head is None:
        return False
    with staged(path_of(root, n), temp(root, n)) as s:
        if not _filled(s.temp, ix.read, head, stop):
            return False
        with ix.write() as db:  # retire() removes the file before its commit: serialized with it
            live = db.execute("SELECT 1 FROM epochs WHERE n=? AND retired=0", (n,)).fetchone()
            if live is None:
                return False
            s.install()
    return True  # the folder fsynced as the block ended, outside the write lock


AT_CUT = 100_000
"""Members up to which a cut writes its new epoch's file itself, inside its write transaction
(:func:`at_cut`): the epoch's, or for a chained file those outside its base's range (the samples
admitted since the base's cut); more is left to the :class:`Keeper` (about a second later, more
for a big one). The cut holds the index's write lock meanwhile, and another rank's lookup of the
same epoch waits at most :data:`~.index.READER_WAIT_MS` (0.25 s) for it before it answers "not
yet": up to this limit it usually gets the lock and finds the epoch cut. Measured on the 2-core
test machine (``epochfs.benchmarks.members_files``: 45-character keys, 267 bytes a member, the
machine shared, best of 7), CPU seconds of the write with SQLite rendering the lines, and with
the Python encoder of before: 50,000 members 0.20 (0.29), 100,000 0.31 (0.73), 200,000 0.73
(1.35), 1M 3.4-3.7 (6.5-7.3); about 2.5 us a member against 5.5-7. The limit was 50,000 with the
Python encoder, for the same time."""


@contextlib.contextmanager
def at_cut(root: Path) -> Iterator[Callable[[sqlite3.Connection, int], bool]]:
    """Around a cut's write transaction (entered before it, left after its commit): yields
    ``keep(db, n)``, which the cut calls inside its transaction once epoch ``n``'s rows are in,
    before the commit. It puts ``n``'s members file in place (temp, fsync, rename, folder fsync)
    read through ``db``, so the file is there before any reader can see the epoch: an index
    damaged right after the cut is rebuilt with it. A chained file when the epoch can chain on
    the previous live epoch's file (:func:`.memberchain.base_at_cut`): its cost is the members
    admitted since that epoch's cut; else, for a snapshot epoch above :data:`AT_CUT`, chained on
    the keeper's segments (:func:`.membersegments.base_at_cut`): its cost is what they do not
    cover. Skipped (False; the keeper writes it a second later) when the
    file would list more than :data:`AT_CUT` members, and on a write error such as a full
    volume (logged: the cut stands). When the transaction then fails (its commit
    included), the file is removed: no file for an epoch that was never cut."""
    placed: list[int] = []

    def keep(db: sqlite3.Connection, n: int) -> bool:
        head = header(lambda: contextlib.nullcontext(db), n)
        if head is None:
            return False
        if memberpending.placed(db, root, n, head):  # a window's file the keeper wrote ahead
            placed.append(n)
            return True
        chain = memberchain.base_at_cut(db, n, lambda b: path_of(root, b))
        spans = None
        if chain is not None and memberchain.count(db, chain[1], AT_CUT) <= AT_CUT:
            head = {**head, "epochfs_members": CHAINED, "base": chain[0]}
            spans = chain[1]
        elif int(head["samples"]) > AT_CUT and (
                ahead := membersegments.base_at_cut(db, n, root, AT_CUT)) is not None:
            head = {**head, "epochfs_members": SEGMENTED, "base": ahead[0], "base_span": ahead[1]}
            spans = ahead[2]
        elif int(head["samples"]) > AT_CUT:
            # A file here was left by a cut of n killed between its rename and its commit (the
            # mark then lets n be cut again): never this epoch's, and the keeper writes none over it.
            with contextlib.suppress(OSError):
                discard(root, [n])
            return False
        try:
            with staged(path_of(root, n), temp(root, n)) as s:
                if not _filled(s.temp, lambda: contextlib.nullcontext(db), head, None, spans):
                    return False
                s.install()
                placed.append(n)
            return True
        except OSError as e:
            log.warning("epoch %d: its members file could not be written at its cut (%s); the "
                        "sampler's keeper writes it later", n, e)
            with contextlib.suppress(OSError):
                discard(root, [n])  # not a stale file of a killed cut (above)
            return False

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
    than a live epoch's file: on a retired epoch's base file, on a file that is not its base's,
    or on segments (:mod:`.membersegments`: a chain that would otherwise grow with every big cut).
    The keeper rewrites them whole (oldest first), so that base files and segments can go."""
    files = present(root)
    heads = {n: memberchain.head(p) for n, p in files.items() if n in live}
    out = []
    for n in sorted(heads):
        h = heads[n]
        if h is not None and isinstance(h.get("base"), dict) and "segment" in h["base"]:
            out.append(n)
            continue
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
    # A segment (:mod:`.membersegments`) may name a base too; the keeper removes the segments no
    # file needs first.
    heads = {p: memberchain.head(p) for p in [*files.values(), *membersegments.segments(root).values()]}
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
    segments: int = 0
    """Segments this keeper wrote (:mod:`.membersegments`)."""
    pending: int = 0  # next windows' files written ahead (:mod:`.memberpending`)
    _thread: threading.Thread | None = None
    _warned: float = float("-inf")

    def sync(self) -> list[int]:
        """One pass: write the files that are missing, newest epoch first, then the segments
        (:meth:`ahead`), then rewrite whole the chained files whose base is no longer a live
        epoch's file or is a segment (:func:`unchained`), then remove the base files no file
        names (:func:`tidy`); returns the epochs written. Only a
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
        if not self.stop.is_set():  # before the rewrites below: what a cut needs comes first
            self.ahead(ix, live)
        if not self.stop.is_set() and memberpending.write_ahead(ix, self.root, self.stop) is not None:
            self.pending += 1
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

    def ahead(self, ix: Index, live: dict[int, dict[str, Any]]) -> None:
        """Remove the segments no file needs, then write the next one when it is due
        (:mod:`.membersegments`: what lets a cut of any size write its file)."""
        head = memberchain.head(path_of(self.root, max(live))) if live else None
        newest = None if head is None else memberchain.reference(head)
        if membersegments.unneeded(self.root, newest):  # a look first: the lock only when due
            with ix.write():  # serialized with the cuts, which read segments under it
                membersegments.tidy(self.root, newest)
        if membersegments.advance(ix, self.root, AT_CUT, self.stop) is not None:
            self.segments += 1

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
