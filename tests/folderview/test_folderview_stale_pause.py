"""A publisher killed while paused (its volume full, or a user's folder holding a live epoch's name)
leaves its reason in the index; the next publisher, which never pauses, clears it at its first step.
Recorded only when it changed, the dead run's reason stayed in status, /v1/cut and
``epochfs_publish_paused`` for good.

The real store and :class:`~epochfs.sidecar.folderview.FolderPublisher`, run by the loop ``epochfs
publish`` runs, on a thread of the test."""

from __future__ import annotations

from pathlib import Path

from common import wait_until
from folderview_helpers import publishing
from fuse_helpers import admit, make_objects, open_store

from epochfs.sidecar.store import Meta, Store
from epochfs.torchclient import layout


def test_a_pause_a_killed_publisher_left_is_cleared_by_the_next(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", keep_epochs=5)
    admit(store, make_objects(4, 10))
    store.cut(0)
    store.set_meta(Meta.PUBLISH_PAUSED, "the folder view's volume is full (No space left on device: /v)")
    store.close()
    folder = tmp_path / "view"
    with publishing(tmp_path / "cache", folder) as failed, Store(tmp_path / "cache") as reader:
        wait_until(lambda: failed or layout.manifest_path(folder, 0).exists(), timeout=30,
                   what="epoch 0 published")
        wait_until(lambda: failed or reader.meta(Meta.PUBLISH_PAUSED) is None, timeout=30,
                   what="the dead publisher's pause cleared")
        assert not failed, failed
