"""The FUSE view's memory does not grow with the number of epochs viewed (issue 14): it keeps at
most ``TREES_KEPT`` epoch trees and manifests built, and builds any other again when asked (each
answer unchanged: an epoch is immutable). Before, a tree and a manifest stayed per live epoch."""

from __future__ import annotations

from pathlib import Path

from fuse_helpers import admit, make_objects, open_store

from epochfs.fuse.view import View

TREES_KEPT = 2  # fuse.view.TREES_KEPT: a trainer's epoch and the next one

LINK_ROOT = Path("/cache/objects-ro")


def test_trees_kept_do_not_grow_with_the_epochs_viewed(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", keep_epochs=6)
    try:
        listings = {}
        for n in range(6):
            admit(store, make_objects(3, 8, start=3 * n))
            assert store.cut(n) == n
        view = View(store=store, link_root=LINK_ROOT)
        for n in range(6):
            listings[n] = view.listdir(f"/epoch-{n}/train")
            assert view.read_file(f"/.epochfs/epoch-{n}.manifest")
            assert len(view._trees) <= TREES_KEPT and len(view._manifests) <= TREES_KEPT
        for n in range(6):  # built again on demand, the same
            assert view.listdir(f"/epoch-{n}/train") == listings[n]
            assert len(view._trees) <= TREES_KEPT
    finally:
        store.close()
