"""The discovery's first pages of the whole remote, kept to answer the listing's pages they cover.

A flat bucket's discovery reads its first page (up to 1,000 keys) before the listing starts, and
the delimiter's pages after it (up to ten more pages: of files only, they are the same keys a
listing reads; where they reach the end, the remote is listed). The planner asks small pages
first (100 keys, then 10-key gallops and splits) so that every part of the key space is listed
early, and so it takes only the first of those keys from those pages; without this, every later
page inside their range was asked of the remote again: for 1,500 keys, five
of the listing's nine LISTs, each one of moto's tenths of a second of CPU, before and beside the
first fetches. A :class:`KeptPage` answers any page of a span over the root (no prefix) whose keys
it knows as the remote would have: the next ``max_keys`` keys after the resume point and before the
span's stop, ``done`` once the stop (or, for a page that was the whole remote, the end) is within
what it knows; where the keys it knows end first, a shorter page that is not the last (as a remote
may answer), so that the next page's request starts after them. What it cannot know (keys past its
last one) is left to a request. A listing resumed after a failure forgets it
(:meth:`.PagedSource.forget_first_page`): the page is as old as the listing, and a retry may come
long after.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from epochfs.sidecar.remote import RemoteObject


class KeptPage:
    """``objects``: the remote's first keys from its start, in key order (one page or several
    following each other); ``whole``: they are the whole remote (nothing follows the last)."""

    def __init__(self, objects: Sequence[RemoteObject], *, whole: bool) -> None:
        self.objects = list(objects)
        self.keys = [str(o.key) for o in self.objects]
        self.whole = whole
        # Answers are cut by str comparison, as the remote's pages are (paged._within); a page
        # not in that order (a store that sorts otherwise) answers nothing from memory.
        self.usable = all(a < b for a, b in itertools.pairwise(self.keys))

    def page(self, prefix: str, start: str, stop: str | None, after: str,
             max_keys: int) -> tuple[list[RemoteObject], str, bool] | None:
        """The page (its objects, the resume point after it, whether the span ends with it) of the
        span ``prefix``, ``start``, ``stop`` after ``after`` (or its start) that the remote would
        answer, or None where that needs keys past the kept ones."""
        if not self.usable or prefix or max_keys < 1:
            return None
        lo = max(after, start)
        first = bisect.bisect_right(self.keys, lo)
        end = len(self.keys) if stop is None else bisect.bisect_left(self.keys, stop)
        known_to_stop = self.whole or (stop is not None and bool(self.keys) and stop <= self.keys[-1])
        if first >= end and not known_to_stop:
            return None  # nothing known after ``lo``: the rest lies beyond the kept keys
        if self.whole:
            taken = self.objects[first:end]  # every key left in the span: the page that ends it
            done = True
        else:
            taken = self.objects[first:min(end, first + max_keys)]
            done = known_to_stop and first + max_keys >= end
        return taken, str(taken[-1].key) if taken else after, done


__all__ = ["KeptPage"]
