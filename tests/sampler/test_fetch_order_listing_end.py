"""The fetch order asks the catalog again as soon as the listing ends, not after the wait of an
exhausted catalog: a small dataset is listed whole within a fraction of a second, often just after
the order found nothing to offer, and its fetches stalled for that wait (a second without a GET)."""

from __future__ import annotations

from pathlib import Path

from store_helpers import sid_of

from epochfs.sidecar.sampler.order import EXHAUSTED_WAIT, FetchOrder
from epochfs.sidecar.store import CatalogRow, Policy, Store


def _order(tmp_path: Path, listing: list[bool]) -> tuple[Store, FetchOrder]:
    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1, in_use_seconds=60.0))
    order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0,
                       listing=lambda: listing[0])
    return store, order


def test_the_listing_ending_right_after_an_empty_look_is_fetched_from_at_once(tmp_path: Path) -> None:
    listing = [True]
    store, order = _order(tmp_path, listing)
    try:
        assert order.next() is None  # nothing listed yet: the order waits for the listing
        keys = [f"train/{i:04d}.bin" for i in range(20)]
        store.add_catalog([CatalogRow(k, sid_of(k), 10, "v", rank=i) for i, k in enumerate(keys)])
        store.finalize_catalog()
        listing[0] = False  # the listing ended within the wait of an exhausted catalog
        assert EXHAUSTED_WAIT > 0.5  # what the order would otherwise wait out
        cand = order.next()
        assert cand is not None and cand.key in keys, "the order waited out its wait after the listing ended"
    finally:
        store.close()


def test_a_catalog_found_empty_after_the_listing_is_not_asked_again_at_once(tmp_path: Path) -> None:
    listing = [False]
    store, order = _order(tmp_path, listing)
    try:
        store.finalize_catalog()
        assert order.next() is None
        key = "train/0000.bin"
        store.add_catalog([CatalogRow(key, sid_of(key), 10, "v", rank=0)])
        # Nothing changed that the order knows of: it keeps its wait (the store is not polled in a loop).
        assert order.next() is None
    finally:
        store.close()
