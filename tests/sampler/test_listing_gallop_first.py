"""Gallops first (:mod:`epochfs.sidecar.listing.gallopfirst`): a span whose first page comes back
full during the listing's first round looks for its end before the round's remaining first pages,
so a large folder's size, by which a fair first sample is drawn (the listing's ``weights``), is
known soon after its first page. The real :class:`~epochfs.sidecar.listing.planner.Planner`, pages
read from in-memory sorted keys as S3 would."""

from __future__ import annotations

import random

from epochfs.sidecar.listing.estimates import WEIGHT_MIN
from epochfs.sidecar.listing.planner import Planner
from epochfs.sidecar.store.listings import Part

FOLDERS = 200
BIG = "f007/"


def _keys() -> dict[str, list[str]]:
    keys = {f"f{i:03d}/": [f"f{i:03d}/{j:03d}" for j in range(5)] for i in range(FOLDERS)}
    keys[BIG] = [f"{BIG}{j:06d}" for j in range(50_000)]
    return keys


def _page(seg: object, keys: list[str]) -> list[str]:
    """``seg``'s next page as S3 would read it (StartAfter, MaxKeys, the segment's stop)."""
    part = seg.part  # type: ignore[attr-defined]
    after = part.after or part.start
    got = [k for k in keys if k > after and (part.stop is None or k < part.stop)][:seg.page]  # type: ignore[attr-defined]
    part.done = len(got) < seg.page  # type: ignore[attr-defined]
    part.after = got[-1] if got else after
    return got


def _pages_between(planner: Planner, keys: dict[str, list[str]]) -> tuple[list[str], int]:
    """Read pages one at a time until the large folder is among the listing's weights: the
    folders of the pages read from its first page on, and the first pages not read by then."""
    reached: set[str] = set()
    between: list[str] = []
    for _ in range(5_000):
        if any(w[0] == BIG for w in planner.progress()["weights"]):
            return between, FOLDERS - len(reached)
        seg = planner.take()
        assert seg is not None
        prefix = seg.part.prefix
        reached.add(prefix)
        if between or prefix == BIG:
            between.append(prefix)
        planner.record(seg, _page(seg, keys[prefix]))
    raise AssertionError("the large folder was never weighed")


def test_a_full_first_page_looks_for_its_end_before_the_rounds_other_first_pages() -> None:
    """200 folders, one of 50,000 keys: from its first page to its end found (it is weighed), no
    other folder's page is read, in every random order of the round tried, the round's other
    first pages waiting (before, its end was looked for after every first page)."""
    keys = _keys()
    assert len(keys[BIG]) >= WEIGHT_MIN
    for seed in range(5):
        parts = [Part(i, prefix, "", None) for i, prefix in enumerate(sorted(keys))]
        planner = Planner(parts, splittable=True, rng=random.Random(seed))
        between, left = _pages_between(planner, keys)
        others = [p for p in between if p != BIG]
        assert not others and left > 0, (
            f"order {seed}: {len(others)} other pages read before the large folder's end was found "
            f"({len(between) - len(others)} of its own), {left} first pages left")
