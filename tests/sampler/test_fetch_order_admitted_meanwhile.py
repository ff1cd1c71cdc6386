"""A key whose download is admitted between the fetch order's read of the catalog and its look at
which keys are busy is not handed out again.

The refill reads the rows not yet cached, then drops the busy ones (in flight, waiting for their
admission batch...). The admitter commits a batch and then lets its keys go: a key committed after
the read but let go before the look was neither cached (to the read) nor busy (to the look), so it
was fetched a second time. The full suite met it (`test_throttle_inprocess`: 36 keys fetched twice
after a pass wrapped while their admissions landed). Here the admitter's commit is made to fall in
that gap, deterministically: the ``busy`` look admits the key and then answers no longer busy."""

from __future__ import annotations

from pathlib import Path

from store_helpers import put, sid_of

from epochfs.sidecar.sampler.order import FetchOrder
from epochfs.sidecar.store import CatalogRow, Policy, Store


def test_a_key_admitted_between_the_read_and_the_busy_look_is_not_handed_out(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache", create=True)
    try:
        store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1, in_use_seconds=60.0))
        keys = [f"train/{i:02d}.bin" for i in range(6)]
        store.add_catalog([CatalogRow(k, sid_of(k), 10, "v", rank=i - 3) for i, k in enumerate(keys)])
        store.finalize_catalog()
        landing = {"train/02.bin", "train/04.bin"}  # downloaded, their batch committing now

        def busy(key: str) -> bool:
            if key in landing:
                landing.discard(key)
                put(store, key, 10)  # the admitter's commit, then it lets the key go
            return False

        order = FetchOrder(store=store, schedule_mode=False, busy=busy, inflight=lambda: 0,
                           listing=lambda: False)
        handed = []
        while (cand := order.next()) is not None and len(handed) < 10:
            handed.append(cand.key)
            put(store, cand.key, 10)
        assert handed == ["train/00.bin", "train/01.bin", "train/03.bin", "train/05.bin"], handed
    finally:
        store.close()
