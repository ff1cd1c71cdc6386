"""The stores the folder view's benchmark publishes from (one-byte samples in 100 folders) and the
link root the chart's folder view uses.

Apart from :mod:`.folderview` so that publishing (there) and the wait (:mod:`._folderview_wait`)
share one definition, and the wait imports nothing of :mod:`.folderview`.
"""

from __future__ import annotations

from pathlib import Path

from epochfs.sidecar.keys import sample_id
from epochfs.sidecar.store import Admission, Policy, Store

SHORT_ROOT = Path("/epochfs-ro/objects")  # the chart's folder view: targets of 55 bytes
ONE_BYTE_MD5 = "md5:9dd4e461268c8034f5c8564e155c67a6"


def tiny_store(cache: Path, entries: int) -> Store:
    """A store of ``entries`` one-byte samples in 100 folders (what the publisher works on is the
    index; the objects' bytes do not matter), admitted 1,000 at a time without per-file fsync."""
    store = Store(cache, create=True)
    store.configure(Policy(capacity=1 << 40, keep_epochs=1000, min_samples=1, in_use_seconds=1.0))
    for start in range(0, entries, 1000):
        batch = []
        for i in range(start, min(entries, start + 1000)):
            key = f"train/part-{i % 100:03d}/{i:07d}.bin"
            temp = store.temp_path()
            temp.write_bytes(b"x")
            batch.append(Admission(key, sample_id(key), 1, "md5:9dd4e461268c8034f5c8564e155c67a6", "v1",
                                   temp))
        store.admit(batch, inflight_bytes=0)
    return store


def admit_more(store: Store, start: int, count: int) -> None:
    """``count`` more one-byte samples, keys after ``start`` (they land between two asks)."""
    for lo in range(start, start + count, 1000):
        batch = []
        for i in range(lo, min(start + count, lo + 1000)):
            key = f"train/part-{i % 100:03d}/{i:07d}.bin"
            temp = store.temp_path()
            temp.write_bytes(b"x")
            batch.append(Admission(key, sample_id(key), 1, ONE_BYTE_MD5, "v1", temp))
        store.admit(batch, inflight_bytes=0)
