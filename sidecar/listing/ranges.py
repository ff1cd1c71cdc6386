"""The folders of a key space listed as ranges (more folders than spans, ``MAX_FOLDER_SPANS``): where
the planner (:mod:`.planner`) splits a range, which of its folders a page reached, and which folder
a segment reads alone and may list as a span of its own. Lookups in the sorted folder starts the
discovery found; the planner makes the changes, given the span a promoted folder becomes
(:func:`promoted_span`)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from epochfs.sidecar.listing.learning import learn_page
from epochfs.sidecar.listing.segments import Segment, SpanState, keys_left
from epochfs.sidecar.store.listings import Part


@dataclass(frozen=True)
class Promotion:
    """A folder a segment reads on into, to be listed as a span of its own
    (:meth:`FolderRanges.promotion`)."""

    prefix: str
    """The folder's start: the new span's prefix."""
    mine: int
    """How many of the page's keys (its last ones) lie in the folder."""
    split_at: str | None
    """The next folder's start where the segment is cut first (the rest of the range stays the
    range's); None when the segment's stop is that start already."""


class FolderRanges:
    """The folder starts the planner may split a range at (none: the spans are not ranges)."""

    def __init__(self, folders: Sequence[str]) -> None:
        self.folders = sorted(folders)
        self._measured = (0, 0)
        """Keys and folders of the folders a page has listed whole (:meth:`measure`)."""
        self._least = 0
        """Keys a folder holds at least: the most a page listed of one folder it ended in."""

    def __bool__(self) -> bool:
        return bool(self.folders)

    def of_part(self, part: Part) -> tuple[int, int]:
        """The indices [lo, hi) of the folders whose starts lie in ``part``'s range (none for a
        span with no stop: a prefix of its own, or the last range, read as the key space's end),
        less a folder whose start the stop is cut just after: the part keeps that folder's marker,
        the next part its keys."""
        if not self.folders or part.stop is None:
            return 0, 0
        lo = bisect.bisect_left(self.folders, part.start) if part.start else 0
        return lo, self._stop_index(lo, part.stop)

    def _stop_index(self, lo: int, stop: str) -> int:
        """The index of the first folder at or past ``stop``, less one where ``stop`` is cut just
        after a folder's start (past ``lo``): that folder is the next part's."""
        hi = bisect.bisect_left(self.folders, stop)
        return hi - 1 if hi > lo and self.folders[hi - 1] + "\x00" == stop else hi

    def reached(self, span: SpanState, keys: list[str]) -> range:
        """The indices of ``span``'s folders a page's ``keys`` lie in (a page is contiguous)."""
        lo, hi = span.folders
        if hi - lo <= 1 or not keys:
            return range(0)
        first = bisect.bisect_right(self.folders, keys[0], lo, hi) - 1
        last = bisect.bisect_right(self.folders, keys[-1], lo, hi) - 1
        return range(max(lo, first), last + 1)

    def starts_inside(self, seg: Segment) -> tuple[int, int]:
        """The indices [lo, hi) of the folders whose starts lie past where ``seg`` has read and
        before its stop, less a folder whose start the stop is cut just after (a folder split's
        lower part lists up to the folder's start, not into it)."""
        if not self.folders or seg.part.stop is None:
            return 0, 0
        lo = bisect.bisect_right(self.folders, seg.part.after or seg.part.start)
        return lo, self._stop_index(lo, seg.part.stop)

    def folder_split(self, free: list[Segment]) -> tuple[Segment, str] | None:
        """The bounded segment holding the most folders' starts past where it has read, and the
        middle one of those starts; None when no segment holds one. A range of folders read from
        its start lists its first folder, then the next: 5,000 folders as 1,024 ranges of about
        five, read so, had 3,021 folders with a listed key when half the keys were listed, and
        epochs drawn then covered 0.56-0.61x a random sample's folders (docs/performance.md)."""
        best: tuple[int, Segment, str] | None = None
        for seg in free:
            lo, hi = self.starts_inside(seg)
            if hi > lo and (best is None or hi - lo > best[0]):
                best = (hi - lo, seg, self.folders[(lo + hi) // 2])
        return None if best is None else (best[1], best[2])

    def measure(self, seg: Segment, after: str, keys: list[str]) -> None:
        """Learn from ``keys``, a page of the range segment ``seg`` read after ``after`` (its
        start when empty), how many keys a folder holds: the folders it lists whole (from a
        folder start at or past where it began to the start of the folder it ends in), and the
        keys it lists of the folder it ends in (at least that many). What :meth:`most_left`
        bounds a range's segments' estimates by."""
        if not self.folders or not keys:
            return
        end = bisect.bisect_right(self.folders, keys[-1]) - 1
        if end < 0:
            return
        self._least = max(self._least, len(keys) - bisect.bisect_left(keys, self.folders[end]))
        lo = (bisect.bisect_right(self.folders, after) if after
              else bisect.bisect_left(self.folders, seg.part.start))
        if end > lo:
            whole = bisect.bisect_left(keys, self.folders[end]) - bisect.bisect_left(keys, self.folders[lo])
            measured, count = self._measured
            self._measured = (measured + whole, count + end - lo)

    def keys_left(self, span: SpanState, seg: Segment) -> float | None:
        """:func:`.segments.keys_left`, in a range of folders at most :meth:`most_left`: the
        planner's estimate of the keys left in ``seg``."""
        left = keys_left(span, seg)
        if left is None or span.folders[1] - span.folders[0] <= 1:
            return left
        most = self.most_left(seg)
        return left if most is None else min(left, most)

    def most_left(self, seg: Segment) -> float | None:
        """Keys ``seg``, a segment of a range of folders, may hold at most as the folders listed
        whole so far say (None: none yet): the folders whose starts lie past where it has read,
        and the one it reads in, times the keys such a folder held on average (or the most a page
        listed of one folder, if more). A range's key shape numbers its folders' names too, so
        its segments' estimates from it run across folders: a range's rest whose page listed
        keys 0-99 of ``class-4161/`` was estimated at 1.5M keys up to ``class-4165/``, four of
        them held the planner's estimated whole at 4.5-7M keys of 600k, and the skew at 0.8-0.9,
        until they were made spans (offline, 5,000 folders of 120 keys; docs/performance.md,
        "Thousands of small folders as ranges")."""
        measured, count = self._measured
        each = max(measured / count if count else 0.0, float(self._least))
        if each <= 0.0 or seg.part.stop is None:
            return None
        lo, hi = self.starts_inside(seg)
        return (hi - lo + 1) * each

    def promotion(self, span: SpanState, seg: Segment, keys: list[str]) -> Promotion | None:
        """Whether ``seg``, a segment of the range ``span`` whose page ``keys`` came back full,
        reads on into a folder that holds at least half of that page; None when not.

        A range's segments are bounded by the next folder's start, which says nothing of where
        the folder's keys end, so the planner makes such a folder a span of its own (its end
        galloped for, its size estimated as a span's: :meth:`.Planner._promote`). Half a page or
        more: a page that ends in a folder's first few keys would promote most folders of a
        range, each with its gallop's pages (tried: any full page's last folder; 5,000 folders of
        60 keys went from 157 samples at 32 s to 31, offline); a folder that goes on fills the
        segment's next page, which comes soon (:func:`unsized`), and is promoted then."""
        if not keys or span.folders[1] <= span.folders[0]:
            return None
        at = bisect.bisect_right(self.folders, keys[-1]) - 1
        prefix = self.folders[at] if at >= 0 else ""
        mine = len(keys) - bisect.bisect_left(keys, prefix)
        if not prefix or not keys[-1].startswith(prefix) or 2 * mine < len(keys):
            return None
        lo, hi = self.starts_inside(seg)
        return Promotion(prefix, mine, self.folders[lo] if hi > lo else None)


def promoted_span(span_id: int, found: Promotion, seg: Segment, keys: list[str]) -> SpanState:
    """The span ``found``'s folder becomes (id ``span_id``), holding ``seg``, the segment whose
    page ``keys`` read on into it (:meth:`.Planner._promote`), which is moved into it.

    Its prefix is the folder's start and its open end the segment's stop (:attr:`SpanState.end`),
    galloped for as any span's. It starts from the page's keys in the folder (its last
    ``found.mine``): they are its listed keys, its shape and its density, so its first estimate
    is the folder's own, not one from the range's other folders."""
    new = SpanState(span_id, found.prefix, end=seg.part.stop, reached=True)
    seg.span, seg.listed, seg.left_out, seg.first, seg.density = new.id, 0, 0, None, None
    new.segments.append(seg)
    learn_page(new, seg, keys[-found.mine:])  # as if its first page were the keys in the folder
    return new


def unsized(span: SpanState) -> bool:
    """Whether ``span`` is a range of folders whose size is not known yet: it has folders no page
    has reached, or an open segment that has read into a folder whose end it has not reached (a
    page that ended there with less than half of it in the folder: :meth:`FolderRanges.promotion`).
    Such a range's next page comes before any by listed share (:meth:`.SpanQueue.push`), and the
    listing's skew is not divided by a random sample's spread while one is
    (:func:`.skew.random_spread`). Read by its listed share instead, a range whose first page had
    37 keys of a folder of 28% of 600k keys (1,500 folders of Zipf 1.3 sizes), estimated at 49
    keys left, waited behind the large folders' pages all listing long (offline, the listed keys
    stuck 0.34 from the folder mix)."""
    lo, hi = span.folders
    if hi - lo <= 1 or not any(s.open for s in span.segments):
        return False
    return len(span.folders_reached) < hi - lo or any(s.open and s.listed > 0 for s in span.segments)


def unbounded(span: SpanState) -> bool:
    """Whether ``span``'s end is not found yet: an open segment still reads on past its known keys
    (its tail, galloped for), or it is a range of folders of unknown size (:func:`unsized`).
    Its size is then a guess, which neither the planner's queue priority nor its page size may trust."""
    return any(s.open and span.is_tail(s) for s in span.segments) or unsized(span)


__all__ = ["FolderRanges", "Promotion", "promoted_span", "unbounded", "unsized"]
