"""A synthetic key space of many folders and the listing the planner's tests drive over it.

Shared by the tests of the planner over more folders than the discovery gives spans
(``tests/sampler/test_listing_planner_range_folders.py``, ``test_listing_range_folders_pace.py``,
``test_listing_range_estimates.py``): the same Zipf-sized folders, the same ranges
:class:`~epochfs.sidecar.listing.paged.PagedSource` cuts them into, one page read as S3 lists
it and a batch of the listers' pages, so the tests judge the planner on one model.
"""

from __future__ import annotations

import bisect
import random
from collections import Counter

from epochfs.sidecar.listing.paged import MAX_FOLDER_SPANS
from epochfs.sidecar.listing.planner import Planner, Segment
from epochfs.sidecar.store.listings import Part


def zipf_key_space(*, folders: int, keys: int, skew: float,
                   seed: int) -> tuple[list[str], list[str], dict[str, int]]:
    """``folders`` class folders of Zipf(``skew``) sizes in a random key order, about ``keys``
    keys in all: (every key sorted, the folders sorted, each folder's size)."""
    rng = random.Random(seed)
    weights = [(r + 1) ** -skew for r in range(folders)]
    rng.shuffle(weights)
    whole = sum(weights)
    paths = [f"class-{i:04d}/" for i in range(folders)]
    size = {p: max(1, round(keys * w / whole)) for p, w in zip(paths, weights, strict=True)}
    every = sorted(f"{p}sample-{i:06d}.bin" for p in paths for i in range(size[p]))
    return every, paths, size


def folder_ranges(paths: list[str]) -> list[Part]:
    """The spans :class:`~epochfs.sidecar.listing.paged.PagedSource` cuts more folders than
    ``MAX_FOLDER_SPANS`` into: ranges of ``step`` folders, the first from the key space's start."""
    step = -(-len(paths) // MAX_FOLDER_SPANS)
    starts = ["", *paths[step::step]]
    return [Part(i, "", s, starts[i + 1] if i + 1 < len(starts) else None) for i, s in enumerate(starts)]


def read_page(keys: list[str], seg: Segment) -> list[str]:
    """One page of ``seg`` (``seg.page`` keys after its resume point, less those at or past its
    stop), its resume point and done flag set as the listers do."""
    part = seg.part
    if part.stop is not None and part.after and part.after + "\x00" >= part.stop:
        out: list[str] = []
        done = True
    else:
        at = bisect.bisect_right(keys, max(part.after, part.start))
        out = keys[at:at + seg.page]
        done = at + seg.page >= len(keys)
        if part.stop is not None:
            kept = [k for k in out if k < part.stop]
            done = done or len(kept) < len(out)
            out = kept
    part.after = out[-1] if out else part.after
    part.done = done
    return out


def read_batch(planner: Planner, keys: list[str], order: random.Random, listers: int = 4) -> list[list[str]]:
    """One batch of the planner's listing: ``listers`` segments taken at once, their pages read
    and recorded in ``order``'s shuffle (the listers' commits land in any order); the pages, in
    the order recorded."""
    batch = [s for s in (planner.take() for _ in range(listers)) if s is not None]
    assert batch, "open segments but none to read: a segment waits on nothing"
    pages = [(s, read_page(keys, s)) for s in batch]
    order.shuffle(pages)
    for seg, page in pages:
        planner.record(seg, page)
    return [page for _, page in pages]


def folder_tv(listed: list[str], paths: list[str], size: dict[str, int]) -> float:
    """Total-variation distance between the listed keys' folder mix and the dataset's."""
    whole = sum(size.values())
    count = Counter(paths[bisect.bisect_right(paths, k) - 1] for k in listed)
    return 0.5 * sum(abs(count[p] / len(listed) - size[p] / whole) for p in paths)
