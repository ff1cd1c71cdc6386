"""The snapshot-mode fetch order while keys arrive: a key listed after the pass's cursor passed its
rank is owed and fetched before the cursor moves on, so the pass's sample is every listed key up to
its cursor, and once the listing is complete the cache is exactly a prefix of the whole order.

Pages arrive in random order, of random sizes, between random numbers of fetches (hypothesis), as
a listing of many spans does beside a sampler that fetches as fast as it can.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st
from store_helpers import put, sid_of

from epochfs.sidecar.sampler.order import LISTING_REFILL, FetchOrder
from epochfs.sidecar.store import CatalogRow, Policy, Store


def _rows(keys: list[str], ranks: dict[str, int]) -> list[CatalogRow]:
    return [CatalogRow(k, sid_of(k), 10, "v", rank=ranks[k]) for k in keys]


def _fetch(order: FetchOrder, store: Store, n: int, fetched: list[str]) -> None:
    for _ in range(n):
        cand = order.next()
        if cand is None:
            return
        put(store, cand.key, 10)
        fetched.append(cand.key)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), pages=st.integers(2, 12), fetches=st.integers(1, 15))
def test_keys_listed_behind_the_cursor_are_owed_and_the_cache_converges_to_the_order(
        seed: int, pages: int, fetches: int) -> None:
    rng = random.Random(seed)
    keys = [f"class-{i % 7}/{i:04d}" for i in range(90)]
    ranks = {k: rng.randrange(-(2**63), 2**63) for k in keys}
    rng.shuffle(keys)  # pages of random spans arrive in random order
    cuts = sorted(rng.sample(range(1, len(keys)), pages - 1))
    batches = [keys[a:b] for a, b in zip([0, *cuts], [*cuts, len(keys)], strict=True)]
    # The order asks an exhausted catalog again after LISTING_WAIT; here keys arrive between calls.
    with tempfile.TemporaryDirectory() as tmp, mock.patch("epochfs.sidecar.sampler.order.LISTING_WAIT", 0.0):
        store = Store(Path(tmp) / "cache", create=True)
        store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1, in_use_seconds=60.0))
        order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0,
                           listing=lambda: True)
        listed: list[str] = []
        fetched: list[str] = []
        for batch in batches:
            store.add_catalog(_rows(batch, ranks))
            listed += batch
            _fetch(order, store, rng.randint(0, fetches), fetched)
            # Catch-up: once the pass has offered keys up to rank r (its queue drained), every key
            # listed so far up to r is in.
            if fetched and order._cursor is not None:
                cursor = order._cursor  # the highest rank offered (queued or fetched)
                behind = {k for k in listed if ranks[k] < cursor}
                owed_now = behind - set(fetched)
                _fetch(order, store, len(owed_now) + LISTING_REFILL, fetched)  # the queued, then the owed
                assert owed_now <= set(fetched) and order.passes == 0, \
                    "a key listed behind the cursor was left for a later pass"
        store.finalize_catalog()
        # The listing is complete: once what was queued and what is owed are in, the cache is a
        # prefix of the whole order at every step, however far the pass goes.
        cursor = max((ranks[k] for k in fetched), default=-(2**63))
        _fetch(order, store, len({k for k in keys if ranks[k] < cursor} - set(fetched)) + LISTING_REFILL,
               fetched)
        _fetch(order, store, rng.randint(0, len(keys) - len(fetched)), fetched)
        assert order.passes == 0, "a key listed late waited for a second pass"
        assert len(set(fetched)) == len(fetched), "a key was fetched twice in one pass"
        whole_order = sorted(keys, key=lambda k: (ranks[k], k))
        assert sorted(fetched, key=lambda k: (ranks[k], k)) == whole_order[:len(fetched)]
        store.close()


def test_a_restarted_order_still_fetches_what_was_owed(tmp_path: Path) -> None:
    """The pass's record of the rows it offered survives a restart: keys listed behind the cursor
    just before the stop are still owed after it. (A restarted pass goes on from before the lowest
    rank of the newest 256 admissions: owed keys below that would wait for the next pass.)"""
    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1, in_use_seconds=60.0))
    ranks = {f"k{i:03d}": i for i in range(600)}
    store.add_catalog(_rows([f"k{i:03d}" for i in range(0, 600, 2)], ranks))  # the even keys list first
    order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0,
                       listing=lambda: True)
    fetched: list[str] = []
    _fetch(order, store, 300, fetched)
    assert fetched == [f"k{i:03d}" for i in range(0, 600, 2)]
    store.record_offered_upto(order._offered)  # as the order does at most once a second
    store.add_catalog(_rows([f"k{i:03d}" for i in range(1, 600, 2)], ranks))  # the odd keys, late
    restarted = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False,
                           inflight=lambda: 0, listing=lambda: True)
    more: list[str] = []
    _fetch(restarted, store, 300, more)
    assert sorted(more) == [f"k{i:03d}" for i in range(1, 600, 2)]
    assert restarted.owed >= 44 and restarted.passes == 0
    store.close()


def test_while_listing_the_pass_goes_up_the_order_no_faster_than_its_pace(tmp_path: Path) -> None:
    """A listing that has seen 100 keys of an estimated 100,000: the pass fetches only the listed
    keys within LEAD times a fair sample's share of the order (plus PACE_START keys' worth), not
    all of the first keys listed; once the listing is complete, the rest."""
    from epochfs.sidecar.sampler.pace import LEAD, PACE_START
    from epochfs.sidecar.store.listings import Part

    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1, in_use_seconds=60.0))
    listings = store.listings()
    gen = listings.begin([Part(0, "", "", None)], "list")
    step = 2**64 // 100
    keys = [f"k{i:03d}" for i in range(100)]
    rows = [CatalogRow(k, sid_of(k), 10, "v", rank=-(2**63) + i * step + 1) for i, k in enumerate(keys)]
    listings.commit_page(gen, Part(0, "", "", None, after="k099"), rows, skips=0, clashes=[],
                         progress='{"listed": 100, "estimated": 100000, "spans": 1, "spans_reached": 1}')
    order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0,
                       listing=lambda: True)
    fetched: list[str] = []
    with mock.patch("epochfs.sidecar.sampler.order.LISTING_WAIT", 0.0):
        _fetch(order, store, 100, fetched)
    share = LEAD * (len(fetched) + PACE_START) / 100_000
    assert 0 < len(fetched) <= int(share * 100) + 1, fetched
    assert fetched == keys[:len(fetched)]
    listings.finish(gen)  # the listing is complete: no pace
    with mock.patch("epochfs.sidecar.sampler.order.LISTING_WAIT", 0.0):
        _fetch(order, store, 100, fetched)
    assert sorted(fetched) == keys


def test_while_the_first_round_of_pages_runs_the_pass_waits_for_it(tmp_path: Path) -> None:
    """The first keys listed are the first folders' first pages: the pass fetches nothing until
    every folder has a page listed (or the wait's bound has passed), then goes on."""
    import json
    import time

    from epochfs.sidecar.store.listings import Part

    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1, in_use_seconds=60.0))
    listings = store.listings()
    gen = listings.begin([Part(0, "a/", "", None), Part(1, "b/", "", None)], "list")
    keys = [f"a/{i:03d}" for i in range(10)]
    known = {"listed": 10, "estimated": 20, "spans": 2, "spans_reached": 1, "first_round": False,
             "began": time.time()}
    listings.commit_page(gen, Part(0, "a/", "", None, after="a/009"), _rows(keys, {k: 0 for k in keys}),
                         skips=0, clashes=[], progress=json.dumps(known))
    order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0,
                       listing=lambda: True)
    with mock.patch("epochfs.sidecar.sampler.order.LISTING_WAIT", 0.0):
        assert order.next() is None  # folder b/ has no page yet
        known.update(spans_reached=2, first_round=True)
        listings.commit_page(gen, Part(1, "b/", "", None), [], skips=0, clashes=[],
                             progress=json.dumps(known))
        got = order.next()
    assert got is not None and got.key.startswith("a/")


def test_a_relist_does_not_pace_the_pass(tmp_path: Path) -> None:
    """A relist runs over a complete catalog: its first pages make the estimate of the whole
    huge (listed / covered), but the pass must go on at full speed, not at a fair sample's pace
    of a dataset it already knows whole."""
    from epochfs.sidecar.store.listings import Part

    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1, in_use_seconds=60.0))
    listings = store.listings()
    keys = [f"k{i:03d}" for i in range(100)]
    step = 2**64 // 100
    rows = [CatalogRow(k, sid_of(k), 10, "v", rank=-(2**63) + i * step + 1) for i, k in enumerate(keys)]
    gen = listings.begin([Part(0, "", "", None)], "list")
    listings.commit_page(gen, Part(0, "", "", None, after="k099", done=True), rows, skips=0, clashes=[])
    listings.finish(gen)
    relist = listings.begin([Part(0, "", "", None)], "list")  # a relist: one page of 1,000 seen
    listings.commit_page(relist, Part(0, "", "", None, after="k000"), rows[:1], skips=0, clashes=[],
                         progress='{"listed": 1, "estimated": 100000, "spans": 1, "spans_reached": 1}')
    order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0,
                       listing=lambda: True)
    fetched: list[str] = []
    with mock.patch("epochfs.sidecar.sampler.order.LISTING_WAIT", 0.0):
        _fetch(order, store, 100, fetched)
    assert fetched == keys
    store.close()


def test_when_the_pace_falls_the_fetched_keys_stay_the_listed_keys_below_one_rank(tmp_path: Path) -> None:
    """The pace falls when the listing's estimate of the whole grows (or its skew rises); the
    cursor does not: keys listed later below it are owed and fetched, so what is cached stays
    exactly the listed keys below one rank, a uniform sample of what is listed whenever each key
    was listed. A cursor stepped back to the lower pace left the keys fetched above it in the
    cache, all from what was listed first (tried: a nested key space's samples 0.10 from the
    folder mix where the listed keys were 0.01)."""
    from epochfs.sidecar.store.listings import Part

    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1, in_use_seconds=60.0))
    listings = store.listings()
    gen = listings.begin([Part(0, "", "", None)], "list")
    step = 2**64 // 1000
    rank = {f"k{i:04d}": -(2**63) + i * step + 1 for i in range(1000)}

    def rows(names: list[str]) -> list[CatalogRow]:
        return [CatalogRow(k, sid_of(k), 10, "v", rank=rank[k]) for k in names]

    # Every tenth key listed, with an estimate of 10,000 keys in all: the pace lets the walk go
    # to LEAD * PACE_START / 10,000 = 40% of the order.
    first = [f"k{i:04d}" for i in range(0, 1000, 10)]
    listings.commit_page(gen, Part(0, "", "", None, after="a"), rows(first), skips=0, clashes=[],
                         progress='{"listed": 100, "estimated": 10000, "spans": 1, "spans_reached": 1}')
    order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0,
                       listing=lambda: True)
    fetched: list[str] = []
    with mock.patch("epochfs.sidecar.sampler.order.LISTING_WAIT", 0.0):
        _fetch(order, store, 1000, fetched)
        assert 30 <= len(fetched) <= 45, fetched  # about 40% of the 100 listed
        cursor = max(rank[k] for k in fetched)
        # The listing found the end: 1M keys in all, the pace under 0.5% of the order now.
        later = [f"k{i:04d}" for i in range(1000) if i % 10]
        listings.commit_page(gen, Part(0, "", "", None, after="b"), rows(later), skips=0, clashes=[],
                             progress='{"listed": 1000, "estimated": 1000000, "spans": 1, '
                                      '"spans_reached": 1}')
        _fetch(order, store, 1000, fetched)
    assert sorted(fetched) == sorted(k for k in rank if rank[k] <= cursor)
    store.close()
