"""What the listing's planner (:mod:`.planner`) reports of the whole listing as status shows it
(its progress and skew). The planner chooses the pages and keeps the counters under its lock;
these are the sums made with them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from epochfs.sidecar.listing.segments import FIRST_PAGE, Segment, SpanState
from epochfs.sidecar.listing.skew import epoch_cap, listing_skew


def listing_progress(spans: Sequence[SpanState], *, listed: int, reached: int, rest: float,
                     pages: Sequence[tuple[Segment, int]], ends_found: bool,
                     skew: tuple[float, int | None]) -> dict[str, int | bool | float | None]:
    """What this run of the listing knows (:meth:`.Planner.progress`): keys listed (every
    shard's), keys estimated in all (listed plus ``rest``, the estimates of what is left, where
    spans have estimates; a span not reached yet as the reached ones on average), spans reached
    of all, whether the first round is over, and ``skew`` (:func:`skew_and_fair`).

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
            "skew": round(skew[0], 4), "fair_cap": skew[1]}


def skew_and_fair(spans: Sequence[SpanState], left_of: Callable[[SpanState, Segment], float | None], *,
                  ends_unknown: bool, in_key_order: bool = True) -> tuple[float, int | None]:
    """:func:`.listing_skew` of ``spans``, with the planner's estimates of the keys left
    (``left_of``), and the samples an epoch drawn from them may hold (:func:`.epoch_cap`;
    None: as many as the skew allows; ``in_key_order``: each segment's keys are listed from its
    start). A pass over every span and segment, so the planner keeps it for ``SKEW_EVERY``
    seconds."""
    skew = listing_skew(spans, left_of, ends_unknown=ends_unknown)
    return skew, epoch_cap(spans, left_of, skew, ends_unknown=ends_unknown, in_key_order=in_key_order)


__all__ = ["listing_progress", "skew_and_fair"]
