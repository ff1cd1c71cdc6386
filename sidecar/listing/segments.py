"""What the listing's planner (:mod:`.planner`) knows of the key space: its page sizes and limits,
each segment being read and each span's estimates, apart from the choices made with them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from epochfs.sidecar.listing.keyshape import KeyShape
from epochfs.sidecar.store.listings import Part

FIRST_PAGE = 100
"""Keys asked in the first page of a segment; each later page asks twice as many."""
FULL_PAGE = 1000
"""The most keys a page asks for (S3's limit)."""
SPLIT_AT = 1000
"""A bounded segment estimated to hold more keys than this is split at its middle."""
MAX_SEGMENTS_PER_SPAN = 128
"""Open segments a span is split into at most: the points a span's listing spreads from. A flat
bucket is one span; with 32, its epochs cut in the first seconds were the first keys of 32
stretches (quiet machine, 100k keys, epochs 1-3: TV 1.7-2.4x, KS 1.8-2.5x a random sample's, in
every run); with 128, TV 0.95-1.8x and KS 0.97-1.45x in two of three runs, one epoch at 2.3x in the
third (docs/performance.md, "Fairness")."""
MAX_SEGMENTS = 20_000
"""Open segments of the whole listing at most (each is a row of the index)."""
GALLOP_PAGE = 10
"""Keys a gallop's page asks for: it is there to find where a span ends, not to list it, and a
small page is a hundredth of a full one's keys to parse and commit (1M keys in 1,000 skewed
folders: with gallop pages grown to 1,000 keys like the span's own, the largest folder was still
unbounded at 35 s, estimated at 2,390 of its 179,264 keys, docs/performance.md)."""
GALLOP_REACH = 3.0
"""How far past a span's known end the gallop reads, in times its known extent (so a span 1,000
times its first page is bounded in 5 steps, not 10)."""
OPEN_END_REACH = 3.0
"""A span whose end is not found yet is guessed to reach this many times its known extent past
it: a span read from its start is usually far from its end (a guess too small lets the fetch
order's pace, which divides by the estimated whole, take too much of the first keys listed)."""
HOLD_AHEAD = 1.25
HOLD_SLACK = 0.02
"""A bounded span whose listed share is above ``HOLD_AHEAD`` times the least listed bounded
span's plus ``HOLD_SLACK`` gets no page while that one has every segment busy
(:meth:`.Planner.take` returns None: the lister waits for a commit). Where the index's commits,
not the remote, bound the listing, every page read waits for the group commit with its segment
busy, so each commit cycle reads a page of every free segment, and the listed mix followed the
spans' segment counts and page sizes rather than their shares (a folder of 61% of 500k keys in
2,000 folders, split into 128 segments, stayed at 45-52% of the keys listed from 8 s to 25 s,
offline, eight listers). Holding the spans ahead keeps the commits small while the one behind
catches up."""
SEGMENT_AHEAD = 1.5
SEGMENT_SLACK = 0.05
"""A free segment whose listed share is above ``SEGMENT_AHEAD`` times its span's plus
``SEGMENT_SLACK`` gets no page, and is not split, while a segment of the span below the span's
share is being read (:func:`not_held`). Looser than the spans' hold: a segment's share moves in
steps of a page, a large part of a small segment (held at 1.25x + 0.02, a flat bucket of 100k
keys half listed had its least listed twentieth at 0.61x the mean; at 1.5x + 0.05, 0.75x)."""
SPAN_PAGES = 256
"""Once a span's end is found, its pages ask at least 1 / this of its estimated keys (up to
:data:`FULL_PAGE`), whatever their segment's doubling from :data:`FIRST_PAGE` has reached: a
folder of 300k keys cut into 128 segments was read in pages of 100-400 keys, four listers
brought it ~16k keys a second, and it stayed behind its share of the keys listed for seconds
after the first round (61% of 500k keys in 2,000 folders: 44% at 3 s after the round, 55% at 7 s).
Not more than half the segment's estimated keys, and a folder of a few thousand keys keeps its
small pages: a page is a share of its segment or folder listed at once (a flat bucket's segments
cut small near its start while its end was found, read in full pages, were 18% of the first 250k
keys listed where a tenth; large pages list small folders in waves)."""
MAX_PENDING = 16 * FULL_PAGE
"""Keys the pages taken and not committed yet may bring at most before :meth:`.Planner.take`
hands out no more (first-round pages aside). While one group commit runs the listers read a
page of every free segment, and the next commit takes them all: 90k keys a commit, 6 s each
(offline, eight listers, a loaded machine), the listed set changing in lumps and the planner's
shares stale between them. Bounded, a commit takes at most this many keys and the planner
chooses again after each; on a remote slower than the commits (a page a lister in flight) it
never binds."""
GAP_APART = 64
"""How far apart, in numbers, keys refute the even spread the estimates assume: a segment whose
next keys (:attr:`Segment.beyond`) lie further past its stop than this many times its numbers left
is estimated at most at :data:`OPEN_END_REACH` times its keys listed (:func:`keys_left`); a gallop
page whose first key lies this many of its keys' spacings past its start found a cluster
(:func:`far_apart`)."""
SHAPE_KEYS = 1000
"""Keys of a span its shape is learnt from at most."""
NUMBERS_KEPT = 4096
"""Keys' numbers a span keeps (:attr:`SpanState.numbers`) before it forgets them all."""


@dataclass
class Segment:
    """One listing part being read, with what the planner knows of it."""

    part: Part
    span: int
    page: int = FIRST_PAGE
    """Keys the next page asks for."""
    listed: int = 0
    first: str | None = None
    last: str | None = None
    density: float | None = None
    """Keys per number of the span's shape, from this segment's pages (None: unknown)."""
    busy: bool = False
    parent: Segment | None = None
    """Set while this is a split whose first page is not committed yet: the segment it was cut
    from (which waits meanwhile)."""
    pending: int = 0
    """Keys its page being read may bring (the page's size), counted in its span's share until
    the page is committed (:attr:`SpanState.pending`)."""
    beyond: str | None = None
    """The first key listed past its stop, where the segment above it, split off at that stop,
    found it (None: not known): how far its stretch's keys are from the next ones
    (:func:`keys_left`, :data:`GAP_APART`)."""
    left_out: int = 0
    """Of its keys listed, those the include/exclude globs leave out (:mod:`.kept`)."""

    @property
    def open(self) -> bool:
        return not self.part.done


@dataclass
class SpanState:
    id: int
    prefix: str
    segments: list[Segment] = field(default_factory=list)
    listed: int = 0
    left_out: int = 0
    """Of its keys listed, those the include/exclude globs leave out (:mod:`.kept`)."""
    learnt: int = 0
    """Keys its shape was learnt from."""
    seen: list[set[str]] = field(default_factory=list)
    shape: KeyShape | None = None
    low: str | None = None
    """The smallest and largest key listed in the span: its known extent."""
    high: str | None = None
    version: int = 0
    rest: float = 0.0
    """Keys estimated left in its open segments when it was last queued (:meth:`.SpanQueue.push`)."""
    reached: bool = False
    """Its first page is committed."""
    pending: int = 0
    """Keys the pages of its segments being read (taken, not committed yet) may bring."""
    done_measured: tuple[int, float] = (0, 0.0)
    """Keys and numbers spanned by the pages of its segments that are done (its density's share)."""
    retired: list[tuple[int, str, str]] = field(default_factory=list)
    """The keys, first and last key of each segment done while its shape is still learnt
    (:attr:`learnt` under :data:`SHAPE_KEYS`): :attr:`done_measured` measured again in each new
    shape (:func:`.learning.remeasure`); emptied once the shape is final."""
    finished: list[tuple[str, int]] = field(default_factory=list)
    """Where each segment it finished and dropped started, and its keys (:func:`.learning.retire`): the
    listing's cap places them in the key order (:mod:`.blocks`)."""
    folders: tuple[int, int] = (0, 0)
    """The indices [lo, hi) of the planner's ``folders`` whose starts lie in its range (none: a
    span of one folder, or no folders given)."""
    folders_reached: set[int] = field(default_factory=set)
    """Which of those its committed pages have listed keys of."""
    numbers: tuple[KeyShape | None, dict[str | None, int]] = field(default_factory=lambda: (None, {}))
    """The numbers of keys its estimates asked for (its segments' resume points and stops, its
    known extent), with the shape they are of: each page's commit estimates the keys left in
    every open segment of its span, ~450 numbers a page on average where a folder of 130k keys
    was made a span (:meth:`.Planner._promote`) and split into 128 segments; offline, listing
    those 300k keys took the planner 8.5 s of CPU with none kept, 2.0 s with them kept."""
    cluster: str | None = None
    """The first key a gallop's page found far past its split point (:func:`far_apart`; None: none):
    the known extent the gallop and the open end's guess count from (:func:`horizon`)."""
    end: str | None = None
    """The stop of the segment that reads on to the span's end (its open end, galloped): None,
    the end of the key space or prefix; for a folder promoted out of a range of folders
    (:meth:`Planner._promote`), the next folder's start, a stop that bounds the listing but is
    not where the span's keys are known to end."""

    def is_tail(self, seg: Segment) -> bool:
        """Whether ``seg`` reads on to the span's end (its end not found while it is open)."""
        return seg.part.stop == self.end


def relative(key: str, prefix: str) -> str:
    """``key`` less the span's ``prefix``, what its key shape numbers."""
    return key[len(prefix):] if key.startswith(prefix) else key


# ------------------------------------------------------------------ estimates
# What the planner estimates of a span from its shape and pages (the choices are the planner's).
def stop_number(span: SpanState, seg: Segment) -> int:
    """The number of ``seg``'s stop: the shape's end for the segment reading on to the span's
    end, whose stop (none, or the next folder's start) is past every key of the span."""
    return number(span, None if span.is_tail(seg) else seg.part.stop)


def number(span: SpanState, key: str | None) -> int:
    """The number of ``key`` (None: the shape's end) in ``span``'s shape, kept
    (:attr:`SpanState.numbers`)."""
    assert span.shape is not None
    shape, numbers = span.numbers
    if shape is not span.shape or len(numbers) > NUMBERS_KEPT:
        numbers = {}
        span.numbers = (span.shape, numbers)
    found = numbers.get(key)
    if found is None:
        found = numbers[key] = span.shape.number(None if key is None else relative(key, span.prefix))
    return found


def after_number(span: SpanState, seg: Segment) -> int:
    """The number of where ``seg`` has read to (0: from the span's start)."""
    after = seg.part.after or seg.part.start
    return number(span, after) if after else 0


def horizon(span: SpanState, reach: float = 1.0) -> int:
    """``reach`` times the span's known extent past its end: where the gallop reads next
    (as far again), or how far an open end is guessed to go (:data:`OPEN_END_REACH`)."""
    if span.low is None or span.high is None:
        return number(span, None)
    low, high = number(span, max(span.low, span.cluster or "")), number(span, span.high)
    return high + int((high - low) * reach) + 1


def far_apart(span: SpanState, start: str, keys: list[str]) -> bool:
    """Whether the first of ``keys``, a page read after ``start`` (a gallop's split point) and in
    another folder than it, lies further past it than :data:`GAP_APART` times the keys' spacing
    (evenly spread keys lie about a spacing apart): a cluster past names nobody uses (``top0.bin``
    after ``f39/s099...``), whose extent says what the span's, measured across those names, does
    not: the open end after
    ``top17.bin`` was taken for ``top*`` names spread over ``t``..``z``, 6.4M keys of 40."""
    if len(keys) < 2 or not start or start.rpartition("/")[0] == keys[0].rpartition("/")[0]:
        # In one folder the gap is the names' own spread: unpadded numbers (9.jpg, 10.jpg,
        # 100.jpg) lie unevenly along the shape's numbers, and were taken for a far-off cluster
        # (a listing of 20k such names took 185 LISTs, the first fetch at the 80th, against 16).
        return False
    first, last = number(span, keys[0]), number(span, keys[-1])
    return first - number(span, start) > GAP_APART * max(1.0, (last - first) / (len(keys) - 1))


def keys_left(span: SpanState, seg: Segment) -> float | None:
    """Keys estimated left in ``seg`` (None: nothing known); an open end counts as far as
    the horizon."""
    if not seg.open:
        return 0.0
    if span.shape is None:
        return None
    density = seg.density if seg.density is not None else span_density(span)
    if density is None:
        return None
    hi = min(stop_number(span, seg), horizon(span, OPEN_END_REACH))
    if not span.is_tail(seg) and span.high is not None:
        # The segment holding the span's end: its keys go on past the highest listed one to
        # somewhere before the stop an empty gallop page set, up to GALLOP_REACH times the
        # known extent further: estimated half way there, not all the way (which counted a
        # span whose end the gallop overshot at up to 1 + GALLOP_REACH times its keys).
        high = number(span, span.high)
        if high < hi:
            hi = high + (hi - high + 1) // 2
    lo = after_number(span, seg)
    left = max(0.0, density * (hi - lo))
    if seg.beyond is not None and not span.is_tail(seg):
        # The keys past its stop begin far beyond it: a shape numbers every name its alphabets
        # spell, and a stretch reaching over a folder's end into names nobody uses was counted at
        # the folder's rate: a folder and the files beside it, its gallop carried from ``f39/s06...``
        # to ``f40/e40...`` and ``top0.bin`` found past it, was 5.4M keys of 50 for ~20 empty pages.
        stop = stop_number(span, seg)
        if number(span, seg.beyond) - stop > GAP_APART * max(1, stop - lo):
            left = min(left, OPEN_END_REACH * max(seg.listed, FIRST_PAGE))
    return left


def listed_share(seg: Segment, left: float | None) -> float:
    """The share of ``seg``'s estimated keys listed so far (``left``: its keys left): the
    planner's next page of a span that is not split further goes to its least listed segment,
    as spans are chosen. (Chosen by the most keys left instead, the segments cut near a flat
    bucket's start while its end was being found, small and read a few pages each, waited while
    the wide ones were read: offline, 1M keys in one span had the first tenth of the key order
    at 1.7-4.5% of the listed keys from 180k listed to 750k, the listed keys 0.27-0.055 from the
    deciles' mix between 70k and 750k; so, 0.16-0.016.)"""
    total = seg.listed + (left or 0.0)
    return seg.listed / total if total > 0 else 0.0


def not_held(span: SpanState, free: list[Segment], left: Callable[[SpanState, Segment], float | None],
             others: tuple[float, float]) -> list[Segment]:
    """The segments of ``free`` (of ``span``, whose end is found) that may take a page or be
    split: not those well ahead of the span's listed share (:data:`SEGMENT_AHEAD`) while a
    segment of the span behind that share is being read. The first round and the gallop read a
    flat bucket's first stretches ahead, and where the commits bound the listing the segments
    behind are busy (a split's first page, a page waiting for its commit) while those ahead are
    free: given pages and splits too, at half of 200k keys listed the first tenth of the key
    order was 91-97% listed while the rest was 41-72%, and an epoch drawn from the listed keys
    over-weighted it. Segments are held only while one is in flight, so :meth:`.Planner.take`
    still returns None only then. A span behind the others' share (``others``: their keys listed
    and estimated left) is not held: its catching up comes first (a folder of 61% of 200k keys,
    held inside, was still 0.12 from the folder mix at the eleventh commit, not under 0.1)."""
    total = span.listed + span.rest
    if total <= 0:
        return free
    mean = min(1.0, span.listed / total)
    listed, rest = others
    if listed > 0 and mean < listed / (listed + rest):  # behind the other spans: catch up first
        return free
    if not any(s.busy and s.open and listed_share(s, left(span, s)) < mean for s in span.segments):
        return free
    return [s for s in free if listed_share(s, left(span, s)) <= mean * SEGMENT_AHEAD + SEGMENT_SLACK]


def span_density(span: SpanState) -> float | None:
    """Keys per number over what ``span``'s segments have measured (None: nothing yet)."""
    listed, width = span.done_measured
    for seg in span.segments:
        if seg.density and seg.listed > 1:
            listed += seg.listed
            width += seg.listed / seg.density
    return listed / width if width > 0 else None


__all__ = ["FIRST_PAGE", "FULL_PAGE", "GALLOP_PAGE", "GALLOP_REACH", "GAP_APART", "HOLD_AHEAD",
           "HOLD_SLACK", "MAX_PENDING", "MAX_SEGMENTS", "MAX_SEGMENTS_PER_SPAN", "NUMBERS_KEPT",
           "OPEN_END_REACH", "SEGMENT_AHEAD", "SEGMENT_SLACK", "SHAPE_KEYS", "SPAN_PAGES", "SPLIT_AT",
           "Segment", "SpanState", "after_number", "far_apart", "horizon", "keys_left", "listed_share",
           "not_held", "number", "relative", "span_density", "stop_number"]
