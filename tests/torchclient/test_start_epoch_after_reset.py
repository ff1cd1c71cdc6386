"""A new run on a cache whose index was reset and lost every epoch starts at the first cut to come.

Why: epoch numbers are never reused, even across an index reset (the high-water mark is kept
outside the index), so a cache whose epochs all went with a damaged index cuts its next epoch
above the old numbers. ``start_epoch(root)`` answered 0 there (no epoch is live), and the
documented loop's ``loader.epoch(0)`` failed at once: "below the next epoch 3". The mount's
``status.json`` now names the number the first cut gets (``first_epoch.epoch``), as ``/readyz``
does, and ``start_epoch`` starts there. A real store with three epochs, its members files and its
index damaged, the real ``epochfs mount`` over it.
"""

from __future__ import annotations

import json
from pathlib import Path

from fuse_helpers import admit, cut_epochs, make_objects, mounted, open_store

from epochfs.sidecar.store import INDEX_NAME, Store
from epochfs.sidecar.store.memberfiles import path_of


def _reset_losing_every_epoch(cache: Path) -> None:
    """Three epochs cut and published, then their members files and the index damaged: the
    writer's open resets the index with none of them."""
    with open_store(cache, keep_epochs=3) as store:
        cut_epochs(store, 3)
        store.write_members()
    for n in range(3):
        path_of(cache, n).write_bytes(b"damaged")
    (cache / INDEX_NAME).write_bytes(b"not a database" * 400)
    with Store(cache, create=True) as store:
        assert store.stats().epochs == [] and store.next_epoch() == 3


def test_start_epoch_after_a_reset_that_lost_every_epoch_is_the_first_cut(tmp_path: Path) -> None:
    from epochfs.torchclient import start_epoch

    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    _reset_losing_every_epoch(cache)
    with mounted(cache, mnt):
        status = json.loads((mnt / ".epochfs" / "status.json").read_text())
        assert status["latest_epoch"] is None
        assert status["first_epoch"]["epoch"] == 3, status["first_epoch"]
        assert start_epoch(mnt) == 3


def test_start_epoch_on_a_new_cache_is_0(tmp_path: Path) -> None:
    from epochfs.torchclient import start_epoch

    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    with open_store(cache) as store:
        admit(store, make_objects(3, 100))
    with mounted(cache, mnt):
        status = json.loads((mnt / ".epochfs" / "status.json").read_text())
        assert status["first_epoch"]["epoch"] == 0, status["first_epoch"]
        assert start_epoch(mnt) == 0
