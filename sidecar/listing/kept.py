"""The listing's estimates counted in the keys ``--include``/``--exclude`` keep, not every key a page
lists: the dataset is the kept keys, so the planner's progress (keys listed and estimated, the
``estimated_objects`` status shows), its skew and the fetch order's cap are theirs. The planner
chooses its pages by every key listed (a page costs what it lists, kept or not); it counts the
keys each page left out (:attr:`.SpanState.left_out`, :attr:`.Segment.left_out`), and the sums
made for status and the pace read each span and segment scaled by its kept share (:func:`kept_spans`).

Counted over every key, a folder left out whole (``--exclude 'big/**'``, 92% of the keys) whose end
was not found yet counted as a folder larger than the typical one read from its start: the skew at
1, the walk held to one sample, for as long as that folder took to list, while every kept key was
already in the catalog; and status showed keys listed and estimated that are not the dataset's."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from epochfs.sidecar.listing.segments import Segment, SpanState

LeftOf = Callable[[SpanState, Segment], float | None]


def note_left_out(span: SpanState, seg: Segment, left_out: int) -> int:
    """Count ``left_out`` keys of a committed page of ``seg`` as left out by the globs; returns it
    (the planner's total)."""
    if left_out > 0:
        span.left_out += left_out
        seg.left_out += left_out
    return left_out


def kept_share(listed: int, left_out: int) -> float:
    """The share of ``listed`` keys the globs keep (1 where nothing is listed: nothing known)."""
    return 1.0 - min(left_out, listed) / listed if listed > 0 and left_out > 0 else 1.0


def kept_rest(spans: Sequence[SpanState], rest: float) -> float:
    """``rest`` (the keys estimated left in every span) less the share of each span's the globs
    are expected to leave out, as they left out of its keys listed."""
    return rest - sum(span.rest * (1.0 - kept_share(span.listed, span.left_out))
                      for span in spans if span.left_out)


def kept_spans(spans: Sequence[SpanState], left_of: LeftOf) -> tuple[Sequence[SpanState], LeftOf]:
    """``spans`` as the skew and the cap read them, in kept keys: a span with keys left out as a
    copy whose keys listed (its segments', its finished pieces') are the kept ones and whose
    estimates are scaled by its kept share (an open segment's by its own, once it has listed
    keys), and ``left_of`` answering for the copies; ``spans`` and ``left_of`` themselves where
    no key is left out (no globs: the same objects, the same sums)."""
    if not any(span.left_out for span in spans):
        return spans, left_of
    origin: dict[int, tuple[SpanState, Segment, float]] = {}
    out: list[SpanState] = []
    for span in spans:
        if not span.left_out:
            out.append(span)
            continue
        share = kept_share(span.listed, span.left_out)
        segments = []
        for seg in span.segments:
            copy = dataclasses.replace(seg, listed=seg.listed - min(seg.left_out, seg.listed))
            own = kept_share(seg.listed, seg.left_out) if seg.listed > 0 else share
            origin[id(copy)] = (span, seg, own)
            segments.append(copy)
        out.append(dataclasses.replace(
            span, listed=span.listed - min(span.left_out, span.listed), rest=span.rest * share,
            segments=segments, finished=[(start, round(keys * share)) for start, keys in span.finished]))

    def left(view: SpanState, seg: Segment) -> float | None:
        found = origin.get(id(seg))
        if found is None:
            return left_of(view, seg)
        estimate = left_of(found[0], found[1])
        return None if estimate is None else estimate * found[2]

    return out, left


__all__ = ["kept_rest", "kept_share", "kept_spans", "note_left_out"]
