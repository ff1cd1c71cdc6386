"""The listing's skew and the pace it sets (issue 19): what is fetched while the listing is lopsided
stays in the epochs, so the fetch order slows while the keys listed so far are far from the
dataset's mix, and goes at its full pace once they spread.

The planner's skew is the total-variation distance between the listed keys' shares of the key
space's pieces (open segments, what each span has finished, the spans not reached) and those
pieces' estimated shares; the fetch order's pace is :data:`LEAD` times
:func:`~epochfs.sidecar.sampler.pace.spread_factor` of it.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from unittest import mock

import pytest
from store_helpers import put, sid_of

from epochfs.sidecar.listing.planner import GALLOP_PAGE, Planner, Segment
from epochfs.sidecar.sampler.order import FetchOrder
from epochfs.sidecar.sampler.pace import FAIR_SPREAD, LEAD, PACE_START, SKEW_FLOOR, skew_cap, spread_factor
from epochfs.sidecar.store import CatalogRow, Policy, Store
from epochfs.sidecar.store.listings import Part


def _segments(planner: Planner) -> dict[str, Segment]:
    """Every span's (one) segment, by prefix: the first round hands each out once."""
    segments = {}
    while (seg := planner.take()) is not None:
        segments[seg.part.prefix] = seg
    return segments


def _page(planner: Planner, seg: Segment, numbers: range, *, done: bool) -> None:
    """Commit one page of ``seg``: keys ``<prefix>000123.bin``."""
    keys = [f"{seg.part.prefix}{i:06d}.bin" for i in numbers]
    seg.part.after, seg.part.done = keys[-1], done
    planner.record(seg, keys)


@mock.patch("epochfs.sidecar.listing.planner.SKEW_EVERY", 0.0)
def test_one_folder_listed_whole_beside_the_first_page_of_a_large_one_is_skewed() -> None:
    planner = Planner([Part(0, "a/", "", None), Part(1, "b/", "", None)], splittable=False)
    seg = _segments(planner)
    _page(planner, seg["a/"], range(100), done=True)  # a: 100 keys, all of them
    assert planner.progress()["skew"] == 0.0, "b not reached: the first round's wait covers it"
    _page(planner, seg["b/"], range(100), done=False)  # b's first page of ~thousands
    lopsided = planner.progress()["skew"]
    assert lopsided > 0.2
    # b listed on, page after page, to its end: the listed keys approach the dataset's mix.
    start = 100
    while start < 5000:
        _page(planner, seg["b/"], range(start, min(start + 1000, 5000)), done=start + 1000 >= 5000)
        start += 1000
    assert planner.progress()["skew"] == 0.0, "listed whole: nothing is lopsided"
    assert lopsided > planner.progress()["skew"]


@mock.patch("epochfs.sidecar.listing.planner.SKEW_EVERY", 0.0)
def test_spans_listed_alike_are_not_skewed() -> None:
    parts = [Part(i, f"c{i}/", "", None) for i in range(4)]
    planner = Planner(parts, splittable=False)
    seg = _segments(planner)
    for i in range(4):
        _page(planner, seg[f"c{i}/"], range(100), done=True)
    assert planner.progress()["skew"] == 0.0


@pytest.mark.parametrize("skew", [0.0, 0.1, 0.25, 0.45, 0.9])
def test_the_pace_slows_with_the_skew(tmp_path: Path, skew: float) -> None:
    """100 keys listed of an estimated 50,000, spread over the order: the pass takes at most LEAD
    times the spread factor of a fair sample's share, fewer the more lopsided the listing is."""
    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1, in_use_seconds=60.0))
    listings = store.listings()
    gen = listings.begin([Part(0, "", "", None)], "list")
    step = 2**64 // 100
    keys = [f"k{i:03d}" for i in range(100)]
    rows = [CatalogRow(k, sid_of(k), 10, "v", rank=-(2**63) + i * step + 1) for i, k in enumerate(keys)]
    listings.commit_page(gen, Part(0, "", "", None, after="k099"), rows, skips=0, clashes=[],
                         progress=f'{{"listed": 100, "estimated": 50000, "spans": 1, "spans_reached": 1, '
                                  f'"skew": {skew}}}')
    order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0,
                       listing=lambda: True)
    fetched: list[str] = []
    with mock.patch("epochfs.sidecar.sampler.order.LISTING_WAIT", 0.0):
        for _ in range(100):
            cand = order.next()
            if cand is None:
                break
            put(store, cand.key, 10)
            fetched.append(cand.key)
    share = LEAD * spread_factor(skew) * (len(fetched) + PACE_START) / 50_000
    assert len(fetched) <= int(share * 100) + 1, fetched
    assert fetched == keys[:len(fetched)]
    if skew == 0.0:
        assert len(fetched) >= 8, "LEAD times a fair share of 1,000 keys' worth: 8 of these 100"
    if skew >= 0.45:
        assert len(fetched) <= 1


def test_the_spread_factor_falls_from_one_to_its_floor() -> None:
    values = [spread_factor(s / 100) for s in range(101)]
    assert values[0] == 1.0
    assert all(a >= b for a, b in itertools.pairwise(values))
    assert values[-1] == SKEW_FLOOR


def test_the_skew_is_computed_at_most_once_a_second_whatever_the_commits() -> None:
    """progress() is asked at every commit; the skew is a pass over every span (10,000 folders:
    ~160 ms), so it is kept for SKEW_EVERY seconds."""
    planner = Planner([Part(0, "a/", "", None), Part(1, "b/", "", None)], splittable=False)
    seg = _segments(planner)
    _page(planner, seg["a/"], range(100), done=True)
    _page(planner, seg["b/"], range(100), done=False)
    first = planner.progress()["skew"]
    with mock.patch.object(Planner, "_skew", side_effect=AssertionError("computed again")):
        assert planner.progress()["skew"] == first


@mock.patch("epochfs.sidecar.listing.planner.SKEW_EVERY", 0.0)
def test_a_span_whose_end_is_not_found_counts_as_skewed_until_it_is() -> None:
    """Where pages can start anywhere (S3), a span's size is a guess until a page past its end
    comes back empty: its listed keys' share of the whole is unknown, so the skew counts it as off
    by all of it. Two spans listed alike by their first page (an estimate-based skew of 0) are
    held at 1 while either end is unknown: beside one span of known size, the other may hold any
    share (``val/`` beside ``train/``: :func:`_outgrown`). Among four of known size and one open,
    no more listed than they hold, the open one counts by its listed share."""
    planner = Planner([Part(0, "a/", "", None), Part(1, "b/", "", None)], splittable=True)
    seg = _segments(planner)
    _page(planner, seg["a/"], range(100), done=False)
    _page(planner, seg["b/"], range(100), done=False)
    assert planner.progress()["skew"] == 1.0, "both ends unknown: the listed mix says nothing yet"
    # a's end found: the gallop's page past it comes back empty (b's gallop is still out).
    gallops = [planner.take(), planner.take()]
    seg_a = next(g for g in gallops if g is not None and g.part.prefix == "a/")
    assert seg_a.part.stop is None and seg_a.parent is not None, "a gallop: a split past a's keys"
    assert seg_a.page == GALLOP_PAGE, "a gallop's page finds the end; it is not there to list"
    seg_a.part.done = True
    planner.record(seg_a, [])
    assert planner.progress()["skew"] == 1.0, "b's size unknown beside a single span of known size"


@mock.patch("epochfs.sidecar.listing.planner.SKEW_EVERY", 0.0)
def test_an_open_span_among_typical_ones_counts_by_its_listed_share() -> None:
    """Four spans listed whole (100 keys each) tell a typical size; a fifth whose end is not found
    and which has listed no more than that counts as off by at least its listed share (100 of
    500), not by all, as the last of many equal folders still galloping does; one that has listed
    more may hold any share."""
    parts = [Part(i, f"{name}/", "", None) for i, name in enumerate("abcde")]
    planner = Planner(parts, splittable=True)
    seg = _segments(planner)
    for name in "abcd":
        _page(planner, seg[f"{name}/"], range(100), done=True)
    _page(planner, seg["e/"], range(100), done=False)
    skew = planner.progress()["skew"]
    assert 0.2 <= skew < 1.0, "e counts as off by its listed share (a fifth), not by all"
    more = planner.take()
    assert more is not None and more.part.prefix == "e/"
    _page(planner, more, range(100, 101), done=False)
    assert planner.progress()["skew"] == 1.0, "e listed more than a typical folder holds: any share"


@pytest.mark.parametrize("skew", [0.05, 0.2, 0.45])
def test_a_lopsided_listing_caps_the_samples_and_owed_keys_wait_with_the_walk(
        tmp_path: Path, skew: float) -> None:
    """1,000 keys listed of an estimated 1,000 (the pace's rate does not hold the walk back): while
    the listing is ``skew`` away from the dataset's mix, the walk stops at (FAIR_SPREAD / skew)**2
    samples, the first of the order; keys listed later with ranks behind the cursor are owed and
    wait with it while the skew holds (let through, they came from wherever the listing read then:
    a flat bucket's epochs 2.3x a random sample's distance); once the listing spreads (skew 0),
    the owed keys come first, lowest rank first, then the walk goes on."""
    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1, in_use_seconds=60.0))
    listings = store.listings()
    gen = listings.begin([Part(0, "", "", None)], "list")
    step = 2**64 // 2000

    def commit(numbers: range, after: str, skew: float) -> list[str]:
        keys = [f"k{i:04d}" for i in numbers]
        rows = [CatalogRow(k, sid_of(k), 10, "v", rank=-(2**63) + i * step + 1) for i, k in zip(numbers, keys,
                                                                                                  strict=True)]
        progress = f'{{"listed": 1000, "estimated": 1000, "spans": 1, "spans_reached": 1, "skew": {skew}}}'
        listings.commit_page(gen, Part(0, "", "", None, after=after), rows, skips=0, clashes=[],
                             progress=progress)
        return keys

    keys = commit(range(0, 2000, 2), "k1998", skew)  # every other rank: the odd ones are listed later
    order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0,
                       listing=lambda: True)

    def drain() -> list[str]:
        got = []
        with mock.patch("epochfs.sidecar.sampler.order.LISTING_WAIT", 0.0):
            while (cand := order.next()) is not None:
                put(store, cand.key, 10)
                got.append(cand.key)
        return got

    fetched = drain()
    cap = skew_cap(skew)
    assert cap == int((FAIR_SPREAD / skew) ** 2)
    assert fetched == keys[:min(cap, len(keys))]
    if cap < len(keys):  # capped: the keys listed now behind the cursor are owed, and wait
        later = commit(range(1, 1999, 2), "k1997", skew)
        assert drain() == [], "the cap holds the owed keys too while the listing is lopsided"
        last = int(fetched[-1][1:])
        owed = [k for k in later if int(k[1:]) < last]
        assert owed, "keys listed behind the cursor"
        commit(range(1999, 2000), "k1999", 0.0)  # the listing spread: no cap
        after = drain()
        assert after[:len(owed)] == owed, "the owed keys first, lowest rank first"
        assert sorted(after) == sorted(set(keys + later + ["k1999"]) - set(fetched)), "then the rest"


def test_no_skew_no_cap() -> None:
    assert skew_cap(0.0) is None
    assert skew_cap(1.0) == int(FAIR_SPREAD**2)


def test_spans_not_reached_yet_hold_the_cap_at_the_floor(tmp_path: Path) -> None:
    """Past the first round's wait, a span not reached yet holds no key a sample could take and
    is of unknown size: the listed keys count as off by all of them, the skew's floor (half of
    1,000 spans unreached: 3 samples), while the pace's rate (the planner's skew, 0 here) would
    let all 400 listed keys through. Counted as the reached spans on average instead ((1.8 /
    0.5)**2 = 12 here), one folder of 92% of the keys among the last 19 of 301 spans let 813
    samples through, all from the others (tests/sampler/test_unreached_span_cap.py)."""
    from epochfs.sidecar.sampler.pace import unreached_share

    assert unreached_share({"spans": 1000, "spans_reached": 500}) == 0.5
    assert unreached_share({"spans": 1000, "spans_reached": 0}) == 1.0
    assert unreached_share({"complete": True}) == 0.0
    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1, in_use_seconds=60.0))
    listings = store.listings()
    gen = listings.begin([Part(0, "", "", None)], "list")
    step = 2**64 // 400
    keys = [f"k{i:03d}" for i in range(400)]
    rows = [CatalogRow(k, sid_of(k), 10, "v", rank=-(2**63) + i * step + 1) for i, k in enumerate(keys)]
    listings.commit_page(gen, Part(0, "", "", None, after="k399"), rows, skips=0, clashes=[],
                         progress='{"listed": 400, "estimated": 400, "spans": 1000, "spans_reached": 500, '
                                  '"first_round": false, "began": 1.0, "skew": 0.0}')
    order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0,
                       listing=lambda: True)
    fetched = []
    with mock.patch("epochfs.sidecar.sampler.order.LISTING_WAIT", 0.0):
        while (cand := order.next()) is not None:
            put(store, cand.key, 10)
            fetched.append(cand.key)
    assert fetched == keys[:skew_cap(1.0) or 0] and len(fetched) == 3


@mock.patch("epochfs.sidecar.listing.planner.SKEW_EVERY", 0.0)
def test_a_range_of_folders_listed_from_some_of_them_counts_as_skewed() -> None:
    """More folders than spans: a range holds several folders, and its first pages list only the
    first of them. Its listed keys count as off by the share of its folders not reached yet (the
    skew, whose pieces are segments, said 0.05 where 5,000 folders as 1,024 ranges were 0.8 from
    the folder mix, and 1,000-4,600 samples drawn then covered 0.56-0.61x a random sample's
    folders), so the fetches wait until the ranges are read from each of their folders."""
    folders = [f"c{i:02d}/" for i in range(10)]
    planner = Planner([Part(0, "", "", "c05/")], splittable=True, folders=folders)
    seg = planner.take()
    assert seg is not None
    seg.part.after = "c00/000099.bin"
    planner.record(seg, [f"c00/{i:06d}.bin" for i in range(100)])
    assert planner.progress()["skew"] >= 0.8, "one folder of five reached"
    assert skew_cap(planner.progress()["skew"]) == 5
    # The next page runs across the range's folders (keys are contiguous: c00 to c04 reached).
    seg.part.after = "c04/000000.bin"
    planner.record(seg, ["c01/000000.bin", "c02/000000.bin", "c04/000000.bin"])
    assert planner._spans[0].folders_reached == {0, 1, 2, 3, 4}
    assert planner.progress()["skew"] < 0.5, "every folder of the range reached"


def _folders_listed_whole(planner: Planner, seg: dict[str, Segment], size: int, count: int) -> None:
    for i in range(count):
        _page(planner, seg[f"c{i:03d}/"], range(size), done=True)


@mock.patch("epochfs.sidecar.listing.planner.SKEW_EVERY", 0.0)
def test_a_folder_larger_than_the_typical_one_with_its_end_not_found_holds_the_cap() -> None:
    """Thousands of folders of Zipf sizes: most are listed whole within a page, and the few large
    ones have a page listed and their ends not found. Their listed keys are a small share of the
    listed whole, so the skew said 0.34 and 27 samples were drawn from folders holding 13% of the
    keys (the estimate 79k of 600k) before the gallops found the large folders' ends; the epochs
    cut then were 2.7-3.1x a random sample's folder mix. A folder already larger than the typical
    one listed whole, with its end unknown, may hold any share of the dataset: the skew is 1 (the
    cap's floor) until its end is found."""
    parts = [Part(i, f"c{i:03d}/", "", None) for i in range(200)] + [Part(200, "big/", "", None)]
    planner = Planner(parts, splittable=True)
    seg = _segments(planner)
    _folders_listed_whole(planner, seg, 20, 200)  # 4,000 keys, each folder's end found
    _page(planner, seg["big/"], range(100), done=False)  # 100 keys, more to come: how many?
    assert planner.progress()["skew"] == 1.0
    assert skew_cap(planner.progress()["skew"]) == int(FAIR_SPREAD ** 2)
    gallop = planner.take()
    assert gallop is not None and gallop.part.prefix == "big/"
    gallop.part.done = True  # the page past its end comes back empty: big/ holds 100 keys
    planner.record(gallop, [])
    assert planner.progress()["skew"] < 0.1, "every end found: the listed keys are the dataset"


@mock.patch("epochfs.sidecar.listing.planner.SKEW_EVERY", 0.0)
def test_a_folder_whose_end_is_not_found_but_no_larger_than_the_typical_one_does_not() -> None:
    """The last of many equal folders still galloping to its end (100 of its keys listed, those
    listed whole held 1,000 each) is no sign of a large one: the cap does not fall to its floor
    for it (a hold until every end is found cost 1M keys in 1,000 equal folders 1,000 of the
    1,400 samples it had at 24 s)."""
    parts = [Part(i, f"c{i:03d}/", "", None) for i in range(50)] + [Part(50, "last/", "", None)]
    planner = Planner(parts, splittable=True)
    seg = _segments(planner)
    _folders_listed_whole(planner, seg, 1000, 50)
    _page(planner, seg["last/"], range(100), done=False)
    assert planner.progress()["skew"] < 0.5
