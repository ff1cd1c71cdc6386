"""Which stretch of the key space the listing reads next, so what is listed is a fair sample early.

The sampler draws uniformly from what is listed (the rank order of the listed keys, owed keys
first: :mod:`epochfs.sidecar.sampler.order`), so an epoch cut while the listing runs is as fair as
the listed set is. A listing that reads each folder page after page from its first name lists the
first names first; one that reads spans round-robin lists small folders completely while large
ones are still at their start. The planner keeps the listed set spread instead:

1. **One round first, in random order.** Every span (a folder found by the discovery) gets one
   small page (:data:`FIRST_PAGE` keys) before any span gets a second, in a random order of spans,
   so a cut after part of that round still draws from folders all over the key space.
2. **Then find where each span ends.** S3 cannot list backwards, so a span's size is unknown until
   a page past its end comes back empty. A :class:`~.keyshape.KeyShape` turns the span's keys into
   numbers; the planner *gallops*: it splits the span's open end at as far again as its known
   extent (``StartAfter`` takes any string) and reads a small page there, doubling the known extent
   with each page that finds keys, until one finds none. Those pages are real keys from far inside
   the folder, not only its first names; the one empty page per span is the price of its size.
3. **Then the least covered span.** With its end bounded, a segment's keys left are its density
   (keys per number, from its own pages) times the numbers left. The next page goes to the span
   whose listed share of its estimated size is the smallest, so the listed mix follows the spans'
   sizes rather than their page counts (the pages being read count in that share from when they
   are taken, not from their commit: listers read on while earlier pages wait for their group
   commit, and a span counted at commit only got every page taken meanwhile); inside it, a
   segment estimated to hold more than :data:`SPLIT_AT` keys is split at its estimated middle and
   read from there, so a span's pages spread across its whole range, and once no split is made
   the page goes to the span's least listed segment (by the same share); a range of several folders
   (more folders than spans) is split at its folders' starts first, given the folders the
   discovery found (``folders``), so it is read from each of them, not from its first, and a folder
   a range's page reads on into is made a span of its own (:meth:`Planner._promote`), its end
   galloped for as step 2 says (a range's stops are folders' starts, not where a folder's keys
   end). Pages start at
   :data:`FIRST_PAGE` keys in each segment and double up to :data:`FULL_PAGE` (S3's most), and
   ask at least a :data:`SPAN_PAGES` share of a span whose end is found.
4. **Commits bound the listing, not the remote**, where the index's writes are slower than the
   pages come: a span ahead of its share waits while the least listed one has every segment
   busy (``HOLD_AHEAD``), and no page is handed out while those not committed yet may bring
   :data:`MAX_PENDING` keys, so each commit follows the shares rather than the segment counts.
   Inside a span, so do its segments: one well ahead of the span's share waits while one behind
   is read (:func:`.segments.not_held`), so its stretches finish together.

Estimates decide only the order. Every segment is read to its end with contiguous pages, and a
split cuts a segment in two that exactly partition it (the lower keeps the keys up to the split
point, the upper lists after it), committed with the upper one's first page; so no key is listed
twice or left out whatever the estimates say (``tests/sampler/test_listing_planner.py`` checks
that over random key spaces). While a split's first page is read, the segment it was cut from
waits; a failed page ends the listing run, and the next run starts from what the index holds (a
split not committed never happened). A restart takes each remaining segment as a span of its own
(the estimates live in memory).
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from epochfs.sidecar.listing.estimates import listing_progress, skew_and_fair, weigh_in, weighed_spans
from epochfs.sidecar.listing.gallopfirst import GallopFirst
from epochfs.sidecar.listing.kept import kept_rest, kept_spans, note_left_out
from epochfs.sidecar.listing.learning import learn_page, retire
from epochfs.sidecar.listing.ranges import FolderRanges, promoted_span, unbounded
from epochfs.sidecar.listing.segments import (
    FIRST_PAGE,
    FULL_PAGE,
    GALLOP_PAGE,
    GALLOP_REACH,
    MAX_PENDING,
    MAX_SEGMENTS,
    MAX_SEGMENTS_PER_SPAN,
    SPAN_PAGES,
    SPLIT_AT,
    Segment,
    SpanState,
    after_number,
    far_apart,
    horizon,
    listed_share,
    not_held,
    number,
    stop_number,
)
from epochfs.sidecar.listing.skew import skew_as_of
from epochfs.sidecar.listing.spanqueue import SpanQueue
from epochfs.sidecar.store.listings import Part

SKEW_EVERY = 1.0
"""Seconds between computations of the listing's skew (the fetch order's pace reads it)."""


class Planner:
    """Hands the listers segments to read (:meth:`take`) and learns from each committed page
    (:meth:`record`). Thread-safe; no I/O."""

    def __init__(self, parts: list[Part], *, splittable: bool, rng: random.Random | None = None,
                 streams_in_key_order: bool = False, folders: Sequence[str] = ()) -> None:
        """``streams_in_key_order``: the spans are streams read from their first record (not
        ``splittable``) whose records come in key order, or in an order nobody promised to be
        random (a ``file://`` walk, a ``gs://`` listing, a key list, an S3 Inventory's data files,
        an index written sorted): what is read of one so far is its first keys, so its listed
        keys count in :meth:`_skew` as a span whose end is not found until it is read to its end.
        False for an ``epochfs index`` written shuffled, whose every prefix is a uniform sample."""
        self.splittable = splittable
        self.streams_in_key_order = streams_in_key_order and not splittable
        self._ranges = FolderRanges(folders)
        """The folders the discovery found where it cut them into ranges (more than a span each):
        a range's segments are split at its folders' starts first, and a folder a segment reads on
        into is made a span of its own (:meth:`_promote`)."""
        self._left = self._ranges.keys_left
        """:func:`.keys_left`, bounded in a range by the keys its folders held so far."""
        self.rng = rng or random.Random()
        self._lock = threading.Lock()
        self._spans: list[SpanState] = []
        self._untouched: list[int] = []
        self._due: list[tuple[Segment, list[str]]] = []
        """Segments of ranges whose last page came back full, and that page: weighed at the next
        :meth:`take` (:meth:`_promote`; stale once a later page is recorded)."""
        self._ready: list[Segment] = []
        """Handed out after the first round: a range's rest cut off as a folder of it became a span
        (which waits). Before it, each rest's page made the next folder a span, range after range:
        the first round over 834 ranges took most of the listing (docs/performance.md)."""
        self._gallop_first = GallopFirst()
        """Spans whose ends are looked for before the first round's remaining first pages."""
        self._freed: deque[int] = deque()
        """Folders made spans whose segment is free again (:meth:`_promote`): read first."""
        self._next_part = max((p.part for p in parts), default=-1) + 1
        self._open = 0
        self._pending = 0
        """Keys the pages taken and not committed yet may bring (:data:`MAX_PENDING`)."""
        self._reached = 0
        self._listed = self._left_out = 0  # every key listed; those the globs left out (:mod:`.kept`)
        self._skew_at: tuple[float, tuple[float, int | None], bool] | None = None
        """When the skew was last computed, its value, and whether every span was reached then."""
        self._weighed: list[SpanState] = []
        """The folders drawn by their estimated share, found with the skew (:func:`.weighed_spans`)."""
        self._unbounded = 0
        """Spans whose open end (the segment with no stop) is not done: counted as pages are recorded,
        for :meth:`progress`'s first round at every commit (a pass over 10,000 spans cost ~11 ms)."""
        self._queue = SpanQueue(self._left)
        """The reached spans by the priority of their next page (:meth:`_next_page`)."""
        for p in parts:
            if not p.done:
                span = SpanState(len(self._spans), p.prefix)
                span.folders = self._ranges.of_part(p)
                span.segments.append(Segment(p, span.id))
                self._spans.append(span)
                self._unbounded += p.stop is None
                self._untouched.append(span.id)
                self._open += 1
        self.rng.shuffle(self._untouched)

    @property
    def open_segments(self) -> int:
        return self._open

    # ------------------------------------------------------------------ choosing
    def take(self, *, first_only: bool = False) -> Segment | None:
        """The segment to read a page of next, marked busy (a split of a segment is committed
        with its first page: ``seg.parent``); None while every open segment is busy.
        ``first_only``: the first page of a span not reached yet or None, for good once every
        span's first page is taken (the first round's extra listers)."""
        with self._lock:
            if first_only:
                return self._first_page()
            for seg, keys in self._due:
                span = self._spans[seg.span]
                if seg.last == keys[-1] and (promoted := self._promote(span, seg, keys)) is not None:
                    self._queue.push(promoted)
                    self._queue.push(span)
                    self._gallop_first.note(promoted, first_round=self._reached < len(self._spans))
            self._due.clear()
            chosen = self._gallop_page()
            if chosen is None:
                chosen = self._first_page()
            if chosen is None and self._pending < MAX_PENDING:  # else wait for a commit: MAX_PENDING
                chosen = self._next_page()
            return chosen

    def _gallop_page(self) -> Segment | None:
        """A gallop of a span whose first page came back full (:mod:`.gallopfirst`)."""
        taken = self._gallop_first.take(self._spans, self._choose_counted)
        if taken is None:
            return None
        self._queue.push(taken[0])
        return taken[1]

    def _first_page(self) -> Segment | None:
        """The first page of a span not reached yet (the first round), in the random order."""
        while self._untouched:
            span = self._spans[self._untouched.pop()]
            seg = span.segments[0]
            if seg.open and not seg.busy:
                seg.busy = True
                return seg
        return None

    def _next_page(self) -> Segment | None:
        """A page of a span reached: a folder freed or a range's rest first, then by the heap."""
        while self._freed:  # a folder's end, once the rest of its range is committed
            span = self._spans[self._freed.popleft()]
            chosen = self._choose_counted(span) if any(x.open for x in span.segments) else None
            if chosen is not None:
                self._queue.push(span)
                return chosen
        while self._ready:  # the rest of a range a folder was promoted from (:meth:`_promote`)
            seg = self._ready.pop()
            if seg.open and not seg.busy:
                seg.busy = True
                self._count_pending(self._spans[seg.span], seg)
                return seg
        return self._queue.take(self._spans, self._choose_counted)

    def _count_pending(self, span: SpanState, seg: Segment) -> None:
        """Count ``seg``'s page, taken now, as pending until its commit (:meth:`record`)."""
        seg.pending = seg.page
        span.pending += seg.page
        self._pending += seg.page

    def _choose_counted(self, span: SpanState) -> Segment | None:
        """:meth:`_choose`, its page counted as pending (:meth:`_count_pending`)."""
        chosen = self._choose(span)
        if chosen is not None:
            self._count_pending(span, chosen)
        return chosen

    def _choose(self, span: SpanState) -> Segment | None:
        free = [s for s in span.segments if s.open and not s.busy]
        if not free:
            return None
        tail = next((s for s in free if span.is_tail(s)), None)
        open_end = tail is not None or unbounded(span)  # its size a guess (a split below keeps it so)
        if tail is not None:  # the span's end is unknown: gallop
            # ... at most to the shape's last number: a horizon past it cannot be split at, and
            # the tail was then read page after page from its first names (a flat bucket of 1M
            # keys: the keys listed in 30 s were its first 47%, five deciles of ten).
            seg, point = tail, min(horizon(span, GALLOP_REACH), number(span, None) - 1)
        else:
            # A range of folders is split at its folders' starts first (:meth:`.FolderRanges.folder_split`).
            at_folder = self._ranges.folder_split(free) if self._ranges and self.splittable else None
            if at_folder is not None:
                seg, key = at_folder
                child = self._split_at(span, seg, key)
                chosen = child or seg
                chosen.busy = True
                return chosen
            others = (self._listed - span.listed, self._queue.rest - span.rest)
            if not open_end and not (free := not_held(span, free, self._left, others)):
                return None  # its segments behind are being read: wait for them (:func:`.not_held`)
            seg = max(free, key=lambda s: self._left(span, s) or 0.0)
            left = self._left(span, seg) or 0.0
            point = None
            if left > SPLIT_AT:
                lo = after_number(span, seg)
                point = (lo + stop_number(span, seg)) // 2
        child = self._split(span, seg, point) if point is not None else None
        if child is None and tail is None:
            seg = min(free, key=lambda s: listed_share(s, self._left(span, s)))
        chosen = child or seg
        if not open_end:  # its end found: see SPAN_PAGES
            least = min((span.listed + span.rest) / SPAN_PAGES, (self._left(span, chosen) or 0.0) / 2)
            chosen.page = max(chosen.page, min(FULL_PAGE, int(least)))
        chosen.busy = True
        return chosen

    def _split(self, span: SpanState, seg: Segment, point: int) -> Segment | None:
        """Cut ``seg`` at the number ``point`` (None when it cannot be cut there)."""
        if span.shape is None:
            return None
        lo = after_number(span, seg)
        if point - lo < 2 or point >= stop_number(span, seg):
            return None
        return self._split_at(span, seg, span.prefix + span.shape.key(point))

    def _split_at(self, span: SpanState, seg: Segment, key: str) -> Segment | None:
        """Cut ``seg`` after ``key``: the lower part keeps the keys up to it, a new segment lists
        the keys after it (None when it cannot be cut there)."""
        if (not self.splittable or self._open >= MAX_SEGMENTS
                or sum(s.open for s in span.segments) >= MAX_SEGMENTS_PER_SPAN):
            return None
        after = seg.part.after or seg.part.start
        if key <= after or (seg.part.stop is not None and key + "\x00" >= seg.part.stop):
            return None
        part = Part(self._next_part, seg.part.prefix, key, seg.part.stop)
        self._next_part += 1
        # A gallop's page is small (GALLOP_PAGE): the pages that list the span come once its end
        # is found, by the least listed share.
        child = Segment(part, span.id, page=GALLOP_PAGE if span.is_tail(seg) else FIRST_PAGE,
                        density=seg.density, parent=seg, beyond=seg.beyond)
        seg.part.stop = key + "\x00"
        seg.beyond = None  # past its new stop: known at the child's first page (:meth:`record`)
        seg.busy = True  # until the split is committed
        span.segments.append(child)
        self._open += 1
        return child

    # ------------------------------------------------------------------ estimates
    def progress(self, pages: Sequence[tuple[Segment, int]] = ()) -> dict[str, Any]:
        """What this run of the listing knows, as status shows it (:func:`.listing_progress`).
        ``pages``: pages of segments of that many keys about to be committed, counted in."""
        with self._lock:
            # Every span's end is found once no span's open end is left (:attr:`_unbounded`);
            # a serial source's end is its last page.
            ends_found = not self.splittable or self._unbounded <= 0
            rest = kept_rest(self._spans, self._queue.rest) if self._left_out else self._queue.rest
            return listing_progress(self._spans, listed=self._listed - self._left_out, reached=self._reached,
                                    rest=rest, pages=pages, ends_found=ends_found,
                                    skew=self._skew_now(pages), weighed=self._weighed)

    def _skew_now(self, pages: Sequence[tuple[Segment, int]]) -> tuple[float, int | None]:
        """:meth:`_skew`, computed at most every :data:`SKEW_EVERY` seconds (a pass over every
        span and segment: 10,000 folders cost ~160 ms, and progress is asked at every commit),
        and at once when the last span is reached (:func:`.skew_as_of`: ``pages`` may reach it)."""
        now, whole = time.monotonic(), self._reached >= len(self._spans)
        if self._skew_at is None or now - self._skew_at[0] >= SKEW_EVERY or whole > self._skew_at[2]:
            self._skew_at = (now, self._skew(), whole)
            self._weighed = weighed_spans(self._spans)
        return skew_as_of(self._skew_at[1], self._skew_at[2], self._spans, self._reached, pages)

    def _skew(self) -> tuple[float, int | None]:
        """:func:`.skew_and_fair` of the spans, with this planner's estimates."""
        ends_unknown = self.splittable or self.streams_in_key_order  # and read in key order
        spans, left = kept_spans(self._spans, self._left)  # in the keys the globs keep
        return skew_and_fair(spans, left, ends_unknown=ends_unknown, in_key_order=ends_unknown)

    # ------------------------------------------------------------------ learning
    def record(self, seg: Segment, keys: list[str], left_out: int = 0) -> None:
        """A page of ``seg`` is committed (``seg.part`` carries its new resume point and done
        flag; a split, with the segment it was cut from), ``left_out`` of its ``keys`` by the globs."""
        with self._lock:
            span = self._spans[seg.span]
            seg.busy = False
            span.pending -= seg.pending
            self._pending -= seg.pending
            seg.pending = 0
            if not span.reached:
                span.reached = True
                self._reached += 1
            gallop = seg.parent is not None and seg.parent.span == seg.span and span.is_tail(seg)
            if seg.parent is not None:
                if seg.parent.span != seg.span and self._spans[seg.parent.span].end is not None:
                    self._freed.append(seg.parent.span)
                if seg.parent.span == seg.span:  # the first key past the stop it was cut at
                    seg.parent.beyond = keys[0] if keys else seg.beyond if seg.part.done else None
                seg.parent.busy = False
                seg.parent = None
            if keys:
                span.folders_reached.update(self._ranges.reached(span, keys))
                if span.folders[1] - span.folders[0] > 1:
                    self._ranges.measure(seg, seg.last or "", keys)
                learn_page(span, seg, keys)
                if gallop and far_apart(span, seg.part.start, keys) and keys[0] > (span.cluster or ""):
                    span.cluster = keys[0]  # past names nobody uses: its extent, not the span's
                self._listed += len(keys)
                self._left_out += note_left_out(span, seg, left_out)
                seg.page = min(FULL_PAGE, max(FIRST_PAGE, seg.page * 2))
            end_found = False
            if seg.part.done:
                self._open -= 1
                if span.is_tail(seg):  # the span's open end (one a span: a split keeps it)
                    self._unbounded -= 1
                    end_found = True
                if len(span.segments) > 1:
                    retire(span, seg)
            elif keys and span.folders[1] > span.folders[0]:
                self._due.append((seg, keys))  # weighed at the next take (:meth:`_promote`)
            elif keys and span.is_tail(seg) and self.splittable:
                self._gallop_first.note(span, first_round=self._reached < len(self._spans))
            self._queue.push(span)  # its estimate (``rest``) too
            if end_found:  # weighed at once, not at the next pass: epoch 0 may be cut now
                self._weighed = weigh_in(self._weighed, span)

    def _promote(self, span: SpanState, seg: Segment, keys: list[str]) -> SpanState | None:
        """Make ``seg`` a span of its own when its page, of a range of folders, ends in a folder
        that goes on (:meth:`.FolderRanges.promotion`): a range's stops are folders' starts, not
        where a folder's keys end, so read as part of its range, a folder of 43% of 300k keys was
        estimated at 133 keys after a page of 100 (docs/listing.md). The new span
        (:func:`.promoted_span`) is its prefix, its open end galloped for as any span's; the
        range's rest is cut off first at the next folder's start and read next (:attr:`_ready`),
        and the folder's next page comes first once the rest's first page is committed (:attr:`_freed`)."""
        found = None if seg.busy or not seg.open else self._ranges.promotion(span, seg, keys)
        if found is None:
            return None
        if found.split_at is not None:
            rest = self._split_at(span, seg, found.split_at)
            if rest is None:
                return None
            self._ready.append(rest)
        span.segments.remove(seg)  # its keys listed before this folder stay the range's, as done
        new = promoted_span(len(self._spans), found, seg, keys)
        seg.beyond = None  # a key of the range's, not numbered in the folder's shape
        self._spans.append(new)
        self._reached += 1
        self._unbounded += 1
        return new


__all__ = ["FIRST_PAGE", "FULL_PAGE", "GALLOP_PAGE", "MAX_PENDING", "SKEW_EVERY", "SPAN_PAGES", "Planner",
           "Segment"]
