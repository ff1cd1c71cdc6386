"""The index's backpressure reason "disk full: <why>" (a filesystem that can hold no sample,
sidecar/sampler/room.py) reads as a full disk wherever the index's reason is read: the exported
``epochfs_disk_full`` (the supervisor's exposition takes the larger of it and the sampler's live
gauge, so a 0 here hid nothing under the supervisor, but a scrape of the index alone said 0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from epochfs.sidecar.metrics import StoreCollector
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.stats import CACHE_FULL, DISK_FULL


@pytest.mark.parametrize(("reason", "disk_full"), [
    (DISK_FULL, 1),
    (f"{DISK_FULL}: the cache's filesystem can hold no sample (0 B of --capacity 2.0 MiB)", 1),
    (CACHE_FULL, 0),
    (None, 0),
])
def test_the_exported_disk_full_gauge_reads_every_disk_full_reason(tmp_path: Path, reason: str | None,
                                                                   disk_full: int) -> None:
    with Store(tmp_path / "cache", create=True) as store:
        store.set_backpressure(reason)
        exported = {s.name: s.value for family in StoreCollector(stats=store.stats).collect()
                    for s in family.samples}
    assert exported["epochfs_disk_full"] == disk_full
    assert exported["epochfs_backpressure"] == (0 if reason is None else 1)
