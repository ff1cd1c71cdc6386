"""The FUSE view's memory does not grow with the number of epochs viewed (issue 14): it keeps at
most ``TREES_KEPT`` epoch trees and manifests built, and builds any other again when asked (each
answer unchanged: an epoch is immutable). Before, a tree and a manifest stayed per live epoch."""

from __future__ import annotations

from pathlib import Path

from fuse_helpers import admit, make_objects, open_store

from epochfs.fuse.view import View

TREES_KEPT = 3  # fuse.view.TREES_KEPT: a trainer's epoch, the next one, one more reader's

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


def test_three_epochs_read_in_turn_are_each_built_once_and_the_least_recently_used_goes_first(
        tmp_path: Path) -> None:
    """A trainer's epoch, the next one warmed and an evaluation of a pinned one, read in turn: each
    tree is built once (a request by inode needs its epoch's tree: a tree rebuilt at each turn is a
    pass over the store per request). The one dropped for a fourth is the least recently used, not
    the first built. Before: two kept, the first built dropped: every turn rebuilt a tree."""
    store = open_store(tmp_path / "cache", keep_epochs=6)
    try:
        for n in range(4):
            admit(store, make_objects(3, 8, start=3 * n))
            assert store.cut(n) == n
        view = View(store=store, link_root=LINK_ROOT)
        first = {n: view.tree(n) for n in range(3)}
        manifests = {n: view.packed_manifest(n) for n in range(3)}
        for _turn in range(3):
            for n in range(3):
                assert view.tree(n) is first[n], f"epoch {n}'s tree was built again"
                assert view.packed_manifest(n) is manifests[n], f"epoch {n}'s manifest was built again"
        view.tree(0)  # epoch 1 is now the least recently used; epoch 0 the first built
        view.packed_manifest(0)
        view.tree(3)
        view.packed_manifest(3)
        assert view.tree(0) is first[0] and view.packed_manifest(0) is manifests[0]
        assert view.tree(2) is first[2]
        assert set(view._trees) == {0, 2, 3} and set(view._manifests) == {0, 2, 3}
    finally:
        store.close()
