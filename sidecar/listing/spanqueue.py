"""The spans the listing's planner (:mod:`.planner`) has reached, queued by the priority of their
next page: a span whose end is unknown first (its gallop), then the least listed share of its
estimated keys; a bounded span well ahead of the least listed one waits while that one has every
segment busy (``HOLD_AHEAD``). Apart from the planner's choice of a page inside a span, which the
queue is handed (:meth:`SpanQueue.take`), and from its lock, which guards the queue too."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from epochfs.sidecar.listing.ranges import unbounded
from epochfs.sidecar.listing.segments import HOLD_AHEAD, HOLD_SLACK, Segment, SpanState


class SpanQueue:
    """The reached spans by the priority of their next page (:meth:`push`); an entry whose span
    was queued again since (its ``version``) is stale and skipped. Not thread-safe: the planner
    calls it under its lock."""

    def __init__(self, left: Callable[[SpanState, Segment], float | None]) -> None:
        """``left``: the planner's estimate of a segment's keys left (:func:`.keys_left`, bounded
        in a range by the keys its folders held so far)."""
        self._left = left
        self._heap: list[tuple[int, float, float, int, int]] = []
        self.rest = 0.0
        """The sum of the spans' ``rest``: what :meth:`.Planner.progress` shows without a pass over them."""

    def push(self, span: SpanState) -> None:
        """Queue ``span`` by its priority: an unknown end first, then the least listed share. A
        range of folders of unknown size (:func:`.ranges.unsized`) counts as an unknown end: read
        by its listed share, such a range waited behind the large folders' pages, and the skew
        stayed undivided while any did: 2,500 folders as ranges held the epochs at 33-63 samples
        for 32 s (docs/performance.md, "Fairness")."""
        left = [self._left(span, s) for s in span.segments if s.open]
        rest = sum(x or 0.0 for x in left)
        self.rest += rest - span.rest
        span.rest = rest
        span.version += 1  # a span read to its end too: its queued entry must not set the hold's least
        if not left:
            return
        open_end = unbounded(span)
        total = span.listed + rest
        share = min(1.0, (span.listed + span.pending) / total) if total > 0 else 0.0
        heapq.heappush(self._heap, (0 if open_end else 1, share, -rest, span.version, span.id))

    def take(self, spans: Sequence[SpanState],
             choose: Callable[[SpanState], Segment | None]) -> Segment | None:
        """The segment ``choose`` (the planner's choice inside a span, its page counted as
        pending) gives the first span by priority, that span queued again with its page counted
        in; None while the spans first in line have every segment busy (they stay queued)."""
        held = []
        chosen = None
        least: float | None = None
        while self._heap and chosen is None:
            entry = heapq.heappop(self._heap)
            span = spans[entry[-1]]
            if entry[-2] != span.version:
                continue
            if entry[0] == 1:  # bounded: its share against the least listed bounded span's
                if least is None:
                    least = entry[1]
                elif entry[1] > least * HOLD_AHEAD + HOLD_SLACK:
                    held.append(entry)  # the spans behind it have every segment busy: wait
                    break
            chosen = choose(span)
            if chosen is not None:
                self.push(span)  # its share with the page being read counted in
            elif any(s.open for s in span.segments):
                held.append(entry)
        for entry in held:
            heapq.heappush(self._heap, entry)
        return chosen


__all__ = ["SpanQueue"]
