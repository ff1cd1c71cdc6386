"""Schedule mode's next epoch, built ahead: its cut too is a header, a write and a rename.

In schedule mode (``--schedule``) epoch N is a window of the sampling order, not a range of the
admission order: the samples whose ``(rank, key)`` lies between the ends of positions ``[lo, hi)``
of the catalog's rank order (``hi`` from the schedule, ``lo`` trimmed to the epoch budget), with ids
up to the cut's ``max_sample`` (:mod:`epochfs.sidecar.store.windows`). So :class:`AheadTree`'s set
(an id range from a front) cannot stand for it, and the publisher wrote every schedule-mode epoch
whole at the ask (~40 µs an entry: seconds at 100k). The next window is even more predictable than a
snapshot cut: a pure function of seed, catalog and N. :class:`WindowTree` therefore keeps *that*
set, with the same parts as :class:`AheadTree` (a :class:`ManifestBody` joined ahead, a
:class:`LinkTree` under a temporary name whose entries carried from the epoch before are hard
links of its symlinks):

* *which window*: the number the next cut gets (:meth:`Store.next_epoch`) and its window's ends as
  the store would compute them now (:meth:`WindowReads.predicted`, which reads the window's catalog
  rows: once after each publish, then every :data:`AIM_SECONDS` in case a relist moved it);
* *its samples*: each step reads the samples admitted since the last (one indexed query on the
  admission order, as for a snapshot) and keeps those whose place lies in the window; when the aim
  moves (the next epoch), members outside the new window leave and the samples held in the part of
  it that is new are read from the rank index;
* *the cut* (:meth:`WindowTree.publish`): the epoch's row gives its ends, ``max_sample``, count and
  bytes. The set is moved to exactly those ends (a stale aim costs a read, not a wrong epoch),
  samples admitted after the cut are left for the next tree, and the set must match the row
  (count and bytes, after one resync with the store's rows if they differ; a spot check of paths,
  object names and places). A window with excluded keys (a relist dropped some inside its ends),
  a path clash or a set that still differs returns False and the epoch is written whole.

Crash safety is :class:`AheadTree`'s argument unchanged: the same :class:`LinkTree` (a temporary
name until the one rename that shows it, the manifest renamed into place before that rename), and
the set is memory only, built again from the store after a restart.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from epochfs.sidecar.folderview_ahead import AheadTree
from epochfs.sidecar.folderview_body import ManifestBody
from epochfs.sidecar.folderview_built import (
    CHUNK,
    SPOT_CHECKS,
    STEP_SECONDS,
    BuiltAhead,
    Tainted,
    WriteControl,
    rel_of,
)
from epochfs.sidecar.folderview_links import LinkTree
from epochfs.sidecar.store import Meta, object_name
from epochfs.sidecar.store.admitted import AdmittedSample, Place, WindowExtent
from epochfs.sidecar.store.reader import FolderReader
from epochfs.torchclient.layout import MANIFEST_MAGIC, epoch_name
from epochfs.torchclient.publish import DIR_MODE

log = logging.getLogger("epochfs.folderview")

AIM_SECONDS = 5.0
"""How often the publisher looks whether the window aimed at may have moved without a cut (a
relist, new rules): the listing's generation, the catalog's count and the rules, three small
reads. The window itself is read again only when one of them changed (its catalog rows: about a
second at a million keys, so never every step)."""

Member = tuple[int, bytes | None, str, int, str]
"""A sample of the set: size, manifest line (None: not shown, a row the FUSE view's rule leaves out:
:func:`~epochfs.fuse.treebuild.unshown_reason`), object name, rank, key."""


def ahead_tree(*, store: FolderReader, folder: Path, link_root: Path,
               temp_prefix: str) -> AheadTree | WindowTree:
    """The next epoch's tree for the store's mode: a window of the sampling order in schedule mode,
    a range of the admission order otherwise."""
    kind = WindowTree if store.policy().schedule is not None else AheadTree
    return kind(store=store, folder=folder, link_root=link_root, temp_prefix=temp_prefix)


def _inside(bounds: tuple[Place, Place] | None, rank: int | None, key: str) -> bool:
    return bounds is not None and rank is not None and bounds[0] <= (rank, key) <= bounds[1]


class WindowTree(BuiltAhead):
    """The next schedule-mode window's samples, its manifest body and its tree under a temporary
    name; the interface of :class:`AheadTree` (the publisher uses either)."""

    def __init__(self, *, store: FolderReader, folder: Path, link_root: Path, temp_prefix: str) -> None:
        super().__init__(store=store, folder=folder, link_root=link_root, temp_prefix=temp_prefix)
        self.reads = store.admitted_windows()
        self._m: dict[int, Member] = {}
        self._heap: list[int] = []  # member ids (and some that left): the oldest leave by the front
        self._linked: set[int] = set()
        self._todo: list[int] = []  # member ids to link in the current tree
        self._hi = 0  # the highest sample id read
        self._aim: tuple[int, tuple[Place, Place] | None] | None = None  # (epoch, its window's ends)
        self._aimed_at = -1e18
        self._aimed_by: tuple[str | None, str | None, str] | None = None  # what the aim was read from
        self._body = ManifestBody()
        self._bytes = 0
        self._shown_bytes = 0
        self._base: tuple[Path, WindowExtent] | None = None

    def pending(self) -> bool:
        """Linking is left to do (the publisher steps again at once)."""
        return self._links is None or bool(self._todo)

    @property
    def aimed(self) -> int | None:
        """The epoch number whose window the set follows (None before the first aim)."""
        return None if self._aim is None else self._aim[0]

    # ------------------------------------------------------------------ the set
    @property
    def _bounds(self) -> tuple[Place, Place] | None:
        return None if self._aim is None else self._aim[1]

    def _add(self, samples: Sequence[AdmittedSample]) -> None:
        shown: list[bytes] = []
        for s in samples:
            if s.id in self._m or s.rank is None:
                continue
            obj = object_name(s.sid)
            line = self._line(s.path, s.size, s.checksum, obj)
            if line is not None:
                shown.append(line)
                self._shown_bytes += s.size
            self._m[s.id] = (s.size, line, obj, s.rank, s.key)
            heapq.heappush(self._heap, s.id)
            self._todo.append(s.id)
            self._bytes += s.size
        self._body.add(shown)

    def _leave(self, ids: Sequence[int]) -> None:
        removed: list[bytes] = []
        for i in ids:
            m = self._m.pop(i, None)
            if m is None:
                continue
            size, line = m[0], m[1]
            self._bytes -= size
            if line is not None:
                self._shown_bytes -= size
                removed.append(line)
                if i in self._linked and self._links is not None:
                    self._links.unlink(rel_of(line))
            self._linked.discard(i)
        self._body.remove(removed)

    def _target(self, n: int, bounds: tuple[Place, Place] | None) -> None:
        """Make the set epoch ``n``'s window ``bounds``: members outside leave, the samples held
        in the part of it that is new (read so far: ids up to the last read) join."""
        old = self._bounds
        self._aim = (n, bounds)
        if old == bounds:
            return
        if bounds is None:
            self._leave(list(self._m))
            return
        lo, hi = bounds
        if old is None or old[0] < lo or hi < old[1]:  # the window lost a part: look at each member
            self._leave([i for i, m in self._m.items() if not lo <= (m[3], m[4]) <= hi])
        # else it only grew (every member lies inside the old ends): no member leaves, and no pass
        # over a million of them (1.3-4.9 s at 1M entries on the 2-core VM, after every publish)
        pieces: list[tuple[Place, Place, bool, bool]] = []
        if old is None or old[1] < lo or hi < old[0]:
            pieces.append((lo, hi, False, False))
        else:
            if lo < old[0]:
                pieces.append((lo, old[0], False, True))
            if old[1] < hi:
                pieces.append((old[1], hi, True, False))
        for start, end, start_open, end_open in pieces:
            while True:
                rows = self.reads.between(start, end, lo_open=start_open, hi_open=end_open,
                                          max_id=self._hi, limit=CHUNK)
                self._add(rows)
                if len(rows) < CHUNK:
                    break
                start, start_open = (rows[-1].rank or 0, rows[-1].key), True

    def _aim_now(self) -> None:
        """Aim at the next cut's window: after a publish at once; otherwise, every AIM_SECONDS,
        again if the catalog or the rules changed."""
        if time.monotonic() - self._aimed_at < AIM_SECONDS:
            return
        policy = self.store.policy()
        if policy.schedule is None:
            raise Tainted("the store is not in schedule mode")
        n = self.store.next_epoch()
        if self._aim is not None and n > self._aim[0] and self._unshown():
            return  # the epoch aimed at is cut: its publish comes first and aims at the next one
        by = (self.store.meta(Meta.LISTING_COMPLETE), self.store.meta(Meta.CATALOG_OBJECTS), repr(policy))
        if self._aim is None or self._aim[0] != n or by != self._aimed_by:
            self._target(n, self.reads.predicted(n))
            self._aimed_by = by
        self._aimed_at = time.monotonic()

    def _unshown(self) -> bool:
        """The epoch aimed at is cut (live, recorded by its ends) and not in the folder yet: the
        next step publishes it from this tree, so the aim stays.

        Moving the aim to the epoch after it now would read that window's catalog rows (4-8 s at
        a million keys) and pass over every member, and :meth:`publish` would move the set back,
        all in the trainer's wait (10.8 s at 1M keys, docs/folderview.md). A cut wakes the publisher as it
        starts (it raises the cache's high-water mark before its commit), so the step it woke
        could read the list of live epochs before the commit and the next number after it."""
        if self._aim is None:
            return False
        n = self._aim[0]
        return self.reads.extent(n) is not None and not (self.folder / epoch_name(n)).exists()

    def _pull(self, upto: int | None = None) -> None:
        """Read the samples admitted since the last pull (all, or at least up to id ``upto``),
        keep those inside the window, and drop members the store no longer holds below its
        lowest id."""
        lo, hi = self.store.sample_id_bounds()
        if hi < self._hi:
            raise Tainted("the index was replaced")
        gone = []
        while self._heap and self._heap[0] < lo:
            gone.append(heapq.heappop(self._heap))
        self._leave(gone)
        bounds = self._bounds
        while upto is None or self._hi < upto:
            rows = self.store.samples_after(self._hi, limit=CHUNK)
            if rows:
                self._hi = rows[-1].id
            self._add([s for s in rows if _inside(bounds, s.rank, s.key)])
            if len(rows) < CHUNK:
                break

    # ------------------------------------------------------------------ the tree
    def _new_tree(self) -> None:
        self._links = LinkTree(self.folder, self.temp_prefix)
        self._links.base = None if self._base is None else self._base[0]
        self._linked.clear()
        self._todo = sorted(self._m, reverse=True)  # linked from the end: the oldest first

    def advance(self, seconds: float = STEP_SECONDS) -> None:
        """Bring the set up to the store and link for about ``seconds``; :class:`Tainted` when
        the tree cannot stand for the next epoch."""
        self._aim_now()
        self._pull()
        if self._links is None:
            self._new_tree()
        self._link(time.monotonic() + seconds)
        self.sync_dirs()
        if not self.pending():
            self._body.chunks()  # the pages that changed joined now, not at the cut

    def _link(self, deadline: float | None, upto: int | None = None) -> None:
        """Link pending members (those up to sample id ``upto``: later ones wait for the next
        tree), grouped by folder, until ``deadline``."""
        links = self._links
        assert links is not None
        base = self._base
        links.base = None if base is None else base[0]
        while self._todo:
            batch, self._todo[-4096:] = self._todo[-4096:], []
            groups: dict[str, list[tuple[str, str, bool]]] = {}
            members: list[int] = []
            for i in batch:
                m = self._m.get(i)
                if m is None or m[1] is None or i in self._linked or (upto is not None and i > upto):
                    continue
                parent, _, name = rel_of(m[1]).rpartition("/")
                carried = base is not None and i <= base[1].last and base[1].lo <= (m[3], m[4]) <= base[1].hi
                groups.setdefault(parent, []).append((name, self.prefix + m[2], carried))
                members.append(i)
            self._link_groups(links, groups)
            self._linked.update(members)
            if deadline is not None and time.monotonic() > deadline:
                return

    def rebase(self, n: int) -> None:
        """Link from published ``epoch-N`` (written whole, or found at start) when it is the
        newest source: its entries are the symlinks of exactly its window's samples."""
        ext = self.reads.extent(n)
        if ext is not None and (self._base is None or ext.last >= self._base[1].last):
            self._base = (self.folder / epoch_name(n), ext)

    # ------------------------------------------------------------------ the cut
    def _counted(self, last: int) -> tuple[list[int], int, int]:
        """Members admitted after ``last`` (the cut), and the count and bytes of the others."""
        late = [i for i in self._m if i > last] if self._hi > last else []
        late_bytes = sum(self._m[i][0] for i in late)
        return late, len(self._m) - len(late), self._bytes - late_bytes

    def publish(self, n: int, *, header: str, write_control: WriteControl) -> bool:
        """Show the tree as ``epoch-N`` if it is the store's window ``n``; False (nothing changed
        in the folder) when it cannot be, and the caller writes the epoch whole."""
        ext = self.reads.extent(n)
        if ext is None or ext.excluded:
            log.debug("epoch %d: not a window recorded by its ends, or with keys excluded: written whole", n)
            return False
        if self._links is None:
            self._new_tree()
        self._target(n, (ext.lo, ext.hi))
        self._pull(upto=ext.last)
        late, count, nbytes = self._counted(ext.last)
        if (count, nbytes) != (ext.samples, ext.bytes):
            self._resync(ext)
            late, count, nbytes = self._counted(ext.last)
            if (count, nbytes) != (ext.samples, ext.bytes):
                log.info("epoch %d: the tree built ahead holds %d samples, %d bytes; the window %d, %d: "
                         "written whole", n, count, nbytes, ext.samples, ext.bytes)
                return False
        if not self._spot_check(ext.last):
            return False
        links = self._links
        assert links is not None
        late_lines = [line for i in late if (line := self._m[i][1]) is not None]
        late_shown = sum(self._m[i][0] for i in late if self._m[i][1] is not None)
        for i in late:  # unlinked from this tree: the next one links them again
            line = self._m[i][1]
            if i in self._linked and line is not None:
                links.unlink(rel_of(line))
                self._linked.discard(i)
        self._link(None, upto=ext.last)
        links.sync_dirs()
        self._body.remove(late_lines)
        try:
            shown = self._shown_bytes - late_shown
            head = f"{MANIFEST_MAGIC}\tepoch={n}\tfiles={len(self._body)}\tbytes={shown}{header}\n"
            write_control(n, [head.encode(), *self._body.chunks()])
            links.show(self.folder / epoch_name(n), DIR_MODE)
        finally:
            self._body.add(late_lines)
        self._base = (self.folder / epoch_name(n), ext)
        self._links = None
        self._aimed_at = -1e18  # the next window, at the next step
        return True

    def _resync(self, ext: WindowExtent) -> None:
        """The set becomes exactly the window's samples the store holds (a sample taken out, or
        one the set missed)."""
        held: list[AdmittedSample] = []
        start, start_open = ext.lo, False
        while True:
            rows = self.reads.between(start, ext.hi, lo_open=start_open, max_id=ext.last, limit=CHUNK)
            held += rows
            if len(rows) < CHUNK:
                break
            start, start_open = (rows[-1].rank or 0, rows[-1].key), True
        ids = {s.id for s in held}
        self._leave([i for i in self._m if i <= ext.last and i not in ids])
        self._add(held)

    def _spot_check(self, last: int) -> bool:
        """A few members against the store's rows: same path, object and place (a replaced index)."""
        stride = max(1, len(self._m) // SPOT_CHECKS)  # spread over the set, no sort of it
        picks = [i for i in itertools.islice(self._m, 0, None, stride) if i <= last][:SPOT_CHECKS]
        newest = next((i for i in reversed(self._m) if i <= last), None)
        for i in [*picks, *([] if newest is None else [newest])]:
            found = self.store.samples_after(i - 1, limit=1)
            row = found[0] if found and found[0].id == i else None
            _size, line, obj, rank, key = self._m[i]
            if row is None or object_name(row.sid) != obj or (row.rank, row.key) != (rank, key) or (
                    line is not None and rel_of(line) != row.path):
                log.info("the tree built ahead differs from the store at sample %d: written whole", i)
                return False
        return True
