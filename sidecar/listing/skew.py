"""How far the mix of the keys listed so far is from the dataset's, as the listing's planner
(:mod:`.planner`) estimates it: the skew the fetch order's pace reads
(:mod:`epochfs.sidecar.sampler.order`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from epochfs.sidecar.listing.segments import Segment, SpanState


def listing_skew(spans: Sequence[SpanState], left_of: Callable[[SpanState, Segment], float | None], *,
                 ends_unknown: bool) -> float:
    """How far the mix of the keys listed so far is from the dataset's, as the planner
    estimates it: the total-variation distance between the listed keys' shares of the key
    space's pieces and those pieces' estimated shares (0: the listed keys spread as the dataset
    does; 1: disjoint). The pieces: each open segment (its listed keys, its estimate) and what
    each span has finished (listed whole), of the spans reached. A segment's keys are its first
    ones, so this is the spread at the pieces' scale; the fetch order's pace slows while it is
    high (:mod:`epochfs.sidecar.sampler.order`). Spans not reached yet are left out: the
    first round of pages waits for them (``FIRST_ROUND_WAIT``), and counted, thousands of
    folders of a page each held the pace at its floor for the whole first round (5,000
    folders of 20 keys: 24-28 samples in 12 s, 660-710 without).

    ``left_of``: the planner's estimate of the keys left in an open segment (None: nothing known);
    ``ends_unknown``: a span's open end (the segment that reads on to its end) is not found until
    it is read (a paged source's, galloped; a stream in key order's, read to its end)."""
    pieces: list[tuple[float, float]] = []
    unbounded = 0.0
    for span in spans:
        if not span.reached:
            continue  # the first round's wait covers these (thousands of folders of a page each)
        if ends_unknown and any(s.open and span.is_tail(s) for s in span.segments):
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
                left = left_of(span, seg)
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


__all__ = ["listing_skew"]
