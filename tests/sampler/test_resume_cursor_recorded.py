"""A restarted snapshot-mode pass goes on from the cursor the last run recorded, not from a rank
guessed from the newest admissions.

A cache that turns over evicts what it admitted, and an evicted key looks like one never fetched.
The restart used to go on from just before the lowest rank among the newest 256 admissions; keys
listed late (owed to the pass, low ranks) are admitted last, so that rank fell far below the real
cursor and every key admitted and evicted in between was downloaded again (219 of 436 in a
reviewer's run). The cursor is now recorded (at most once a second, with how far the pass offered
the catalog's rows), behind the keys still in flight, and nothing owed is lost across the restart.

Real parts: the store (its catalog, listings, cuts and evictions) and the fetch order; the
downloads are the test's (``put`` admits a sample as the sampler does). The record's once-a-second
throttle is set to every call, so that where the run stops is exact.
"""

from __future__ import annotations

import time
from pathlib import Path
from unittest import mock

from store_helpers import put, sample_checksums, sid_of

from epochfs.sidecar.sampler.order import FetchOrder
from epochfs.sidecar.store import CatalogRow, Meta, Policy, Store
from epochfs.sidecar.store.epochpins import RETIRE_GRACE
from epochfs.sidecar.store.listings import Part

SIZE = 100
STEP = 2**64 // 4000
KEYS = [f"k{i:04d}" for i in range(2000)]
RANK = {k: -(2**63) + (i + 1) * STEP for i, k in enumerate(KEYS)}
"""Ranks in the keys' order: the sampling order is the keys sorted."""


def _rows(keys: list[str]) -> list[CatalogRow]:
    return [CatalogRow(k, sid_of(k), SIZE, "v", rank=RANK[k]) for k in keys]


def _cached(store: Store) -> set[str]:
    return {key for key, _, _ in sample_checksums(store)}


class Run:
    """One sampler run's fetch order over ``store``, its downloads and the cache's turnover: a cut
    and an eviction of everything out of the live epoch every 50 admissions (capacity 200
    samples, one epoch of 100 kept)."""

    def __init__(self, store: Store, *, listing: bool = False) -> None:
        self.store = store
        self.inflight: set[str] = set()
        self.listing = listing
        """The listing runs (its ``running``)."""
        self.order = FetchOrder(store=store, schedule_mode=False, busy=self.inflight.__contains__,
                                inflight=lambda: len(self.inflight), listing=lambda: self.listing)
        self.admitted: list[str] = []

    def fetch(self, n: int) -> None:
        for _ in range(n):
            cand = self.order.next()
            assert cand is not None
            put(self.store, cand.key, SIZE)
            self.admitted.append(cand.key)
            if len(self.admitted) % 50 == 0:
                assert self.store.cut(force=True) is not None
                # Retired at the real clock, then evicted as if the grace had passed since: retired
                # at the later clock, each epoch's stamp would lie within the grace of the next
                # eviction's clock whenever a second passed between two cuts (a loaded machine),
                # and the cache would fill ("no room").
                self.store.retire()
                self.store.evict(1 << 30, now=time.time() + RETIRE_GRACE + 1)

    def hand_out(self, n: int) -> list[str]:
        """``n`` keys handed out whose downloads are in flight when the run stops."""
        keys = []
        for _ in range(n):
            cand = self.order.next()
            assert cand is not None
            self.inflight.add(cand.key)
            keys.append(cand.key)
        return keys


@mock.patch("epochfs.sidecar.sampler.order.OFFERED_EVERY", 0.0)
def test_a_restart_downloads_nothing_it_admitted_and_loses_nothing_owed(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=200 * SIZE, keep_epochs=1, min_samples=1, headroom=0.5,
                           in_use_seconds=0.0))
    listings = store.listings()
    gen = listings.begin([Part(0, "", "", None)], "list")
    evens, odds = KEYS[0::2], KEYS[1::2]
    listings.commit_page(gen, Part(0, "", "", None, after="a"), _rows(evens), skips=0, clashes=[])

    first = Run(store, listing=True)
    first.fetch(608)  # the even keys k0000-k1214 (19 refills of the queue); the cache turns over
    assert first.admitted == evens[:608]
    cursor = RANK["k1214"]
    # The odd keys are listed late: those below the cursor are owed, fetched lowest rank first,
    # and are the newest admissions (ranks near the front of the order).
    listings.commit_page(gen, Part(0, "", "", None, after="b", done=True), _rows(odds), skips=0,
                         clashes=[])
    first.fetch(300)
    assert first.admitted[608:] == odds[:300]
    in_flight = first.hand_out(3)  # k0601, k0603, k0605: the stop abandons them
    assert in_flight == odds[300:303]
    evicted = set(first.admitted) - _cached(store)
    assert len(evicted) > 600, "the cache turned over"
    listings.finish(gen)
    first.listing = False

    second = Run(store)  # the restart
    owed_left = [k for k in odds if RANK[k] < cursor and k not in first.admitted]
    walk_next = [k for k in KEYS if RANK[k] > cursor][:100]
    second.fetch(len(owed_left) + len(walk_next))
    again = [k for k in second.admitted if k in set(first.admitted)]
    assert again == [], f"{len(again)} keys the first run had admitted downloaded again: {again[:10]}"
    # What was owed (the keys in flight at the stop among them) comes first, lowest rank first,
    # then the walk goes on above the cursor.
    assert set(in_flight) <= set(owed_left)
    assert second.admitted == owed_left + walk_next
    assert second.order.passes == 0
    store.close()


@mock.patch("epochfs.sidecar.sampler.order.OFFERED_EVERY", 0.0)
def test_the_recorded_cursor_stays_behind_walk_keys_still_in_flight(tmp_path: Path) -> None:
    """Downloads end out of order: a walk key still in flight when the run stops is offered
    again by the restart, though keys above it were admitted meanwhile."""
    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=1 << 30, keep_epochs=1, min_samples=1))
    store.add_catalog(_rows(KEYS[:100]))
    store.finalize_catalog()
    first = Run(store)
    first.fetch(10)
    assert first.hand_out(1) == ["k0010"]  # a slow download
    first.fetch(10)  # k0011-k0020 admitted meanwhile
    assert store.meta(Meta.FETCH_CURSOR) == str(RANK["k0010"] - 1)

    second = Run(store)
    second.fetch(2)
    assert second.admitted == ["k0010", "k0021"]
    store.close()


def test_a_cursor_whose_rows_record_is_forgotten_is_not_used(tmp_path: Path) -> None:
    """What forgets the record of the rows offered (another remote taking a cache that holds
    nothing) forgets the cursor too: the restart goes by the samples (none here: the front)."""
    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=1 << 30, keep_epochs=1, min_samples=1))
    store.record_pass(offered_upto=50, cursor=RANK["k0500"])
    assert store.resume_rank() == RANK["k0500"]
    store.set_meta(Meta.FETCH_OFFERED, None)
    assert store.resume_rank() is None
    store.record_pass(offered_upto=50, cursor=None)  # a pass that starts again from the front
    assert store.resume_rank() is None
    store.close()
