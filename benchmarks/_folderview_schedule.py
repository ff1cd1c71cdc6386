"""Schedule mode for the folder view's wait (``--schedule``): a store whose epochs are windows.

Apart from :mod:`.folderview` to keep that module to its phases: this builds the store the
schedule-mode wait runs on (a complete catalog in a shuffled sampling order, windows growing by
``--growth``), which the snapshot-mode wait builds from admissions alone.
"""

from __future__ import annotations

import random
from pathlib import Path

from epochfs.sidecar.keys import sample_id
from epochfs.sidecar.store import Admission, CatalogRow, Policy, Schedule, Store

ONE_BYTE_MD5 = "md5:9dd4e461268c8034f5c8564e155c67a6"


def schedule_store(cache: Path, entries: int, growth: float, repeat: int) -> tuple[Store, list[str]]:
    """A schedule-mode store (``--schedule``): a complete catalog ranked in a shuffled order, epoch
    N's window the first ``entries x (1 + growth)^N`` keys of it, epoch 0's window admitted; the
    keys in sampling order (what the sampler fetches next)."""
    total = int(entries * (1 + growth) ** (repeat + 2)) + 10
    store = Store(cache, create=True)
    store.configure(Policy(capacity=1 << 40, keep_epochs=2, min_samples=1, in_use_seconds=1.0,
                           schedule=Schedule(initial=entries, growth=1 + growth)))
    keys = [f"train/part-{i % 100:03d}/{i:07d}.bin" for i in range(total)]
    ranks = random.Random(0).sample(range(10 * total), total)
    store.add_catalog(CatalogRow(k, sample_id(k), 1, "v1", rank=r) for k, r in zip(keys, ranks, strict=True))
    store.finalize_catalog()
    order = [k for _, k in sorted(zip(ranks, keys, strict=True))]
    admit_keys(store, order[:entries])
    return store, order


def admit_keys(store: Store, keys: list[str]) -> None:
    """One-byte samples of ``keys``, 1,000 at a time without per-file fsync, each batch followed by
    the sampler's look at the queued cuts (``process_cut_requests``), which in schedule mode also
    keeps the next window's facts measured ahead (one row read while they are)."""
    for lo in range(0, len(keys), 1000):
        batch = []
        for key in keys[lo:lo + 1000]:
            temp = store.temp_path()
            temp.write_bytes(b"x")
            batch.append(Admission(key, sample_id(key), 1, ONE_BYTE_MD5, "v1", temp))
        store.admit(batch, inflight_bytes=0)
        store.process_cut_requests()
