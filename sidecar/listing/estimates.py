"""What the listing's planner (:mod:`.planner`) reports of the whole listing as status shows it
(its progress and skew). The planner chooses the pages and keeps the counters under its lock;
these are the sums made with them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from epochfs.sidecar.listing.ranges import unbounded
from epochfs.sidecar.listing.segments import FIRST_PAGE, Segment, SpanState
from epochfs.sidecar.listing.skew import epoch_cap, listing_skew


def listing_progress(spans: Sequence[SpanState], *, listed: int, reached: int, rest: float,
                     pages: Sequence[tuple[Segment, int]], ends_found: bool,
                     skew: tuple[float, int | None],
                     weighed: Sequence[SpanState] = ()) -> dict[str, Any]:
    """What this run of the listing knows (:meth:`.Planner.progress`): keys listed (every
    shard's), keys estimated in all (listed plus ``rest``, the estimates of what is left, where
    spans have estimates; a span not reached yet as the reached ones on average), spans reached
    of all, whether the first round is over, ``skew`` (:func:`skew_and_fair`), and the
    ``weights`` of the folders ``weighed`` (:func:`folder_weights`).

    ``listed``, ``reached``: the planner's counts of the keys committed and the spans reached.
    ``pages``: pages of segments of that many keys about to be committed, counted in.
    ``ends_found``: whether every span's end is found (no open segment reads on past the known
    keys), where pages can start anywhere (a serial source's end is its last page). Part of the
    first round that the fetches and the first cut wait for (``FIRST_ROUND_WAIT``): until a
    span's end is found its size is a guess from its first names (``OPEN_END_REACH``), and the
    pace, which divides by the estimated whole, let the first keys through. Measured on a flat
    bucket of 100k keys under load: a first estimate of 2,600 keys let 80 of the first 1,700 keys
    listed (the key space's first 2%) be fetched at once."""
    now_listed = listed + sum(n for _, n in pages)
    now_reached = reached + len({seg.span for seg, _ in pages if not spans[seg.span].reached})
    # A span not reached yet counts as the reached ones do on average (as its first page before
    # any is): the whole is guessed from the part seen, not from a page a span.
    unreached = len(spans) - reached
    each = (listed + rest) / reached if reached else FIRST_PAGE
    left = rest + each * unreached
    first_round = now_reached == len(spans) and ends_found
    return {"listed": now_listed, "estimated": now_listed + round(left), "spans": len(spans),
            "spans_reached": now_reached, "first_round": first_round,
            "skew": round(skew[0], 4), "fair_cap": skew[1], "weights": folder_weights(weighed)}


WEIGHTS = 32
"""Folders whose listed share the fetch order is told at most (:func:`weighed_spans`)."""
WEIGHT_MIN = 1000
"""Estimated keys below which a folder is not among them: a folder that small is listed whole in
a page or two, and its share is its keys listed soon enough."""
WEIGHT_LISTED = 0.9
"""The listed share of its estimate from which a folder is no longer among them (drawn as the walk
draws it: its keys listed are nearly all of it)."""


def weighed_spans(spans: Sequence[SpanState]) -> list[SpanState]:
    """The largest one-folder spans whose size is known (their end found) and whose keys are
    listed behind it (under :data:`WEIGHT_LISTED`), at most :data:`WEIGHTS`: the folders the fetch
    order draws by their estimated share while the listing runs (:mod:`epochfs.sidecar.sampler.earlypicks`).
    A pass over every span: the planner makes it with the skew, at most once a second, and
    reports these spans' counts as they are at each commit (:func:`folder_weights`)."""
    weighed = [span for span in spans if _weighed(span)]
    weighed.sort(key=lambda span: -(span.listed + span.rest))
    return weighed[:WEIGHTS]


def weigh_in(weighed: Sequence[SpanState], span: SpanState) -> list[SpanState]:
    """``weighed`` (:func:`weighed_spans`) with ``span``, whose end was just found, where it is
    among the largest: between the planner's passes over every span, a large folder is drawn by
    its size from the commit that finds its end on."""
    if span in weighed or not _weighed(span):
        return list(weighed)
    return sorted([*weighed, span], key=lambda s: -(s.listed + s.rest))[:WEIGHTS]


def folder_weights(spans: Sequence[SpanState]) -> list[list[object]]:
    """``spans`` (:func:`weighed_spans`) that still are so, as [prefix, keys listed, keys estimated]."""
    return [[span.prefix, span.listed, round(span.listed + span.rest)] for span in spans if _weighed(span)]


def _weighed(span: SpanState) -> bool:
    if span.folders[1] - span.folders[0] > 1 or not span.prefix or span.left_out or unbounded(span):
        return False
    total = span.listed + span.rest
    return total >= WEIGHT_MIN and span.listed < WEIGHT_LISTED * total and any(s.open for s in span.segments)


def skew_and_fair(spans: Sequence[SpanState], left_of: Callable[[SpanState, Segment], float | None], *,
                  ends_unknown: bool, in_key_order: bool = True) -> tuple[float, int | None]:
    """:func:`.listing_skew` of ``spans``, with the planner's estimates of the keys left
    (``left_of``), and the samples an epoch drawn from them may hold (:func:`.epoch_cap`;
    None: as many as the skew allows; ``in_key_order``: each segment's keys are listed from its
    start). A pass over every span and segment, so the planner keeps it for ``SKEW_EVERY``
    seconds."""
    skew = listing_skew(spans, left_of, ends_unknown=ends_unknown)
    return skew, epoch_cap(spans, left_of, skew, ends_unknown=ends_unknown, in_key_order=in_key_order)


__all__ = ["folder_weights", "listing_progress", "skew_and_fair", "weigh_in", "weighed_spans"]
