"""How far the mix of the keys listed so far is from the dataset's, as the listing's planner
(:mod:`.planner`) estimates it: the skew the fetch order's pace reads
(:mod:`epochfs.sidecar.sampler.order`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from epochfs.sidecar.listing.blocks import block_fair_samples
from epochfs.sidecar.listing.expected_tv import grouped, largest_fair_sample
from epochfs.sidecar.listing.ranges import unsized
from epochfs.sidecar.listing.segments import Segment, SpanState


def skew_as_of(skew: tuple[float, int | None], whole: bool, spans: Sequence[SpanState], reached: int,
               pages: Iterable[tuple[Segment, int]]) -> tuple[float, int | None]:
    """The skew and fair cap to report (:meth:`.Planner.progress`): ``skew``, computed with every
    span reached (``whole``) or while some were not; or off by all, ``(1.0, None)``, where the
    ``pages`` about to be committed reach the last spans (``reached`` of ``spans`` before them)
    and one of those pages is not the span's last, so its size is unknown. Spans not reached are
    left out of the skew, and the fetch order holds its walk at the skew's floor for them
    (``sidecar/sampler/pace.py: walk_cap``); the skew computed before the last of them was
    reached says nothing of its size, and let the walk run until the next (one folder of 92% of
    the keys, reached last of 301 spans: 326 samples drawn from the other 300 in that second,
    8.5x a random sample's distance). The planner computes it again once the pages are recorded;
    a span listed whole by its first page is of known size, a page at most. So is, in the keys
    the globs keep, a span whose first page they leave out whole: the planner estimates its keys
    left by the share kept (:func:`.kept.kept_rest`), none. Counted unknown, a left-out folder
    reached last held the walk at the skew's floor, 3 samples, with every kept key listed."""
    if whole:
        return skew
    fresh: dict[int, tuple[Segment, int]] = {}
    for seg, kept in pages:
        if not spans[seg.span].reached:
            fresh[seg.span] = (seg, fresh.get(seg.span, (seg, 0))[1] + kept)
    unknown = any(not seg.part.done and kept > 0 for seg, kept in fresh.values())
    return (1.0, None) if unknown and reached + len(fresh) >= len(spans) else skew


def listing_skew(spans: Sequence[SpanState], left_of: Callable[[SpanState, Segment], float | None], *,
                 ends_unknown: bool) -> float:
    """How far the mix of the keys listed so far is from the dataset's, as the planner
    estimates it: the total-variation distance between the listed keys' shares of the key
    space's pieces and those pieces' estimated shares (0: the listed keys spread as the dataset
    does; 1: disjoint). The pieces: each open segment (its listed keys, its estimate) and what
    each span has finished (listed whole), of the spans reached. A segment's keys are its first
    ones, so this is the spread at the pieces' scale; the fetch order's pace slows while it is
    high (:mod:`epochfs.sidecar.sampler.order`), divided by a random sample's spread over the top
    folders (:func:`random_spread`, in units of ten folders', taken at the sample size the cap
    then allows: :func:`_spread_at_cap`). Spans not reached yet are left out: the
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
    if _outgrown(spans, ends_unknown=ends_unknown):
        return 1.0  # a folder already larger than the typical one, its end not found (below)
    tv = 0.5 * sum(abs(k / listed - n / total) for k, n in pieces)
    spread = _spread_at_cap(spans, tv, ends_unknown=ends_unknown)
    return max(unbounded / listed, tv / max(1.0, spread / TEN_FOLDERS))


def fair_samples(spans: Sequence[SpanState], skew: float, *, ends_unknown: bool) -> int | None:
    """The most samples an epoch drawn from the top folders' listed mix may hold and still be
    expected within :data:`.expected_tv.TV_TARGET` times a random sample's distance from their
    estimated mix (:func:`.expected_tv.largest_fair_sample`), at least one, where that is below
    the cap ``skew`` sets (:data:`FAIR_SPREAD`); None where it is not, or the top folders' sizes
    are not known (:func:`_top_counts`). The fetch order holds its walk to it beside the skew's
    cap (:func:`epochfs.sidecar.sampler.pace.walk_cap`), below that cap's floor of 3 samples
    where the listing is that lopsided (1,500 folders of Zipf 1.8 sizes: 3 samples at 8 s from
    three small folders, 2.13x a random sample's TV).

    One while a folder already larger than the typical one is still read towards its end
    (:func:`_outgrown`): its share may be anything, so the sizes are not known, and the skew's
    floor of 3 samples drawn from the other folders was 2.13x a random sample's distance where
    the largest folder holds 45% (1,500 folders of Zipf 1.8 sizes); one sample is about a random
    one's while no folder holds half the keys.

    Why beside the spread's scaling: that one is a large sample's, and over thousands of folders
    of Zipf sizes a few folders listed ahead of their share are most of a small sample's
    distance. 600k keys in 3,000 folders of Zipf 1.45 sizes let 40-90 samples through at 12-16 s
    at 2.3x a random sample's TV; held here, 1.75x (docs/performance.md)."""
    if skew >= 1.0 and _outgrown(spans, ends_unknown=ends_unknown):  # listing_skew's 1 for it
        return 1
    counts = _top_counts(spans, ends_unknown=ends_unknown)
    if counts is None or len(counts) < 2:
        return None
    cap = (FAIR_SPREAD / skew) ** 2 if skew > 0.0 else math.inf
    upto = int(min(cap, sum(k for k, _ in counts.values()), EXPECTED_UPTO))
    fair = _top_fair(counts, upto)
    return None if fair is None or fair >= upto else max(1, fair)


def epoch_cap(spans: Sequence[SpanState], left_of: Callable[[SpanState, Segment], float | None],
              skew: float, *, ends_unknown: bool, in_key_order: bool = True) -> int | None:
    """The most samples the fetch order's walk may hand out while the listing runs, where the
    spans' sizes are known (:func:`_top_counts`; None where they are not: the skew's cap,
    ``(FAIR_SPREAD / skew) ** 2``, holds then), up to the keys listed: the least of the
    expected-distance counts over the top folders (:func:`fair_samples`, taken up to a million
    samples rather than up to the skew's cap) and over blocks of the key order at the scales an
    epoch resolves (:func:`.blocks.block_fair_samples`), at least one. It replaces the skew's cap
    (``status.json``'s ``listing.fair_cap``; :func:`epochfs.sidecar.sampler.pace.walk_cap`),
    so it may be above it: the skew is a distance over the planner's pieces whatever the sample
    size, and a flat bucket or a few top folders listed evenly at the scale of twentieths of
    the key order but unevenly between neighbouring segments (its skew 0.06-0.09 after half its
    keys were listed) were held for seconds, the fetch window idle (400k keys: flat at 1,221
    samples for 6 s, mixed at 321 for 15 s; now 2,349 and 4,672 by 24 s, within 1.7x a random
    sample's TV: docs/performance.md, "The cap at the scale an epoch resolves").
    Below it where the listing is lopsided at some scale (a flat bucket's first stretches read
    ahead in the first round).

    Only where the top folders are no more spread than ten equal ones (:func:`random_spread` at
    most :data:`TEN_FOLDERS`: a flat bucket, a few top folders); over more, the skew's cap, divided
    by their spread and held by :func:`fair_samples`, stays: the expected distance reads the
    planner's estimates of the folders' sizes, and over 100 folders of skewed sizes (300k keys,
    seed 5) it let 1,773 samples through at 2.06x a random sample's TV, the listed keys 0.076
    from the folder mix where the planner's estimates put them nearer. And only where each
    segment's listed keys are its first ones (``in_key_order``: pages listed in key order); an
    index written shuffled lists a uniform sample of each part, which the blocks would take
    for its first keys."""
    if skew >= 1.0 and _outgrown(spans, ends_unknown=ends_unknown):
        return 1
    counts = _top_counts(spans, ends_unknown=ends_unknown)
    if counts is None:
        return None
    total = sum(n for _, n in counts.values())
    spread = _large_spread([n / total for _, n in counts.values()]) if total > 0 else 0.0
    if not in_key_order or spread > TEN_FOLDERS:
        return fair_samples(spans, skew, ends_unknown=ends_unknown)  # see above
    upto = int(min(sum(k for k, _ in counts.values()), EXPECTED_UPTO))
    fair = _top_fair(counts, upto)
    if fair is None:
        return None
    if fair >= 1:
        fair = block_fair_samples(spans, left_of, upto=fair)
    if fair >= EXPECTED_UPTO:  # fair at every size looked at: no cap (a 10M-key listing read evenly
        return None            # would otherwise hold the walk at a million samples until it ends)
    return max(1, fair)


def _top_fair(counts: dict[str, tuple[float, float]], upto: int) -> int | None:
    """The largest sample up to ``upto`` whose top-folder mix, drawn from ``counts``' listed
    keys, is expected within ``TV_TARGET`` times a random sample's distance from their estimated
    mix (``upto`` for fewer than two folders); None where nothing is listed or estimated."""
    pairs = list(counts.values())
    if upto < 1 or sum(n for _, n in pairs) <= 0:
        return None
    if len(pairs) < 2:
        return upto
    drawn, target, weights = grouped(pairs)
    return largest_fair_sample(drawn, target, upto=upto, weights=weights)


EXPECTED_UPTO = 1_000_000
"""The largest cap :func:`fair_samples` looks at: past a million samples an epoch is the
listed mix's own distance, which the skew's distance already holds."""


def _outgrown(spans: Sequence[SpanState], *, ends_unknown: bool) -> bool:
    """Whether a one-folder span whose end is not found may hold any share: it has more keys
    listed than the median keys per folder of the spans whose end is found (listed and
    estimated left), or fewer than :data:`TYPICAL_FROM` such spans tell a typical size. Such a
    folder may hold any share (a Zipf rank-size law past 1 is a Pareto tail with no mean to guess
    it by), while the last of many equal folders still galloping is no larger than the typical
    one. One folder of known size is no typical size: ``val/``'s 1,200 keys beside ``train/``'s
    18,800, whose first pages were not more, let 6-21 samples through before ``train/``'s end
    was found, 5 of 6 to 14 of 21 from ``val/`` (6% of the keys): 6-17x a random sample's
    folder-mix distance on a loaded node."""
    if not ends_unknown:
        return False
    sized: list[float] = []
    open_folders: list[int] = []
    for span in spans:
        if not span.reached:
            continue
        folders = max(1, span.folders[1] - span.folders[0])
        if not any(s.open and span.is_tail(s) for s in span.segments):
            sized.append((span.listed + span.rest) / folders)
        elif folders == 1:
            open_folders.append(span.listed)
    if not open_folders:
        return False
    if len(sized) < TYPICAL_FROM:
        return True
    import statistics  # here: it imports decimal (6 ms), on the sampler's way to its first request

    return max(open_folders) > statistics.median(sized)


TYPICAL_FROM = 4
"""Spans of known size (their end found) from which their median keys per folder is a typical
folder's size (:func:`_outgrown`); with fewer, a folder still read towards its end may hold any
share."""


FAIR_SPREAD = 1.8
"""The fetch order's :data:`~epochfs.sidecar.sampler.pace.FAIR_SPREAD` (its cap lets through
``(FAIR_SPREAD / skew) ** 2`` samples): the sample size the spread is taken at
(:func:`_spread_at_cap`). Kept equal to it by a test; not imported, as the sampler's start-up
imports nothing of the listing."""


def _spread_at_cap(spans: Sequence[SpanState], tv: float, *, ends_unknown: bool) -> float:
    """:func:`random_spread` at the sample size the cap it sets lets through: the largest n with
    ``n = (FAIR_SPREAD * spread(n) / (TEN_FOLDERS * tv)) ** 2``, found by going down from the
    spread of a large sample (it only grows with n, so each step is smaller, towards that n).

    A random sample of n keys holds none of a folder of share p << 1/n; its distance from the
    folder mix is then about 2p, far below sqrt(p / 2 pi n), and the spread of a large sample
    overstated what a small one can be held to: 600k keys in 2,500 folders of Zipf 1.3 sizes, the
    skew divided by it, let 103-114 samples through at 2.1-2.2x a random sample's TV."""
    shares = _top_shares(spans, ends_unknown=ends_unknown)
    spread = _large_spread(shares)
    if spread <= TEN_FOLDERS or tv <= 0.0:
        return spread
    for _ in range(8):
        n = (FAIR_SPREAD * spread / (TEN_FOLDERS * tv)) ** 2
        spread = math.sqrt(n) * _random_tv(shares, n)
        if spread <= TEN_FOLDERS:
            break
    return spread


EXACT_UP_TO = 1e6
"""Sample sizes up to which :func:`_random_tv` sums the binomials exactly (above: their normal
limit)."""


def _random_tv(shares: Sequence[float], samples: float) -> float:
    """The expected folder-mix TV distance of a uniform random sample of ``samples`` keys from
    folders of these ``shares``: half the sum of each folder's mean absolute deviation of its
    binomial count (de Moivre's formula), over the sample size."""
    if samples > EXACT_UP_TO:
        # Past a million the normal limit is exact to 0.1%, and the exact sum is not: its terms
        # cancel in magnitudes of n log n, and a tiny listed skew asks for any n (at 1e20 the
        # exponent overflowed: OverflowError in the listing).
        return _large_spread(shares) / math.sqrt(samples)
    n = max(1, int(samples))
    lgn = math.lgamma(n + 1)
    total = 0.0
    for p in shares:
        if p <= 0.0 or p >= 1.0:
            continue
        v = math.floor(n * p) + 1
        if v > n:
            continue
        log_mad = (math.log(2 * v) + lgn - math.lgamma(v + 1) - math.lgamma(n - v + 1)
                   + v * math.log(p) + (n - v + 1) * math.log1p(-p))
        total += math.exp(log_mad)
    return 0.5 * total / n


TEN_FOLDERS = 1.2
"""A uniform random sample's spread (:func:`random_spread`) over ten equal folders: the scale the
fetch order's cap is set at (``FAIR_SPREAD``)."""


def random_spread(spans: Sequence[SpanState], *, ends_unknown: bool = False) -> float:
    """How far a uniform random sample of n keys is from the mix of the top folders the reached
    spans lie in, times sqrt(n): the sum over those folders of sqrt(p (1 - p) / 2 pi), p a
    folder's estimated share (its spans' keys listed and estimated left). About 1.2 over ten
    equal folders, 12.6 over a thousand, 0 over one. Top folders, not spans: the spans of a
    nested key space are its sub-folders (200 under 10 top folders), and divided by their spread
    its epochs were 1.5-2.2x a random sample's top-folder mix where undivided 0.5-1.35x.

    :func:`listing_skew` divides its distance by this over :data:`TEN_FOLDERS` (at least 1): the
    fetch order caps the samples at ``(FAIR_SPREAD / skew) ** 2``, which keeps an epoch within
    about twice a random sample's distance over ten folders, and a random sample over a thousand
    is ten times as far. Undivided, 1M keys in 1,000 equal folders, listed 0.1-0.26 from their mix
    (pages of up to a fifth of a folder, in waves), held the epochs at 3-21 samples for 30 s
    where about 12,000 were as fair as a random sample allows (docs/performance.md).

    0 while a range of several folders is of unknown size (:func:`.ranges.unsized`: folders no
    page has reached, or one read into and not to its end; a folder of 43% of the keys may be
    such a one: divided then, 5,000 folders of Zipf sizes as 1,024 ranges let 279 samples through
    at 15 s, 4.25x a random sample's TV), and, with ``ends_unknown``, while a span's end is not
    found (its size is a guess from its first names: 1,500 folders of Zipf 1.3 sizes, offline,
    every folder a range's page ended in made a span, let 138-277 samples through at 2.2-2.9x
    while those were galloped for). Before, the spread was 0 while any range was open at all,
    which over 2,500 folders is most of the listing: the cap held the epochs at 33-63 samples
    for 32 s (docs/performance.md, "Fairness")."""
    return _large_spread(_top_shares(spans, ends_unknown=ends_unknown))


def _large_spread(shares: Sequence[float]) -> float:
    """A large random sample's distance from folders of these ``shares``, times sqrt(n): the
    sum of sqrt(p (1 - p) / 2 pi) (each folder's binomial count in its normal limit)."""
    return sum(math.sqrt(p * (1.0 - p) / (2.0 * math.pi)) for p in shares if 0.0 < p < 1.0)


def _top_shares(spans: Sequence[SpanState], *, ends_unknown: bool) -> list[float]:
    """The estimated shares of the top folders the reached spans lie in (none while a range of
    folders is of unknown size, :func:`.ranges.unsized`, or, with ``ends_unknown``, while a
    span's end is not found: :func:`random_spread`)."""
    counts = _top_counts(spans, ends_unknown=ends_unknown)
    if not counts:
        return []
    total = sum(n for _, n in counts.values())
    return [n / total for _, n in counts.values()] if total > 0 else []


def _top_counts(spans: Sequence[SpanState], *, ends_unknown: bool) -> dict[str, tuple[float, float]] | None:
    """Keys listed and estimated in all (listed and left) of each top folder the reached spans lie
    in; None while a range of folders is of unknown size (:func:`.ranges.unsized`) or, with
    ``ends_unknown``, while a span's end is not found (its size a guess from its first names)."""
    reached = [span for span in spans if span.reached]
    if ends_unknown and any(s.open and span.is_tail(s) for span in reached for s in span.segments):
        return None
    if any(unsized(span) for span in reached):
        return None
    tops: dict[str, tuple[float, float]] = {}
    for span in reached:
        top = span.prefix.split("/", 1)[0]
        listed, whole = tops.get(top, (0.0, 0.0))
        tops[top] = (listed + span.listed, whole + span.listed + span.rest)
    return tops


__all__ = ["FAIR_SPREAD", "TEN_FOLDERS", "epoch_cap", "fair_samples", "listing_skew", "random_spread",
           "skew_as_of"]
