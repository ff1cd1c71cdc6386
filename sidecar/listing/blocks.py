"""How far an epoch drawn from the keys listed so far is expected to be from the dataset, over
the top folders and over blocks of the key order inside them, at the scales an epoch of n samples
can resolve: the fetch order's cap while the listing runs, for any key space whose sizes are
known (:func:`.skew.epoch_cap`), a flat bucket (one top folder) and a few top folders included,
where the top folders' mix alone says nothing or too little.

The planner knows where its pieces lie in the key order: each open segment (its listed keys are
its first ones, from its start; its keys left follow them) and each segment it has finished (its
start and keys, :attr:`.SpanState.finished`). Laid end to end in key order inside their top
folder, each weighing its estimated keys, a top folder's pieces are cut into blocks of equal
estimated keys, as many as its share of ``B`` blocks for each ``B`` of :data:`SCALES`; the cap
is the largest sample whose expected distance from the estimated mix stays within
:data:`.expected_tv.TV_TARGET` times a random sample's at every scale
(:func:`.expected_tv.sample_tv`). A listing even at the scale of twentieths of the key order but
uneven between neighbouring segments is held only at the sample sizes that resolve segments
(blocks of a hundredth need thousands of samples to tell), where the skew over the pieces
themselves (:func:`.skew.listing_skew`) held every size alike: 400k keys in a flat bucket, its
skew at 0.06-0.09 after half was listed, held the epochs at 1,221 samples for 6 s; a mixed key
space's at 321 for 15 s (docs/performance.md, "The cap at the scale an epoch resolves")."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from epochfs.sidecar.listing.expected_tv import TV_TARGET, grouped, largest_true, sample_tv
from epochfs.sidecar.listing.learning import top_folder
from epochfs.sidecar.listing.segments import Segment, SpanState

SCALES = (2, 4, 8, 16, 32, 64, 128, 256, 512)
"""Block counts the cap is measured at: from halves of the key order to quarters of a flat
bucket's segments (``MAX_SEGMENTS_PER_SPAN`` of them). An epoch holds listed keys only, and a
segment's are its first ones: listed evenly short of their ends, blocks of about a segment each
(128ths) see nothing while each segment's unlisted tail leaves the epoch's spread inside its
folders uneven; the pieces place each open segment's keys left after its listed ones, so blocks of
a quarter of a segment see that tail. Without them a mixed key space 70-89% listed let epochs
of 6,600-11,700 samples through at an in-folder KS of 1.7-2.3x a random sample's, with them
6,300-8,600 at 1.4-1.7x; they cost ~20 ms a computation instead of ~4 (docs/performance.md,
"The cap at the scale an epoch resolves")."""

Piece = tuple[str, int, float, float]
"""A stretch of the key order: where it starts (its first key or its segment's start), its order
among stretches of the same start, its keys listed and its keys estimated in all."""


def pieces(spans: Sequence[SpanState], left_of: Callable[[SpanState, Segment], float | None]) -> list[Piece]:
    """The reached spans' stretches in key order: per open segment its listed keys (listed whole)
    then its keys left (none listed; as many again as listed where nothing is known, as
    :func:`.skew.listing_skew` counts them), per finished segment its keys; a span's keys listed
    outside both (a folder's keys left to its range when it was made a span of its own) at its
    start."""
    out: list[Piece] = []
    for span in spans:
        if not span.reached:
            continue
        placed = 0
        for seg in span.segments:
            start = seg.part.start or seg.first or span.prefix
            placed += seg.listed
            out.append((start, 0, float(seg.listed), float(seg.listed)))
            if seg.open:
                left = left_of(span, seg)
                out.append((start, 1, 0.0, float(left if left is not None else seg.listed)))
        for start, keys in span.finished:
            placed += keys
            out.append((start or span.prefix, 0, float(keys), float(keys)))
        if span.listed > placed:
            out.append((span.prefix, -1, float(span.listed - placed), float(span.listed - placed)))
    out.sort(key=lambda p: (p[0], p[1]))
    return out


class Cumulative:
    """The running sums of stretches' estimated and listed keys, so each scale's cuts are found by
    bisection (:func:`cut`) rather than by a pass over every stretch."""

    def __init__(self, stretches: Sequence[Piece]) -> None:
        self.whole = [0.0]
        self.listed = [0.0]
        for _, _, listed, whole in stretches:
            if whole > 0:
                self.whole.append(self.whole[-1] + whole)
                self.listed.append(self.listed[-1] + listed)

    def listed_before(self, at: float) -> float:
        """Keys listed in the first ``at`` estimated keys (a stretch across ``at`` shared by
        estimated keys: its listed keys spread evenly over it, as nothing finer is known)."""
        i = min(len(self.whole) - 1, bisect.bisect_right(self.whole, at))
        lo, hi = self.whole[i - 1], self.whole[i]
        share = (at - lo) / (hi - lo) if hi > lo else 1.0
        return self.listed[i - 1] + (self.listed[i] - self.listed[i - 1]) * min(1.0, max(0.0, share))


def cut(sums: Cumulative, count: int) -> list[tuple[float, float]]:
    """The stretches of ``sums`` cut into ``count`` blocks of equal estimated keys: each block's
    keys listed and estimated."""
    total = sums.whole[-1]
    if total <= 0 or count < 1:
        return []
    width = total / count
    marks = [sums.listed_before(width * j) for j in range(count)] + [sums.listed[-1]]
    return [(marks[j + 1] - marks[j], width) for j in range(count)]


def block_fair_samples(spans: Sequence[SpanState], left_of: Callable[[SpanState, Segment], float | None], *,
                       upto: int) -> int:
    """The largest sample, up to ``upto``, an epoch drawn from the listed keys may hold and be
    expected within :data:`.expected_tv.TV_TARGET` times a random sample's distance from the
    estimated mix of the top folders, and at every scale ``B`` of :data:`SCALES` from that mix
    with each top folder cut into blocks of its key order, as many as its share of ``B``
    (rounded; those under two blocks stay whole), 0: not one key. The caller knows the spans'
    sizes (every end found, no range of unknown size).

    Blocks inside top folders, not across them: an epoch's fairness is its mix of top folders
    and its spread inside each (the bench's TV and KS), and with blocks across the folders of a
    key space of 2,500 folders of Zipf sizes (or the small folders lumped into one) the cap held
    its epochs to tens of samples for a large folder listed at 33% beside the rest at 51%, a
    difference a sample over 2,500 folders, most of them holding none of it, does not show.

    One bisection over the sample size for all scales: a scale differs from the top folders'
    mix only in the folders it cuts (as many as a scale has blocks, at most), so each sample
    size's distances over the folders are summed once and each scale's are that sum with its cut
    folders' blocks in place of the folders (over 10,000 folders a bisection per scale cost
    ~340 ms, the listing's process computing it about once a second)."""
    by_top: dict[str, list[Piece]] = {}
    for piece in pieces(spans, left_of):
        by_top.setdefault(top_folder(piece[0]), []).append(piece)
    sums = {top: (sum(p[2] for p in ps), sum(p[3] for p in ps)) for top, ps in by_top.items()}
    whole = [pair for pair in sums.values() if pair[1] > 0]
    listed = sum(k for k, _ in whole)
    total = sum(n for _, n in whole)
    if listed <= 0 or total <= 0:
        return upto
    largest = {top: Cumulative(by_top[top]) for top, (_, n) in sums.items() if n * SCALES[-1] >= 1.5 * total}
    scales: list[tuple[list[tuple[float, float]], list[tuple[float, float]]]] = []
    for count in SCALES:  # each: the folders it cuts in two or more, and their blocks
        cut_here = {top: round(count * sums[top][1] / total) for top in largest}
        cut_here = {top: blocks for top, blocks in cut_here.items() if blocks >= 2}
        if cut_here:
            scales.append(([sums[top] for top in cut_here],
                           [b for top, blocks in cut_here.items() for b in cut(largest[top], blocks)]))
    if len(whole) < 2 and not scales:
        return upto

    def shares(pairs: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
        return [k / listed for k, _ in pairs], [n / total for _, n in pairs]

    drawn, target, weights = grouped(whole)  # shares of ``listed`` and ``total``, as ``shares``
    parts = [(shares(folders), shares(blocks)) for folders, blocks in scales]

    def fair(n: int) -> bool:
        base = sample_tv(drawn, target, n, weights)
        base_random = sample_tv(target, target, n, weights)
        if base_random > 0.0 and base > TV_TARGET * base_random:
            return False
        for (fq, ft), (bq, bt) in parts:
            epoch = base - sample_tv(fq, ft, n) + sample_tv(bq, bt, n)
            random = base_random - sample_tv(ft, ft, n) + sample_tv(bt, bt, n)
            if random > 0.0 and epoch > TV_TARGET * random:
                return False
        return True

    return largest_true(fair, upto)


__all__ = ["SCALES", "Cumulative", "block_fair_samples", "cut", "pieces"]
