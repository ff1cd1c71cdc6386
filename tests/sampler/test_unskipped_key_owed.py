"""A key skipped in this pass (its downloads failed: deleted from the remote for a while) that a
relist lists again is owed to the pass: fetched before the pass goes further up the order, not left
for the next pass over the whole order.

The relist cleared the skip in place, and the row kept the number (rowid) the pass had offered, so
the fetch order, which looks for owed rows among those listed since its last look, never found it
(0 GETs of ten put-back keys in a reviewer's run). The relist now numbers it as a row listed now.

Real parts: the store, the relist's page commits (``Listings``), the loop's skip of a key whose
downloads failed (``give_up``) and the fetch order; the downloads are the test's (``put`` admits
a sample as the sampler does).
"""

from __future__ import annotations

from pathlib import Path

from store_helpers import put, sid_of

from epochfs.sidecar.sampler.breaker import give_up
from epochfs.sidecar.sampler.order import LISTING_REFILL, FetchOrder
from epochfs.sidecar.store import CatalogRow, Policy, Store
from epochfs.sidecar.store.listings import Part

KEYS = [f"k{i:04d}" for i in range(1000)]
RANK = {k: -(2**63) + (i + 1) * (2**64 // 2000) for i, k in enumerate(KEYS)}
"""Ranks in the keys' order: the sampling order is the keys sorted."""
GONE = KEYS[150:160]
"""Deleted from the remote just ahead of the cursor, then put back."""
WHOLE = Part(0, "", "", None, after="z", done=True)


def _rows(keys: list[str]) -> list[CatalogRow]:
    return [CatalogRow(k, sid_of(k), 10, "v", rank=RANK[k]) for k in keys]


def test_a_skipped_key_a_relist_lists_again_is_fetched_in_this_pass(tmp_path: Path) -> None:
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1))
        listings = store.listings()
        gen = listings.begin([Part(0, "", "", None)], "list")
        listings.commit_page(gen, WHOLE, _rows(KEYS), skips=0, clashes=[])
        listings.finish(gen)
        running = [False]
        order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0,
                           listing=lambda: running[0])

        def fetch(n: int) -> list[str]:
            got = []
            for _ in range(n):
                cand = order.next()
                assert cand is not None
                if cand.key in GONE:
                    give_up(store, cand.key)  # 404: the loop skips it for good
                else:
                    put(store, cand.key, 10)
                got.append(cand.key)
            return got

        assert fetch(300) == KEYS[:300]
        assert store.stats().skipped_total == len(GONE)
        relist = listings.begin([Part(0, "", "", None)], "list")  # the keys are back on the remote
        running[0] = True
        listings.commit_page(relist, WHOLE, _rows(KEYS), skips=0, clashes=[])
        listings.finish(relist)
        after = fetch(len(GONE) + LISTING_REFILL)
        again = [k for k in after if k in GONE]
        print(f"fetches of the {len(GONE)} keys listed again: {len(again)}; first fetches {after[:12]}")
        assert again == GONE, f"{len(again)} of the keys listed again fetched in this pass"
        assert order.passes == 0
        assert store.stats().skipped_total == len(GONE), "the skips are counted once"
