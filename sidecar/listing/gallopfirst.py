"""Spans whose ends are looked for before the first round's remaining first pages.

A fair first sample is drawn by the folders' sizes (:func:`.estimates.folder_weights`), and a
folder's size is known once a gallop's empty page finds its end (:mod:`.planner`, step 2). Read by
the queue's priority, a large folder's gallops waited for the whole first round: 2,000 folders of
Zipf 2.0 sizes, 61% of the keys in one, had that folder's first page only (0.6% of the keys listed)
when epoch 0 was cut, and epoch 0's one sample missed it in 27 of 28 sampling orders. A span whose
first page comes back full during the first round gallops first; after the round, every span goes
by the queue's priority (galloping every full span first read the large folders ahead of the rest:
200k keys in 2,500 folders of Zipf 1.3 sizes, 45% listed, held the skew's cap at 194 samples
where it is 214 so: ``tests/sampler/test_listing_range_folders_pace.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from epochfs.sidecar.listing.segments import Segment, SpanState


class GallopFirst:
    """The spans that gallop first, in the order their full first pages came back."""

    def __init__(self) -> None:
        self._spans: dict[int, None] = {}

    def note(self, span: SpanState, *, first_round: bool) -> None:
        """``span``'s page came back full with its end not found: it gallops first while the
        first round runs (``first_round``)."""
        if first_round:
            self._spans[span.id] = None

    def take(self, spans: Sequence[SpanState],
             choose: Callable[[SpanState], Segment | None]) -> tuple[SpanState, Segment] | None:
        """The first of these spans whose open end is free, and the segment ``choose`` takes of it
        (None: none); a span whose end is found leaves."""
        for sid in list(self._spans):
            span = spans[sid]
            tails = [s for s in span.segments if s.open and span.is_tail(s)]
            if not tails:
                del self._spans[sid]
                continue
            if any(s.busy for s in tails):
                continue
            chosen = choose(span)
            if chosen is not None:
                return span, chosen
        return None
