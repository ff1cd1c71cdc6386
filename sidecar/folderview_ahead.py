"""The folder view's next epoch, built ahead: the cut is a header, a write, a rename and fsyncs.

Writing a whole epoch tree when the epoch is asked for made the trainer wait at every boundary
(400,000 entries: 11.4 s, CPU-bound). In snapshot mode the next cut is predictable: the samples
with ids from the front (the newest that fit the epoch budget) up to the newest admitted, and each
cut's set grows from the last one (new samples added at the top, the front moving up as the budget
fills or the oldest are evicted). :class:`AheadTree` keeps that set, its manifest body
(:mod:`.folderview_body`: sorted lines, joined ahead page by page) and a tree of it under a
temporary name (:mod:`.folderview_links`) up to date while samples land: each step of the
publisher reads the samples admitted since the last (:meth:`Store.samples_after`, one indexed
query on the admission order) and the new front, links what is new and unlinks what left, a
bounded amount of work at a time so that a cut never waits long behind it.

**At the cut** (:meth:`AheadTree.publish`) the epoch's row says its range ``[first, max]``, its
sample count and bytes (:meth:`Store.epoch_extent`); the samples admitted since the last step are
added, those above ``max`` (landed after the cut) left out, those below ``first`` removed, and the
set is checked against the row (count and bytes: the set holds every sample of the range, ids
never being reused, so equal counts mean equal sets; plus a spot check of paths and sample ids).
Then the manifest is the header plus the body's pages, already joined, renamed into
``.epochfs/``; the tree's folders are made ``0555`` and the tree renamed to ``epoch-N``; the
fsyncs of the manifest and the folder follow. Anything the fast path cannot vouch for (an epoch
listed row by row, a path clash, a set that does not match the row) returns False and the caller
writes the epoch the old way, whole (:meth:`FolderPublisher._publish`). Schedule mode's epochs are
windows of the sampling order, not ranges: :mod:`.folderview_window` builds those ahead.

**The front** each step trims to is a prediction: the newest samples within the epoch budget, or
the bytes the last epoch held if more (a cut with nothing left to fetch holds the whole cache).
Nothing is trimmed before the sampler configured the store (its defaults say capacity 1: every
sample of a fresh cache would leave for good); samples a budget trimmed are pulled again once it
grows, and at the cut whatever of its range the front left (:meth:`AheadTree._refill`), so the
set converges to the epoch it is asked for rather than missing its oldest samples for ever.

**The next tree** starts as soon as one is published: the entries of the epoch just published are
hard links to its symlinks, new samples get symlinks (:mod:`.folderview_links`). So an entry costs
one inode however many epochs show it, and disk per epoch is its folders only.

**Crash safety** is the old argument unchanged: the tree is complete under a temporary name before
the one rename that shows it, and the manifest is in place before that rename; ``kill -9`` at any
moment leaves either the old epochs or the new one, plus temporary names that
:meth:`FolderPublisher.recover` removes (the ahead tree among them: it is built again from the
store after a restart). The manifest body kept ahead is memory only: nothing of it is on disk
before the cut.
"""

from __future__ import annotations

import bisect
import logging
import time
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path

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
from epochfs.sidecar.store import AdmittedSample, EpochExtent, Meta, object_name
from epochfs.sidecar.store.reader import FolderReader
from epochfs.torchclient.layout import MANIFEST_MAGIC, epoch_name
from epochfs.torchclient.publish import DIR_MODE

log = logging.getLogger("epochfs.folderview")

BUDGET_SECONDS = 5.0
"""The epoch budget the set is trimmed by is read again this often (a read of the index)."""


class AheadTree(BuiltAhead):
    """The next cut's sample set, its manifest body and its tree under a temporary name.

    Members are kept in admission order in flat arrays (id, size) with their manifest line and
    object name; ``_start`` is the predicted front of the next cut. About 0.25 KB of memory per
    entry (the line, the object name, the body's page slot)."""

    def __init__(self, *, store: FolderReader, folder: Path, link_root: Path, temp_prefix: str) -> None:
        super().__init__(store=store, folder=folder, link_root=link_root, temp_prefix=temp_prefix)
        self._ids = array("q")
        self._sizes = array("q")  # -1: gone from the store
        self._lines: list[bytes | None] = []  # None: not shown (fuse.treebuild's rule)
        self._objs: list[str] = []
        self._linked = bytearray()
        self._start = 0  # members below left the next epoch (the front)
        self._holes = 0  # members from _start marked gone (taken out of the store)
        self._pos = 0  # members below are linked (or skipped) in the current tree
        self._hi = 0  # the highest sample id read
        self._body = ManifestBody()  # the manifest lines of the members shown from _start
        self._bytes = 0  # sizes of the members from _start
        self._shown_bytes = 0
        self._unshown = 0  # members from _start not shown (held by the store, left out of the tree)
        self._base: tuple[Path, EpochExtent] | None = None  # the published epoch links are made from
        self._budget = 1
        self._budget_at = -1e18
        self._trimmed: tuple[int, int] | None = None  # (lowest id, budget) of the budget's trims

    # ------------------------------------------------------------------ the set
    def _budget_now(self) -> int | None:
        """The bytes the next cut may hold, as far as the tree can tell; None while the sampler
        has not configured the store: its defaults (capacity 1) would trim every sample away,
        for good, on a fresh cache. Never below the last epoch's bytes (shown, or linked from):
        a cut with nothing left to fetch holds the whole cache, beyond the epoch budget."""
        if time.monotonic() - self._budget_at > BUDGET_SECONDS:
            if self.store.meta(Meta.CAPACITY) is None:  # not configured yet: not kept either
                return None
            policy = self.store.policy()
            if policy.schedule is not None:  # its epochs are windows: .folderview_window's
                raise Tainted("the store is in schedule mode")
            self._budget = policy.epoch_budget
            self._budget_at = time.monotonic()
        return self._budget if self._base is None else max(self._budget, self._base[1].bytes)

    def pending(self) -> bool:
        """Linking is left to do (the publisher steps again at once)."""
        return self._links is None or self._pos < len(self._ids)

    def _pull(self, upto: int | None = None, *, trim: bool = True) -> None:
        """Read the samples admitted since the last pull (all, or up to id ``upto``) and drop
        members the store no longer holds below its lowest id; ``trim``: and those a cut made
        now would leave out, beyond the budget. Members a smaller budget trimmed are pulled again
        when it grew (the sampler restarted with a larger ``--capacity``): they would be missed
        by every later cut."""
        lo, hi = self.store.sample_id_bounds()
        if hi < self._hi:  # the index was replaced: start over
            raise Tainted("the index was replaced")
        self._drop_front(lambda i: self._ids[i] < lo)
        while upto is None or self._hi < upto:
            rows = self.store.samples_after(self._hi, limit=CHUNK)
            self._take(rows)
            if rows:
                self._hi = rows[-1].id
            if len(rows) < CHUNK:
                break
        budget = self._budget_now() if trim else None
        if budget is None:
            return
        if self._trimmed is not None and budget > self._trimmed[1]:
            self._refill(max(lo, self._trimmed[0]))
            self._trimmed = None
        low = self._drop_front(lambda i: self._bytes > budget)  # the newest within the budget
        if low is not None:
            self._trimmed = (low if self._trimmed is None else min(low, self._trimmed[0]), budget)

    def _take(self, rows: Sequence[AdmittedSample]) -> None:
        """Append ``rows`` (ids above every member's) as members."""
        shown: list[bytes] = []
        for s in rows:
            self._ids.append(s.id)
            self._sizes.append(s.size)
            obj = object_name(s.sid)
            line = self._line(s.path, s.size, s.checksum, obj)
            if line is not None:
                shown.append(line)
                self._shown_bytes += s.size
            else:
                self._unshown += 1
            self._lines.append(line)
            self._objs.append(obj)
            self._linked.append(0)
            self._bytes += s.size
        self._body.add(shown)

    def _refill(self, first: int) -> None:
        """Pull again the samples the store holds from id ``first`` up to the front (members the
        front left that a cut now holds): put before the members, linked by the next steps."""
        front = self._ids[self._start] if self._start < len(self._ids) else self._hi + 1
        rows: list[AdmittedSample] = []
        after = first - 1
        while after + 1 < front:
            chunk = self.store.samples_after(after, limit=CHUNK)
            rows += [s for s in chunk if s.id < front]
            if len(chunk) < CHUNK or chunk[-1].id >= front:
                break
            after = chunk[-1].id
        if not rows:
            return
        s = self._start
        kept = (self._ids[s:], self._sizes[s:], self._lines[s:], self._objs[s:], self._linked[s:])
        self._ids, self._sizes = array("q"), array("q")
        self._lines, self._objs, self._linked = [], [], bytearray()
        self._take(rows)
        self._ids += kept[0]
        self._sizes += kept[1]
        self._lines += kept[2]
        self._objs += kept[3]
        self._linked += kept[4]
        self._start = self._pos = 0  # _link passes over the members linked already
        log.debug("pulled %d sample(s) below the front again", len(rows))

    def _drop_front(self, due: Callable[[int], bool]) -> int | None:
        """Members leave the front while ``due``; returns the lowest id that left (None: none)."""
        removed: list[bytes] = []
        low = None
        while self._start < len(self._ids) and due(self._start):
            low = self._ids[self._start] if low is None else low
            if self._sizes[self._start] < 0:
                self._holes -= 1
            else:
                removed += self._leave(self._start, hole=False)
            self._start += 1
        self._body.remove(removed)
        if self._start > 4096 and self._start * 2 > len(self._ids):
            self._compact()
        return low

    def _leave(self, i: int, *, hole: bool = True) -> list[bytes]:
        """Member ``i`` leaves the set: unlinked, its line to remove from the body; ``hole``: it
        stays in the arrays, marked gone (not at the front)."""
        if self._sizes[i] < 0:
            return []
        self._holes += hole
        line = self._lines[i]
        self._bytes -= self._sizes[i]
        if line is not None:
            self._shown_bytes -= self._sizes[i]
        else:
            self._unshown -= 1
        if self._linked[i] and self._links is not None and line is not None:
            self._links.unlink(rel_of(line))
        self._linked[i] = 0
        self._sizes[i] = -1
        return [] if line is None else [line]

    def _compact(self) -> None:
        s = self._start
        self._ids, self._sizes = self._ids[s:], self._sizes[s:]
        self._lines, self._objs, self._linked = self._lines[s:], self._objs[s:], self._linked[s:]
        self._pos = max(0, self._pos - s)
        self._start = 0

    # ------------------------------------------------------------------ the tree
    def _new_tree(self) -> None:
        self._links = LinkTree(self.folder, self.temp_prefix)
        self._links.base = None if self._base is None else self._base[0]
        self._pos = self._start
        self._linked[self._start:] = bytes(len(self._linked) - self._start)

    def advance(self, seconds: float = STEP_SECONDS) -> None:
        """Bring the set up to the store and link for about ``seconds``; :class:`Tainted` when
        the tree cannot stand for the next epoch."""
        self._pull()
        if self._links is None:
            self._new_tree()
        self._link(time.monotonic() + seconds)
        self.sync_dirs()
        if not self.pending():
            self._body.chunks()  # the pages that changed joined now, not at the cut

    def _link(self, deadline: float | None, upto: int | None = None) -> None:
        """Link pending members (up to sample id ``upto``), grouped by folder, until ``deadline``."""
        links = self._links
        assert links is not None
        base = self._base
        links.base = None if base is None else base[0]  # rebased meanwhile: link from the newest
        end = len(self._ids) if upto is None else bisect.bisect_right(self._ids, upto, lo=self._pos)
        while self._pos < end:
            stop = min(end, self._pos + 4096)
            groups: dict[str, list[tuple[str, str, bool]]] = {}
            members: list[int] = []
            for i in range(self._pos, stop):
                line = self._lines[i]
                if self._sizes[i] < 0 or line is None or self._linked[i]:
                    continue
                parent, _, name = rel_of(line).rpartition("/")
                carried = base is not None and base[1].first <= self._ids[i] <= base[1].last
                groups.setdefault(parent, []).append((name, self.prefix + self._objs[i], carried))
                members.append(i)
            self._link_groups(links, groups)
            for i in members:
                self._linked[i] = 1
            self._pos = stop
            if deadline is not None and time.monotonic() > deadline:
                return

    def rebase(self, n: int) -> None:
        """Link from published ``epoch-N`` (one written whole, or found at start: the store's
        epoch, by recovery's check) when it is the newest source: its entries are the symlinks
        of exactly the samples of its range."""
        ext = self.store.epoch_extent(n)
        if ext is not None and (self._base is None or ext.last >= self._base[1].last):
            self._base = (self.folder / epoch_name(n), ext)

    # ------------------------------------------------------------------ the cut
    def publish(self, n: int, *, header: str, write_control: WriteControl) -> bool:
        """Show the ahead tree as ``epoch-N`` if it is the store's epoch ``n``; False (nothing
        changed in the folder) when it cannot be, and the caller writes the epoch whole."""
        ext = self.store.epoch_extent(n)
        if ext is None:
            log.debug("epoch %d: not a range of the admission order: written whole", n)
            return False
        if self._links is None:
            self._new_tree()
        self._pull(upto=ext.last, trim=False)
        self._drop_front(lambda i: self._ids[i] < ext.first)
        self._refill(ext.first)  # a front moved past it (by a budget since grown): linked below
        k = bisect.bisect_right(self._ids, ext.last, lo=self._start)
        late = range(k, len(self._ids))  # admitted after the cut: kept for the next epoch
        late_lines = [x for i in late if self._sizes[i] >= 0 and (x := self._lines[i]) is not None]
        late_bytes = sum(self._sizes[i] for i in late if self._sizes[i] >= 0)
        late_shown = sum(self._sizes[i] for i in late
                         if self._sizes[i] >= 0 and self._lines[i] is not None)
        late_unshown = sum(1 for i in late if self._sizes[i] >= 0 and self._lines[i] is None)
        count = k - self._start - self._holes
        if (count, self._bytes - late_bytes) != (ext.samples, ext.bytes):
            self._resync(ext)  # something in the range left the store (taken out): look
            k = bisect.bisect_right(self._ids, ext.last, lo=self._start)
            count = k - self._start - self._holes
            if (count, self._bytes - late_bytes) != (ext.samples, ext.bytes):
                log.info("epoch %d: the tree built ahead holds %d samples, %d bytes; the epoch %d, %d: "
                         "written whole", n, count, self._bytes - late_bytes, ext.samples, ext.bytes)
                return False
        if not self._spot_check(k):
            return False
        links = self._links
        assert links is not None
        for i in late:  # unlinked from this tree: the next one links them again
            if self._linked[i] and (line := self._lines[i]) is not None:
                links.unlink(rel_of(line))
                self._linked[i] = 0
        self._link(None, upto=ext.last)
        self._pos = min(self._pos, k)
        links.sync_dirs()
        self._body.remove(late_lines)
        try:
            files = len(self._body)
            shown = self._shown_bytes - late_shown
            head = f"{MANIFEST_MAGIC}\tepoch={n}\tfiles={files}\tbytes={shown}{header}\n"
            write_control(n, [head.encode(), *self._body.chunks()])
            links.show(self.folder / epoch_name(n), DIR_MODE)
        finally:
            self._body.add(late_lines)
        if self._unshown > late_unshown:
            log.warning("epoch %d: %d of %d file(s) not shown (unsafe paths, link targets or checksums)",
                        n, self._unshown - late_unshown, count)
        self._base = (self.folder / epoch_name(n), ext)
        self._links = None
        return True

    def _resync(self, ext: EpochExtent) -> None:
        """Members of ``ext``'s range the store no longer holds leave the set."""
        held: set[int] = set()
        after = ext.first - 1
        while after < ext.last:
            rows = self.store.samples_after(after, limit=CHUNK)
            held.update(s.id for s in rows if s.id <= ext.last)
            if len(rows) < CHUNK:
                break
            after = rows[-1].id
        removed: list[bytes] = []
        for i in range(self._start, len(self._ids)):
            if self._ids[i] > ext.last:
                break
            if self._sizes[i] >= 0 and self._ids[i] not in held:
                removed += self._leave(i)
        self._body.remove(removed)

    def _spot_check(self, k: int) -> bool:
        """A few members against the store's rows: same path, same sample id (a replaced index)."""
        if k <= self._start:
            return True
        stride = max(1, (k - self._start) // SPOT_CHECKS)
        picks = [i for i in [*list(range(self._start, k, stride))[:SPOT_CHECKS], k - 1]
                 if self._sizes[i] >= 0]
        for i in picks:
            found = self.store.samples_after(self._ids[i] - 1, limit=1)
            row = found[0] if found and found[0].id == self._ids[i] else None
            line = self._lines[i]
            if row is None or object_name(row.sid) != self._objs[i] or (
                    line is not None and rel_of(line) != row.path):
                log.info("the tree built ahead differs from the store at sample %d: written whole",
                         self._ids[i])
                return False
        return True
