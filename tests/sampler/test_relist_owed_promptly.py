"""Keys a relist adds behind the pass's cursor are owed and fetched before the pass goes further up
the order than the queue a listing allows (:data:`~epochfs.sidecar.sampler.order.LISTING_REFILL`).

The fetch order looks for owed keys when it refills its queue. A queue filled while no listing ran
holds REFILL (512) walk keys, so the keys a relist added below the cursor waited behind up to 512
further ones (417 GETs before the first of them in a reviewer's run). Now the queue is cut to a
listing's refill once a listing is seen running, and, at the pass's once-a-second record, emptied
when the catalog grew since the last refill (a relist that began and ended between two looks).

Real parts: the store, the relist's page commits (``Listings``) and the fetch order; the downloads
are the test's (``put`` admits a sample as the sampler does).
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
from store_helpers import put, sid_of

from epochfs.sidecar.sampler.order import LISTING_REFILL, REFILL, FetchOrder
from epochfs.sidecar.store import CatalogRow, Policy, Store
from epochfs.sidecar.store.listings import Part

STEP = 2**64 // 4000
RANK = {f"k{i:04d}": -(2**63) + (i + 1) * STEP for i in range(2000)}
"""Ranks in the keys' order: the sampling order is the keys sorted."""
LISTED = [f"k{i:04d}" for i in range(0, 2000, 2)]
NEW = [f"k{i:04d}" for i in range(1, 100, 2)]
"""Keys added to the remote, all ranked behind the cursor once 100 keys are fetched."""


def _rows(keys: list[str]) -> list[CatalogRow]:
    return [CatalogRow(k, sid_of(k), 10, "v", rank=RANK[k]) for k in keys]


def _walk_before_the_last_new_key(root: Path, *, seen_running: bool) -> int:
    """Walk keys fetched after the relist and before the last of its new keys."""
    with Store(root, create=True) as store:
        store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1))
        listings = store.listings()
        whole = Part(0, "", "", None, after="z", done=True)
        gen = listings.begin([Part(0, "", "", None)], "list")
        listings.commit_page(gen, whole, _rows(LISTED), skips=0, clashes=[])
        listings.finish(gen)
        running = [False]
        order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0,
                           listing=lambda: running[0])

        def fetch() -> str:
            cand = order.next()
            assert cand is not None
            put(store, cand.key, 10)
            return cand.key

        fetched = [fetch() for _ in range(100)]  # k0000-k0198; the queue holds REFILL - 100 more
        assert fetched == LISTED[:100] and len(order._queue) == REFILL - 100
        relist = listings.begin([Part(0, "", "", None)], "list")
        running[0] = seen_running
        listings.commit_page(relist, whole, _rows(sorted(LISTED + NEW)), skips=0, clashes=[])
        if not seen_running:  # it began and ended between two looks of the fetch order
            listings.finish(relist)
        after: list[str] = []
        while not set(NEW) <= set(after):
            after.append(fetch())
            assert len(after) <= REFILL + len(NEW), "the new keys wait for the next pass"
        assert [k for k in after if k in NEW] == NEW, "owed keys come lowest rank first"
        return sum(k not in NEW for k in after)


@pytest.mark.parametrize("seen_running", [True, False], ids=["relist-running", "relist-already-done"])
@mock.patch("epochfs.sidecar.sampler.order.OFFERED_EVERY", 0.0)
def test_keys_a_relist_adds_behind_the_cursor_are_fetched_before_the_walk_goes_on(
        tmp_path: Path, seen_running: bool) -> None:
    walked = _walk_before_the_last_new_key(tmp_path / "cache", seen_running=seen_running)
    print(f"walk keys fetched before the keys the relist added: {walked}")
    assert walked <= LISTING_REFILL, f"{walked} walk keys went before keys owed to the pass"
