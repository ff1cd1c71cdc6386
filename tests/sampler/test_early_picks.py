"""Early picks (:mod:`epochfs.sidecar.sampler.earlypicks`): while the listing runs, a folder whose
size the listing knows is drawn by its estimated share, not by its keys listed so far.

A real :class:`~epochfs.sidecar.store.Store` with a listing in progress, as the listers leave it:
the small folders listed whole, the large one's first page listed (its end found, its size
reported in the progress's ``weights``), the fair cap at one sample (epoch 0 of a lopsided
listing). The fetch order's first hand-out is epoch 0's one sample.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import ClassVar
from unittest import mock

from store_helpers import put, sid_of

from epochfs.sidecar.sampler.order import FetchOrder
from epochfs.sidecar.store import CatalogRow, Meta, Policy, Store
from epochfs.sidecar.store.listings import PageRows, Part

SMALL = 100
"""Small folders, listed whole, of :data:`EACH` keys."""
EACH = 10
BIG_LISTED = 50
"""The large folder's keys listed (its first page)."""
BIG = 10_000
"""Its keys estimated (its end found)."""


def _progress(*, big_listed: int, big_total: int, fair_cap: int = 1) -> str:
    listed = SMALL * EACH + big_listed
    return json.dumps({"listed": listed, "estimated": SMALL * EACH + big_total, "spans": SMALL + 1,
                       "spans_reached": SMALL + 1, "first_round": True, "skew": 0.0, "fair_cap": fair_cap,
                       "weights": [["big/", big_listed, big_total]]})


def _listing(store: Store, rng: random.Random, *, big_total: int = BIG) -> int:
    """Begin a listing and commit the small folders whole and the large one's first page; returns
    the generation."""
    listings = store.listings()
    parts = [Part(0, "big/", "", None)] + [Part(i + 1, f"s{i:03d}/", "", None) for i in range(SMALL)]
    gen = listings.begin(parts, "list")
    progress = _progress(big_listed=BIG_LISTED, big_total=big_total)
    pages = []
    for part in parts[1:]:
        keys = [f"{part.prefix}{j:02d}" for j in range(EACH)]
        pages.append(PageRows(Part(part.part, part.prefix, "", None, after=keys[-1], done=True),
                              _rows(keys, rng), 0, []))
    big = [f"big/{j:05d}" for j in range(BIG_LISTED)]
    pages.append(PageRows(Part(0, "big/", "", None, after=big[-1]), _rows(big, rng), 0, []))
    listings.commit_pages(gen, pages, progress=progress)
    return gen


def _rows(keys: list[str], rng: random.Random) -> list[CatalogRow]:
    return [CatalogRow(k, sid_of(k), 10, "v", rank=rng.randrange(-(2**63), 2**63)) for k in keys]


def _store(path: Path) -> Store:
    store = Store(path, create=True)
    store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1, in_use_seconds=60.0))
    return store


def _first_sample(path: Path, seed: int, *, big_total: int = BIG) -> str:
    with _store(path) as store:
        _listing(store, random.Random(seed), big_total=big_total)
        order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0,
                           listing=lambda: True)
        cand = order.next()
        assert cand is not None, "the order handed out nothing under a cap of one sample"
        assert order.next() is None, "the fair cap of one sample let more through"
        return cand.key


def test_a_large_folder_listed_behind_its_size_is_drawn_by_its_size(tmp_path: Path) -> None:
    """The large folder is 91% of the dataset and 5% of the keys listed: drawn by its keys listed,
    epoch 0's one sample is in it about one time in twenty; drawn by its size, nine in ten (40
    sampling orders here: at least 28 of them, where chance alone at 91% gives fewer than 28
    once in ~10^5)."""
    firsts = [_first_sample(tmp_path / f"c{seed}", seed) for seed in range(40)]
    in_big = sum(key.startswith("big/") for key in firsts)
    assert in_big >= 28, f"epoch 0's sample in the large folder in {in_big} of 40 orders"


def test_folders_listed_in_proportion_are_drawn_as_the_walk_draws_them(tmp_path: Path) -> None:
    """Where the large folder is listed as much of its size as the rest (50 of 50: no weight
    left), nothing is picked early: the first sample is the lowest-ranked key listed."""
    for seed in range(5):
        rng = random.Random(seed)
        with _store(tmp_path / f"c{seed}") as store:
            _listing(store, rng, big_total=BIG_LISTED + 1)  # all but one of it listed: 98%
            ranks = {str(k): int(r) for k, r in store._ix.query("SELECT key, rank FROM catalog")}
            order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False,
                               inflight=lambda: 0, listing=lambda: True)
            cand = order.next()
            assert cand is not None and cand.key == min(ranks, key=lambda k: ranks[k])
            assert not order.early.keys


class _ListedMeanwhile(Store):
    """A store whose listing commits the large folder's next page (:attr:`later`, once set) right
    after a refill of the fetch order has read the catalog, as a lister thread may: the early keys
    drawn right after include rows that refill did not offer."""

    later: ClassVar[list[CatalogRow]] = []
    gen = 0

    def refill(self, **kwargs):  # type: ignore[no-untyped-def]
        got = super().refill(**kwargs)
        if self.later:
            rows, self.later = self.later, []
            progress = _progress(big_listed=BIG_LISTED + len(rows), big_total=BIG, fair_cap=4)
            self.listings().commit_page(self.gen, Part(0, "big/", "", None, after=rows[-1].key), rows,
                                        skips=0, clashes=[], progress=progress)
        return got


@mock.patch("epochfs.sidecar.sampler.order.OFFERED_EVERY", float("inf"))  # no look at what ended
def test_an_early_key_found_owed_after_its_download_ended_is_not_fetched_twice(tmp_path: Path) -> None:
    """An early key committed after the refill before it has a row the pass has not offered; the
    cursor is past its rank, so the next refill reads it as owed while its download runs (not
    cached yet), and its download ends before the owed key is popped: it is passed over, not
    handed out again."""
    store = _ListedMeanwhile(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1, in_use_seconds=60.0))
    store.gen = _listing(store, random.Random(7), big_total=BIG_LISTED + 1)  # no weight yet
    store._ix.put(Meta.LISTING_PROGRESS, _progress(big_listed=BIG_LISTED, big_total=BIG_LISTED + 1,
                                                   fair_cap=3))
    running: set[str] = set()
    ended: list[str] = []

    def busy(key: str) -> bool:
        if key in running:  # asked about while its download runs: it ends now
            running.discard(key)
            put(store, key, 10)
            ended.append(key)
        return False

    order = FetchOrder(store=store, schedule_mode=False, busy=busy, inflight=lambda: len(running),
                       listing=lambda: True)
    handed = _take(order, store, 3)  # the walk's: the cursor is set
    assert len(handed) == 3 and not order.early.keys
    # The large folder's size is known now, and its next page, ranked lowest of all (below the
    # cursor), is committed right after the next refill's read.
    store._ix.put(Meta.LISTING_PROGRESS, _progress(big_listed=BIG_LISTED, big_total=BIG, fair_cap=4))
    later = [f"big/{j:05d}" for j in range(BIG_LISTED, BIG_LISTED + 20)]
    store.later = [CatalogRow(k, sid_of(k), 10, "v", rank=-(2**63) + 1 + i) for i, k in enumerate(later)]
    early = order.next()
    assert early is not None and early.key in later and early.key in order.early.keys, early
    running.add(early.key)  # its download runs on
    handed.append(early.key)
    lifted = json.loads(_progress(big_listed=BIG_LISTED + 20, big_total=BIG, fair_cap=5000))
    store._ix.put(Meta.LISTING_PROGRESS, json.dumps(lifted))  # the cap lifted: the pass goes on
    handed += _take(order, store, 200)
    assert ended == [early.key], "the early key's download was never asked about again"
    assert handed.count(early.key) == 1, f"the early key was handed out {handed.count(early.key)} times"
    assert len(handed) == len(set(handed))
    store.close()


def _take(order: FetchOrder, store: Store, n: int) -> list[str]:
    """Up to ``n`` keys handed out, each admitted at once."""
    keys = []
    for _ in range(n):
        cand = order.next()
        if cand is None:
            break
        put(store, cand.key, 10)
        keys.append(cand.key)
    return keys


def test_a_folder_short_of_its_share_is_topped_up_while_keys_are_owed(tmp_path: Path) -> None:
    """Keys listed below the cursor are owed and drawn by the keys listed (the scaled draw waits
    for them): 300 more small-folder keys listed late, all ranked below the cursor. The large
    folder, 91% of the dataset by its estimate, still has its share of what is fetched: its samples
    are topped up to a whole sample of it (under a cap of 60 samples, 80% of them or more in it,
    where the owed keys alone leave it none of the 92 handed out)."""
    with _store(tmp_path / "cache") as store:
        rng = random.Random(11)
        gen = _listing(store, rng, big_total=BIG_LISTED + 1)  # no weight yet
        store._ix.put(Meta.LISTING_PROGRESS, _progress(big_listed=BIG_LISTED, big_total=BIG_LISTED + 1,
                                                       fair_cap=3))
        order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0,
                           listing=lambda: True)
        first = _take(order, store, 3)
        assert len(first) == 3 and not order.early.keys
        late = [f"t{i:03d}/{j}" for i in range(100) for j in range(3)]
        rows = [CatalogRow(k, sid_of(k), 10, "v", rank=-(2**63) + 1 + i) for i, k in enumerate(late)]
        progress = json.loads(_progress(big_listed=BIG_LISTED, big_total=BIG, fair_cap=60))
        progress["listed"] += len(late)
        progress["estimated"] += len(late)
        store.listings().commit_pages(gen, [PageRows(Part(200, "t", "", None, after=late[-1], done=True),
                                                     rows, 0, [])], progress=json.dumps(progress))
        handed = first + _take(order, store, 100)
        in_big = sum(k.startswith("big/") for k in handed)
        assert 60 <= len(handed) < 100 and in_big >= 0.8 * len(handed), \
            f"{in_big} of {len(handed)} samples in the large folder"
        assert any(k.startswith("t") for k in handed), "the owed keys were not fetched"


def _order(store: Store, listing: list[bool]) -> FetchOrder:
    return FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0,
                      listing=lambda: listing[0])


def test_keys_waiting_to_be_fetched_early_are_dropped_when_the_listing_ends(tmp_path: Path) -> None:
    """A top-up under a large cap leaves many early keys waiting; once the listing has ended, the
    walk's order is the whole catalog's and none of them is handed out ahead of it."""
    with _store(tmp_path / "cache") as store:
        store.gen = _listing(store, random.Random(3))
        store._ix.put(Meta.LISTING_PROGRESS, _progress(big_listed=BIG_LISTED, big_total=BIG, fair_cap=500))
        listing = [True]
        order = _order(store, listing)
        first = _take(order, store, 1)
        assert first and order.early, "no early key waits after the first hand-out"
        listing[0] = False
        store.listings().finish(store.gen)
        after = _take(order, store, 200)
        assert not set(after) & order.early.keys, "an early key was handed out after the listing ended"
        assert not order.early


@mock.patch("epochfs.sidecar.sampler.earlypicks.EARLY_PICKS", 10)
def test_no_more_keys_are_fetched_early_than_a_run_allows(tmp_path: Path) -> None:
    """The draw and the top-up in one refill share the bound (the keys waiting count in it)."""
    with _store(tmp_path / "cache") as store:
        _listing(store, random.Random(5))
        store._ix.put(Meta.LISTING_PROGRESS, _progress(big_listed=BIG_LISTED, big_total=BIG, fair_cap=500))
        order = _order(store, [True])
        handed = _take(order, store, 300)
        assert handed and 0 < len(order.early.keys) <= 10, len(order.early.keys)


@mock.patch("epochfs.sidecar.sampler.order.LISTING_WAIT", 0.0)  # the catalog asked again at once
def test_a_key_found_owed_beside_the_walks_rows_does_not_pass_the_cap(tmp_path: Path) -> None:
    """Three keys handed out under a cap of three; a key ranked below the cursor is listed and the
    cap rises to four: one more key is handed out (the owed one), not the owed key and a walk row."""
    with _store(tmp_path / "cache") as store:
        gen = _listing(store, random.Random(9), big_total=BIG_LISTED + 1)
        store._ix.put(Meta.LISTING_PROGRESS, _progress(big_listed=BIG_LISTED, big_total=BIG_LISTED + 1,
                                                       fair_cap=3))
        order = _order(store, [True])
        assert len(_take(order, store, 10)) == 3
        late = CatalogRow("s999/late", sid_of("s999/late"), 10, "v", rank=-(2**63) + 1)
        store.listings().commit_pages(gen, [PageRows(Part(300, "s999/", "", None, after=late.key, done=True),
                                                     [late], 0, [])],
                                      progress=_progress(big_listed=BIG_LISTED, big_total=BIG_LISTED + 1,
                                                         fair_cap=4))
        assert _take(order, store, 10) == ["s999/late"]


def test_malformed_weights_are_passed_over(tmp_path: Path) -> None:
    """The listing's progress is written by the listing's own process; a record that is not what
    it writes (a number, an object, an estimate of 1e999) draws nothing early and crashes nothing."""
    for weights in (5, [{"a": 1}], [["big/", 50, 1e999]], [["big/", "x", None]], None):
        with _store(tmp_path / f"c{abs(hash(repr(weights)))}") as store:
            _listing(store, random.Random(1))
            progress = json.loads(_progress(big_listed=BIG_LISTED, big_total=BIG)) | {"weights": weights}
            store._ix.put(Meta.LISTING_PROGRESS, json.dumps(progress))
            order = _order(store, [True])
            assert order.next() is not None and not order.early.keys, weights
            assert store.stats().catalog_objects > 0


def test_nothing_is_drawn_early_once_the_cache_holds_enough_samples(tmp_path: Path) -> None:
    """Past EARLY_BELOW samples cached the walk's draw is left alone: the same large folder, once
    three samples are cached under a bound of three, gets no key early (one more of room: some)."""
    for bound, expect in ((3, False), (4, True)):
        with (mock.patch("epochfs.sidecar.sampler.earlypicks.EARLY_BELOW", bound),
              _store(tmp_path / f"c{bound}") as store):
            _listing(store, random.Random(2))
            for key in ("s000/00", "s001/00", "s002/00"):
                put(store, key, 10)
            store._ix.put(Meta.LISTING_PROGRESS, _progress(big_listed=BIG_LISTED, big_total=BIG, fair_cap=40))
            order = _order(store, [True])
            _take(order, store, 30)
            assert bool(order.early.keys) is expect, (bound, order.early.keys)


def _two_folders(path: Path, seed: int, listed: dict[str, int], *, estimated: int, cap: int,
                 small: int = 20) -> tuple[list[str], set[str]]:
    """Folders of ``listed`` keys each estimated at 1,000 keys, beside ``small`` folders of ten
    listed whole: every key handed out under a cap of ``cap``, and those fetched early."""
    rng = random.Random(seed)
    with _store(path) as store:
        folders = listed | {f"s{i:02d}/": 10 for i in range(small)}
        parts = [Part(i, p, "", None) for i, p in enumerate(folders)]
        gen = store.listings().begin(parts, "list")
        pages = []
        for part in parts:
            keys = [f"{part.prefix}{j:05d}" for j in range(folders[part.prefix])]
            pages.append(PageRows(Part(part.part, part.prefix, "", None, after=keys[-1],
                                       done=part.prefix.startswith("s")), _rows(keys, rng), 0, []))
        progress = {"listed": sum(folders.values()), "estimated": estimated, "spans": len(parts),
                    "spans_reached": len(parts), "first_round": True, "skew": 0.0, "fair_cap": cap,
                    "weights": [[p, n, 1000] for p, n in listed.items()]}
        store.listings().commit_pages(gen, pages, progress=json.dumps(progress))
        order = _order(store, [True])
        return _take(order, store, cap + 10), order.early.keys


def test_equal_folders_either_side_of_the_lag_are_drawn_alike(tmp_path: Path) -> None:
    """Two folders of 1,000 keys by estimate, one listed 49% and one 51% (the rest listed whole):
    about equal samples (a step at the lag drew them 467:236 over these 20 orders)."""
    a = b = 0
    for seed in range(20):
        got, _ = _two_folders(tmp_path / f"c{seed}", seed, {"A/": 490, "B/": 510}, estimated=2200, cap=40)
        a += sum(k.startswith("A/") for k in got)
        b += sum(k.startswith("B/") for k in got)
    assert 0.8 < a / b < 1.25, (a, b)


def test_weighed_folders_listed_alike_draw_nothing_early(tmp_path: Path) -> None:
    """Three folders of 1,000 keys by estimate, each 30% listed, and nothing else: each is listed
    as the rest is, so none is drawn by its (possibly over-estimated) size."""
    got, early = _two_folders(tmp_path / "c", 1, {"a/": 300, "b/": 300, "c/": 300}, estimated=3000,
                              cap=40, small=0)
    assert len(got) == 40 and not early, early


def test_keys_waiting_are_dropped_once_the_listing_is_recorded_complete(tmp_path: Path) -> None:
    """The listing's own flag may say it runs a poll after its completion is recorded: the keys
    waiting to be fetched early are dropped at the record."""
    with _store(tmp_path / "cache") as store:
        gen = _listing(store, random.Random(3))
        store._ix.put(Meta.LISTING_PROGRESS, _progress(big_listed=BIG_LISTED, big_total=BIG, fair_cap=500))
        order = _order(store, [True])
        assert _take(order, store, 1) and order.early
        store.listings().finish(gen)
        after = _take(order, store, 50)
        assert after and not set(after) & order.early.keys


def test_a_progress_record_not_as_the_listing_writes_it_leaves_status_and_the_order_working(
        tmp_path: Path) -> None:
    """Counts that are not numbers (an estimate of 1e999, a cap of "x") read as no progress."""
    for bad in ({"estimated": 1e999}, {"listed": 1e999}, {"fair_cap": "x"}, {"estimated": "1e3"}):
        with _store(tmp_path / f"c{abs(hash(repr(bad)))}") as store:
            _listing(store, random.Random(1))
            progress = json.loads(_progress(big_listed=BIG_LISTED, big_total=BIG)) | bad
            store._ix.put(Meta.LISTING_PROGRESS, json.dumps(progress))
            assert store.stats().catalog_objects > 0, bad
            assert _order(store, [True]).next() is not None, bad
