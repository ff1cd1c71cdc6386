"""How fast the listing's planner brings a folder of most keys to its share (issue 19).

2,000 folders of Zipf 2.0 sizes, 500k keys: the largest folder holds 61% of them, and until its
share of the keys listed caught up no epoch could match a random sample's folder mix. Three
things held it back, each checked here on the real planner and source over an in-memory paged
remote, driven without threads:

- its pages: cut into 128 segments, each read from :data:`FIRST_PAGE` keys doubling, it was read
  in pages of 100-400 keys; once a span's end is found its pages ask at least
  1 / :data:`SPAN_PAGES` of its estimated keys (at most half their segment's);
- the commits: when the index's commits, not the remote, bound the listing, every page read waits
  for the next group commit with its segment busy, so each commit took a page of every free
  segment and the listed mix followed the spans' segment counts, not their shares; the spans
  ahead of their share are held while the one behind has every segment busy (``HOLD_AHEAD``);
- the backlog: the pages not committed yet may bring :data:`MAX_PENDING` keys at most.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from collections import Counter

from range_folders_helpers import zipf_key_space

from epochfs.sidecar.listing.paged import PagedSource
from epochfs.sidecar.listing.planner import FIRST_PAGE, FULL_PAGE, MAX_PENDING, SPAN_PAGES, Planner, Segment
from epochfs.sidecar.listing.span import Span
from epochfs.sidecar.remote import RemoteObject
from epochfs.sidecar.remote.base import ListedPage
from epochfs.sidecar.remote.testing import PagedMemoryRemote
from epochfs.sidecar.store.listings import Part

EMPTY_MD5 = hashlib.md5(b"").hexdigest()


class SortedRemote(PagedMemoryRemote):
    """:class:`PagedMemoryRemote` whose pages without a delimiter are a bisection into the sorted
    keys (its own sorts every key at every page: minutes for a listing of 300k keys)."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        super().__init__(objects, page=FULL_PAGE)
        self.keys = sorted(objects)  # ASCII keys: str order is S3's byte order

    def list_page(self, prefix: str, *, start_after: str = "", token: str | None = None,
                  delimiter: bool = False, max_keys: int = 1000) -> ListedPage:
        if delimiter:
            return super().list_page(prefix, start_after=start_after, token=token, delimiter=True,
                                     max_keys=max_keys)
        self.list_calls += 1
        at = bisect.bisect_right(self.keys, max(token or start_after, prefix))
        end = bisect.bisect_left(self.keys, prefix + "\U0010ffff")
        keys = self.keys[at:min(end, at + min(self.page, max_keys))]
        more = at + len(keys) < end
        objects = [RemoteObject(k, 0, EMPTY_MD5) for k in keys]
        return ListedPage(objects, [], keys[-1] if more else None, truncated=more)


def _source(sizes: dict[str, int]) -> PagedSource:
    return PagedSource(SortedRemote({f"{f}{i:06d}.bin": b"" for f, n in sizes.items() for i in range(n)}))


def _planner(source: PagedSource) -> Planner:
    parts = [Part(i, s.prefix, s.start, s.stop) for i, s in enumerate(source.spans())]
    return Planner(parts, splittable=True, rng=random.Random(3))


def _read(source: PagedSource, seg: Segment) -> list[str]:
    """One page of ``seg`` as a lister reads it, its part moved on (committed later)."""
    part = seg.part
    page = source.read_page(Span(part.prefix, part.start, part.stop), part.after, seg.page)
    part.after, part.done = page.after, page.done
    return [str(o.key) for o in page.objects]


def _tv(listed: Counter[str], sizes: dict[str, int]) -> float:
    n, total = sum(listed.values()), sum(sizes.values())
    return 0.5 * sum(abs(listed[f] / n - sizes[f] / total) for f in sizes)


def test_a_large_folder_whose_end_is_found_is_read_in_large_pages() -> None:
    sizes = {"big/": 300_000, **{f"c{f:02d}/": 500 for f in range(20)}}
    source = _source(sizes)
    planner = _planner(source)
    asked: list[int] = []
    while planner.open_segments and len(asked) < 200:  # one page at a time, committed at once
        seg = planner.take()
        assert seg is not None
        if seg.part.prefix == "big/" and not planner._spans[seg.span].is_tail(seg):
            asked.append(seg.page)  # a bounded segment of the large folder: its end is found
        planner.record(seg, _read(source, seg))
    assert 300_000 // SPAN_PAGES > FULL_PAGE
    # Full pages but near a segment's end (at most half its keys left) and a split's first page.
    assert asked and sum(n >= FULL_PAGE // 2 for n in asked) >= 0.75 * len(asked), Counter(asked)
    # A folder of a few hundred keys keeps the small first page.
    small = _planner(_source({"a/": 500, "b/": 500}))
    first = small.take()
    assert first is not None and first.page == FIRST_PAGE


def test_a_span_whose_end_is_not_found_keeps_its_doubling_pages() -> None:
    """Until a page past its end comes back empty a span's size is a guess (its open end reaches
    three times its known extent further), so its pages are not sized from it: a flat folder of
    300k keys read eight pages a commit, its tail busy with a gallop, asked pages of 254-256 keys
    from that guess before its end was found."""
    source = _source({"flat/": 300_000})
    planner = _planner(source)
    asked: Counter[int] = Counter()

    def end_unknown() -> bool:
        return any(s.open and span.is_tail(s) for span in planner._spans for s in span.segments)

    while end_unknown():
        batch: list[tuple[Segment, list[str]]] = []
        while len(batch) < 8 and (seg := planner.take()) is not None:
            if end_unknown() and not planner._spans[seg.span].is_tail(seg):
                asked[seg.page] += 1
            batch.append((seg, _read(source, seg)))
        assert batch, "nothing to read while the end is not found"
        for seg, keys in batch:
            planner.record(seg, keys)
    doubling = {FIRST_PAGE << i for i in range(8)}
    assert asked and set(asked) <= doubling, asked


def _commit_bound(sizes: dict[str, int], upto: float) -> tuple[list[float], list[int]]:
    """List cycle by cycle until ``upto`` of the keys are listed, each cycle taking every page the
    planner hands out (those read while a commit runs) and then committing them all: the
    listed keys' TV from the folders' mix and the keys asked after each cycle."""
    source = _source(sizes)
    planner = _planner(source)
    listed: Counter[str] = Counter()
    tvs, asked = [], []
    while sum(listed.values()) < upto * sum(sizes.values()) and planner.open_segments:
        batch = []
        while (seg := planner.take()) is not None:
            batch.append((seg, seg.page, _read(source, seg)))
        for seg, _, keys in batch:
            planner.record(seg, keys)
            listed[seg.part.prefix] += len(keys)
        tvs.append(_tv(listed, sizes))
        asked.append(sum(page for _, page, _ in batch))
    return tvs, asked


def test_a_folder_of_most_keys_keeps_its_share_when_commits_bound_the_listing() -> None:
    sizes = zipf_key_space(folders=200, keys=200_000, skew=2.0, seed=5)[2]  # largest anywhere in key order
    assert max(sizes.values()) > 0.6 * sum(sizes.values())
    tvs, _ = _commit_bound(sizes, 0.5)
    # Past the first cycles (the first round, the large folder's end found and its segments cut)
    # the listed keys follow the folders' sizes.
    assert max(tvs[10:]) < 0.1, [round(t, 3) for t in tvs]


def test_the_keys_of_pages_not_committed_yet_are_bounded() -> None:
    _, asked = _commit_bound({f"c{f}/": 100_000 for f in range(4)}, 0.3)
    assert max(asked) > MAX_PENDING // 2, asked  # the listing was bound by its commits
    assert max(asked) < MAX_PENDING + FULL_PAGE, asked
