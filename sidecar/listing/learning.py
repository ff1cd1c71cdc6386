"""What the listing's planner (:mod:`.planner`) learns from a committed page and from a segment
read to its end: the span's and segment's counts, the span's key shape and densities (measured
again when the shape changes), and where the finished segments' keys lie. Apart from the
estimates made with them (:mod:`.segments`), which read what these write."""

from __future__ import annotations

import bisect

from epochfs.sidecar.listing.keyshape import KeyShape
from epochfs.sidecar.listing.segments import SHAPE_KEYS, Segment, SpanState, number, relative


def learn_page(span: SpanState, seg: Segment, keys: list[str]) -> None:
    """Count ``keys``, a committed page of ``seg`` (not empty), in ``seg`` and ``span``, and learn
    from it what the estimates read: the span's key shape (from every 8th key of a page, its
    first and its last, up to :data:`.SHAPE_KEYS`), its lowest and highest key, and the
    segment's density (keys per number, over what it has listed)."""
    seg.listed += len(keys)
    span.listed += len(keys)
    seg.first = seg.first or keys[0]
    seg.last = keys[-1]
    if span.learnt < SHAPE_KEYS:
        sample = [*keys[::8], keys[-1]]
        span.learnt += len(sample)
        before = span.shape
        span.shape = KeyShape.learn((relative(k, span.prefix) for k in sample), span.seen)
        if before is not None and before != span.shape:
            remeasure(span)
        if span.learnt >= SHAPE_KEYS:
            span.retired = []  # the shape is final: what was measured in it holds
    span.low = keys[0] if span.low is None else min(span.low, keys[0])
    span.high = keys[-1] if span.high is None else max(span.high, keys[-1])
    if seg.listed > 1 and seg.first is not None:
        width = number(span, seg.last) - number(span, seg.first)
        seg.density = (seg.listed - 1) / width if width > 0 else seg.density


def _density(span: SpanState, listed: int, first: str | None, last: str | None) -> float | None:
    """Keys per number of ``span``'s shape over a stretch from ``first`` to ``last`` holding
    ``listed`` keys (None: too few keys, or no width, to say)."""
    if listed < 2 or first is None or last is None:
        return None
    width = number(span, last) - number(span, first)
    return (listed - 1) / width if width > 0 else None


def remeasure(span: SpanState) -> None:
    """Measure ``span``'s densities again in its new shape: a density is keys per number *of the
    shape it was measured in*, and a page that shows a position new characters widens its alphabet,
    and every number, many times over. Kept, the old densities counted the new numbers at the old
    ones' rate: a folder of ``s000123.bin`` names whose gallop found ``zz006.bin`` (``.`` beside
    digits: 95 characters at two positions where 10) was estimated at 15M keys of 161, forty such
    at 420M, and the fetch order's pace, which divides by the estimated whole, let nothing through
    for 30 s while empty pages split the phantom stretches (docs/listing.md). A segment with no
    stretch of its own (a split before its second key) takes the span's density (None)."""
    for seg in span.segments:
        seg.density = _density(span, seg.listed, seg.first, seg.last)
    measured, width = 0, 0.0
    for listed, first, last in span.retired:
        density = _density(span, listed, first, last)
        if density:
            measured, width = measured + listed, width + listed / density
    span.done_measured = (measured, width)


FINISHED_APART = 256
"""Finished segments a span keeps apart at most (:func:`retire`); past it, neighbours in the key
order with no open segment between them and in one top folder are kept as one. Read whole, two
neighbours say what one says (:func:`.blocks.pieces` spreads a stretch's keys evenly), and the
blocks' cap sorts every finished piece once a second: 20k of them cost 0.3-0.9 s."""


def top_folder(key: str) -> str:
    """The top folder ``key`` lies in ("" for a key at the key space's root: a flat bucket)."""
    head, slash, _ = key.partition("/")
    return head if slash else ""


def retire(span: SpanState, seg: Segment) -> None:
    """Drop ``seg``, read to its end, from ``span`` (a span's done segments would pile up over a
    long listing), keeping what it measured in the span's density and where its keys lie
    (:attr:`SpanState.finished`, merged with its neighbours past :data:`FINISHED_APART`)."""
    span.segments.remove(seg)
    span.finished.append((seg.part.start, seg.listed))
    if len(span.finished) > FINISHED_APART:
        span.finished = _merged(span)
    if seg.density and seg.listed > 1:
        measured, numbers = span.done_measured
        span.done_measured = (measured + seg.listed, numbers + seg.listed / seg.density)
        if span.learnt < SHAPE_KEYS and seg.first is not None and seg.last is not None:
            span.retired.append((seg.listed, seg.first, seg.last))


def _merged(span: SpanState) -> list[tuple[str, int]]:
    """``span``'s finished segments in key order, each run of neighbours with no open segment
    between them, in one top folder, as one (its first start, their keys)."""
    opens = sorted(seg.part.start or seg.first or span.prefix for seg in span.segments)
    out: list[tuple[str, int]] = []
    for start, keys in sorted(span.finished, key=lambda f: f[0] or span.prefix):
        at = start or span.prefix
        if out:
            last = out[-1][0] or span.prefix
            between = bisect.bisect_left(opens, last) < bisect.bisect_right(opens, at)
            if not between and top_folder(last) == top_folder(at):
                out[-1] = (out[-1][0], out[-1][1] + keys)
                continue
        out.append((start, keys))
    return out


__all__ = ["FINISHED_APART", "learn_page", "remeasure", "retire", "top_folder"]
