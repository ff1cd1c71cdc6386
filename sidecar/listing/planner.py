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
   discovery found (``folders``), so it is read from each of them, not from its first. Pages start at
   :data:`FIRST_PAGE` keys in each segment and double up to :data:`FULL_PAGE` (S3's most).

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

import bisect
import heapq
import random
import threading
import time
from collections.abc import Sequence

from epochfs.sidecar.listing.keyshape import KeyShape
from epochfs.sidecar.listing.segments import (
    FIRST_PAGE,
    FULL_PAGE,
    GALLOP_PAGE,
    GALLOP_REACH,
    MAX_SEGMENTS,
    MAX_SEGMENTS_PER_SPAN,
    OPEN_END_REACH,
    SHAPE_KEYS,
    SPLIT_AT,
    Segment,
    SpanState,
    relative,
)
from epochfs.sidecar.store.catalog import Part

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
        self._folders = sorted(folders)
        """The folders the discovery found where it cut them into ranges (more than a span each):
        a range's segments are split at its folders' starts first (:meth:`_folder_split`)."""
        self.rng = rng or random.Random()
        self._lock = threading.Lock()
        self._spans: list[SpanState] = []
        self._untouched: list[int] = []
        self._heap: list[tuple[int, float, float, int, int]] = []
        self._next_part = max((p.part for p in parts), default=-1) + 1
        self._open = 0
        self._reached = 0
        self._listed = 0
        self._skew_at: tuple[float, float] | None = None
        """When the skew was last computed, and its value (:meth:`_skew_now`)."""
        self._unbounded = 0
        """Spans whose open end (the segment with no stop) is not done: counted as pages are
        recorded, for :meth:`_ends_found` at every commit (a pass over 10,000 spans cost ~11 ms)."""
        self._rest = 0.0
        """The sum of the spans' ``rest``: what :meth:`progress` shows without a pass over them."""
        for p in parts:
            if not p.done:
                span = SpanState(len(self._spans), p.prefix)
                if self._folders and p.stop is not None:
                    lo = bisect.bisect_left(self._folders, p.start) if p.start else 0
                    span.folders = (lo, bisect.bisect_left(self._folders, p.stop))
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
    def take(self) -> Segment | None:
        """The segment to read a page of next, marked busy (a split of a segment is committed
        with its first page: ``seg.parent``); None while every open segment is busy."""
        with self._lock:
            while self._untouched:
                span = self._spans[self._untouched.pop()]
                seg = span.segments[0]
                if seg.open and not seg.busy:
                    seg.busy = True
                    return seg
            held = []
            chosen = None
            while self._heap and chosen is None:
                entry = heapq.heappop(self._heap)
                span = self._spans[entry[-1]]
                if entry[-2] != span.version:
                    continue
                chosen = self._choose(span)
                if chosen is not None:
                    chosen.pending = chosen.page
                    span.pending += chosen.page
                    self._push(span)  # its share with the page being read counted in
                elif any(s.open for s in span.segments):
                    held.append(entry)
            for entry in held:
                heapq.heappush(self._heap, entry)
            return chosen

    def _choose(self, span: SpanState) -> Segment | None:
        free = [s for s in span.segments if s.open and not s.busy]
        if not free:
            return None
        tail = next((s for s in free if s.part.stop is None), None)
        if tail is not None:  # the span's end is unknown: gallop
            # ... at most to the shape's last number: a horizon past it cannot be split at, and
            # the tail was then read page after page from its first names (a flat bucket of 1M
            # keys: the keys listed in 30 s were its first 47%, five deciles of ten).
            seg, point = tail, min(self._horizon(span, GALLOP_REACH), self._number(span, None) - 1)
        else:
            at_folder = self._folder_split(free)
            if at_folder is not None:
                seg, key = at_folder
                child = self._split_at(span, seg, key)
                chosen = child or seg
                chosen.busy = True
                return chosen
            seg = max(free, key=lambda s: self._left(span, s) or 0.0)
            left = self._left(span, seg) or 0.0
            point = None
            if left > SPLIT_AT:
                lo = self._after_number(span, seg)
                point = (lo + self._number(span, seg.part.stop)) // 2
        child = self._split(span, seg, point) if point is not None else None
        if child is None and tail is None:
            seg = min(free, key=lambda s: self._listed_share(span, s))
        chosen = child or seg
        chosen.busy = True
        return chosen

    def _listed_share(self, span: SpanState, seg: Segment) -> float:
        """The share of ``seg``'s estimated keys listed so far: the next page of a span that is
        not split further goes to its least listed segment, as spans are chosen. (Chosen by the
        most keys left instead, the segments cut near a flat bucket's start while its end was
        being found, small and read a few pages each, waited while the wide ones were read:
        offline, 1M keys in one span had the first tenth of the key order at 1.7-4.5% of the
        listed keys from 180k listed to 750k, the listed keys 0.27-0.055 from the deciles' mix
        between 70k and 750k; so, 0.16-0.016.)"""
        left = self._left(span, seg)
        total = seg.listed + (left or 0.0)
        return seg.listed / total if total > 0 else 0.0

    def _folder_split(self, free: list[Segment]) -> tuple[Segment, str] | None:
        """The bounded segment holding the most folders' starts past where it has read, and the
        middle one of those starts; None when no segment holds one. A range of folders read from
        its start lists its first folder, then the next: 5,000 folders as 1,024 ranges of about
        five, read so, had 3,021 folders with a listed key when half the keys were listed, and
        epochs drawn then covered 0.56-0.61x a random sample's folders (docs/performance.md)."""
        if not self._folders or not self.splittable:
            return None
        best: tuple[int, Segment, str] | None = None
        for seg in free:
            if seg.part.stop is None:
                continue
            lo = bisect.bisect_right(self._folders, seg.part.after or seg.part.start)
            hi = bisect.bisect_left(self._folders, seg.part.stop)
            if hi > lo and (best is None or hi - lo > best[0]):
                best = (hi - lo, seg, self._folders[(lo + hi) // 2])
        return None if best is None else (best[1], best[2])

    def _split(self, span: SpanState, seg: Segment, point: int) -> Segment | None:
        """Cut ``seg`` at the number ``point`` (None when it cannot be cut there)."""
        if span.shape is None:
            return None
        lo = self._after_number(span, seg)
        if point - lo < 2 or point >= self._number(span, seg.part.stop):
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
        child = Segment(part, span.id, page=GALLOP_PAGE if seg.part.stop is None else FIRST_PAGE,
                        density=seg.density, parent=seg)
        seg.part.stop = key + "\x00"
        seg.busy = True  # until the split is committed
        span.segments.append(child)
        self._open += 1
        return child

    # ------------------------------------------------------------------ estimates
    def _number(self, span: SpanState, key: str | None) -> int:
        assert span.shape is not None
        return span.shape.number(None if key is None else relative(key, span.prefix))

    def _after_number(self, span: SpanState, seg: Segment) -> int:
        after = seg.part.after or seg.part.start
        return self._number(span, after) if after else 0

    def _horizon(self, span: SpanState, reach: float = 1.0) -> int:
        """``reach`` times the span's known extent past its end: where the gallop reads next
        (as far again), or how far an open end is guessed to go (:data:`OPEN_END_REACH`)."""
        if span.low is None or span.high is None:
            return self._number(span, None)
        low, high = self._number(span, span.low), self._number(span, span.high)
        return high + int((high - low) * reach) + 1

    def _left(self, span: SpanState, seg: Segment) -> float | None:
        """Keys estimated left in ``seg`` (None: nothing known); an open end counts as far as
        the horizon."""
        if not seg.open:
            return 0.0
        if span.shape is None:
            return None
        density = seg.density if seg.density is not None else self._span_density(span)
        if density is None:
            return None
        hi = min(self._number(span, seg.part.stop), self._horizon(span, OPEN_END_REACH))
        if seg.part.stop is not None and span.high is not None:
            # The segment holding the span's end: its keys go on past the highest listed one to
            # somewhere before the stop an empty gallop page set, up to GALLOP_REACH times the
            # known extent further: estimated half way there, not all the way (which counted a
            # span whose end the gallop overshot at up to 1 + GALLOP_REACH times its keys).
            high = self._number(span, span.high)
            if high < hi:
                hi = high + (hi - high + 1) // 2
        return max(0.0, density * (hi - self._after_number(span, seg)))

    @staticmethod
    def _span_density(span: SpanState) -> float | None:
        listed, width = span.done_measured
        for seg in span.segments:
            if seg.density and seg.listed > 1:
                listed += seg.listed
                width += seg.listed / seg.density
        return listed / width if width > 0 else None

    def progress(self, pages: Sequence[tuple[Segment, int]] = ()) -> dict[str, int | bool | float]:
        """What this run of the listing knows, as status shows it: keys listed (every shard's),
        keys estimated in all (listed plus the estimates of what is left, where spans have
        estimates; a span not reached yet as the reached ones on average), spans reached of all.
        ``pages``: pages of segments of that many keys about to be committed, counted in."""
        with self._lock:
            listed = self._listed + sum(n for _, n in pages)
            reached = self._reached + len({seg.span for seg, _ in pages
                                           if not self._spans[seg.span].reached})
            # A span not reached yet counts as the reached ones do on average (as its first page
            # before any is): the whole is guessed from the part seen, not from a page a span.
            unreached = len(self._spans) - self._reached
            each = (self._listed + self._rest) / self._reached if self._reached else FIRST_PAGE
            left = self._rest + each * unreached
            first_round = reached == len(self._spans) and self._ends_found()
            return {"listed": listed, "estimated": listed + round(left), "spans": len(self._spans),
                    "spans_reached": reached, "first_round": first_round,
                    "skew": round(self._skew_now(), 4)}

    def _ends_found(self) -> bool:
        """Whether every span's end is found (no open segment reads on past the known keys), where
        pages can start anywhere (a serial source's end is its last page). Part of the first
        round that the fetches and the first cut wait for (``FIRST_ROUND_WAIT``): until a span's
        end is found its size is a guess from its first names (the planner's ``OPEN_END_REACH``),
        and the pace, which divides by the estimated whole, let the first keys through. Measured
        on a flat bucket of 100k keys under load: a first estimate of 2,600 keys let 80 of the
        first 1,700 keys listed (the key space's first 2%) be fetched at once."""
        return not self.splittable or self._unbounded <= 0

    def _skew_now(self) -> float:
        """:meth:`_skew`, computed at most every :data:`SKEW_EVERY` seconds (a pass over every
        span and segment: 10,000 folders cost ~160 ms, and progress is asked at every commit)."""
        now = time.monotonic()
        if self._skew_at is None or now - self._skew_at[0] >= SKEW_EVERY:
            self._skew_at = (now, self._skew())
        return self._skew_at[1]

    def _skew(self) -> float:
        """How far the mix of the keys listed so far is from the dataset's, as the planner
        estimates it: the total-variation distance between the listed keys' shares of the key
        space's pieces and those pieces' estimated shares (0: the listed keys spread as the dataset
        does; 1: disjoint). The pieces: each open segment (its listed keys, its estimate) and what
        each span has finished (listed whole), of the spans reached. A segment's keys are its first
        ones, so this is the spread at the pieces' scale; the fetch order's pace slows while it is
        high (:mod:`epochfs.sidecar.sampler.order`). Spans not reached yet are left out: the
        first round of pages waits for them (``FIRST_ROUND_WAIT``), and counted, thousands of
        folders of a page each held the pace at its floor for the whole first round (5,000
        folders of 20 keys: 24-28 samples in 12 s, 660-710 without)."""
        pieces: list[tuple[float, float]] = []
        unbounded = 0.0
        for span in self._spans:
            if not span.reached:
                continue  # the first round's wait covers these (thousands of folders of a page each)
            if ((self.splittable or self.streams_in_key_order)
                    and any(s.open and s.part.stop is None for s in span.segments)):
                unbounded += span.listed
            elif span.folders[1] - span.folders[0] > 1 and any(s.open for s in span.segments):
                # A range of folders whose keys are listed from some of them: the rest are not
                # known to exist in any size yet, so its listed keys count as off by the share of
                # its folders not reached (5,000 folders as 1,024 ranges: the first round lists
                # the first folder of each, and the skew said 0.05 while the listed keys were 0.8
                # from the folder mix).
                lo, hi = span.folders
                unbounded += span.listed * (1.0 - len(span.folders_reached) / (hi - lo))
            open_listed = 0
            for seg in span.segments:
                if seg.open:
                    left = self._left(span, seg)
                    open_listed += seg.listed
                    pieces.append((seg.listed, seg.listed + (left if left is not None else seg.listed)))
            done = span.listed - open_listed
            if done > 0:
                pieces.append((done, done))
        listed = sum(k for k, _ in pieces)
        total = sum(n for _, n in pieces)
        if listed <= 0 or total <= 0:
            return 1.0
        # A span whose end is not found yet has a size that is a guess (its first names times
        # OPEN_END_REACH): its listed keys' share of the whole is unknown, counted as off by all of
        # it. Measured at 1M keys in 1,000 skewed folders: while the gallops ran the skew said 0.07
        # where the listed keys were 0.67-0.78 from the folder mix, and the samples fetched then
        # (2,900 by 10 s) kept every later epoch 3.6-5.3x a random sample's mix. A stream read in
        # key order (``streams_in_key_order``) is counted alike until its end: what is read of an
        # S3 Inventory's data file is its first keys, whatever its estimate says.
        return max(unbounded / listed, 0.5 * sum(abs(k / listed - n / total) for k, n in pieces))

    def _push(self, span: SpanState) -> None:
        """Queue ``span`` by its priority: an unknown end first, then the least listed share."""
        left = [self._left(span, s) for s in span.segments if s.open]
        rest = sum(x or 0.0 for x in left)
        self._rest += rest - span.rest
        span.rest = rest
        if not left:
            return
        span.version += 1
        unbounded = any(s.open and s.part.stop is None for s in span.segments)
        total = span.listed + rest
        share = min(1.0, (span.listed + span.pending) / total) if total > 0 else 0.0
        heapq.heappush(self._heap, (0 if unbounded else 1, share, -rest, span.version, span.id))

    # ------------------------------------------------------------------ learning
    def record(self, seg: Segment, keys: list[str]) -> None:
        """A page of ``seg`` is committed (``seg.part`` carries its new resume point and done
        flag; a split, with the segment it was cut from)."""
        with self._lock:
            span = self._spans[seg.span]
            seg.busy = False
            span.pending -= seg.pending
            seg.pending = 0
            if not span.reached:
                span.reached = True
                self._reached += 1
            if seg.parent is not None:
                seg.parent.busy = False
                seg.parent = None
            if keys:
                lo, hi = span.folders
                if hi - lo > 1:  # the folders the page's keys lie in (a page is contiguous keys)
                    first = bisect.bisect_right(self._folders, keys[0], lo, hi) - 1
                    last = bisect.bisect_right(self._folders, keys[-1], lo, hi) - 1
                    span.folders_reached.update(range(max(lo, first), last + 1))
                seg.listed += len(keys)
                span.listed += len(keys)
                self._listed += len(keys)
                seg.first = seg.first or keys[0]
                seg.last = keys[-1]
                if span.learnt < SHAPE_KEYS:  # every 8th key of a page, its first and its last
                    sample = [*keys[::8], keys[-1]]
                    span.learnt += len(sample)
                    span.shape = KeyShape.learn((relative(k, span.prefix) for k in sample), span.seen)
                span.low = keys[0] if span.low is None else min(span.low, keys[0])
                span.high = keys[-1] if span.high is None else max(span.high, keys[-1])
                if seg.listed > 1 and seg.first is not None:
                    width = self._number(span, seg.last) - self._number(span, seg.first)
                    seg.density = (seg.listed - 1) / width if width > 0 else seg.density
                seg.page = min(FULL_PAGE, max(FIRST_PAGE, seg.page * 2))
            if seg.part.done:
                self._open -= 1
                if seg.part.stop is None:  # the span's open end (one a span: a split keeps it)
                    self._unbounded -= 1
                if len(span.segments) > 1:  # a span's done segments would pile up over a long listing
                    span.segments.remove(seg)
                    if seg.density and seg.listed > 1:  # what it measured stays in the span's density
                        measured, numbers = span.done_measured
                        span.done_measured = (measured + seg.listed, numbers + seg.listed / seg.density)
            self._push(span)


__all__ = ["FIRST_PAGE", "FULL_PAGE", "GALLOP_PAGE", "SKEW_EVERY", "Planner", "Segment"]
