"""The next epoch's tree built ahead (issue 25), in-process on real folders and a real store.

Two publishers follow the same store: one builds ahead (``ahead=True``), the other writes every
epoch whole (the reference). After every cut both folders must hold byte-identical manifests and
identical trees (names, targets, folder modes), and the ahead publisher must have shown the epoch
from its tree (``Step.ahead``), with entries carried over from the epoch before as hard links of
its symlinks. Cuts come while samples land, the epoch budget's front moves and eviction removes
the oldest samples; a path clash and a sample taken out of the store make it write the epoch
whole, still identical.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from folderview_helpers import pair, same_epoch, settle, tree_of
from fuse_helpers import admit, make_objects, open_store

from epochfs.sidecar import folderview
from epochfs.sidecar.store.epochpins import RETIRE_GRACE


def test_cuts_are_shown_from_the_tree_built_ahead_identical_to_a_whole_build(tmp_path: Path) -> None:
    # A small cache: the epoch budget's front moves and eviction takes the oldest samples.
    store = open_store(tmp_path / "cache", capacity=400 * 100, keep_epochs=2, in_use_seconds=0.0,
                       headroom=0.5)
    admit(store, make_objects(20, 100, prefix="old/deep/", seed=5))  # the first to leave: folders empty
    admit(store, make_objects(150, 100, prefix="train/a/", seed=1))
    store.cut(0)
    ahead, whole = pair(store, tmp_path)
    start, used = 150, []
    for round_ in range(6):
        settle(ahead)
        added = make_objects(60, 100, prefix=f"train/{'ab'[round_ % 2]}/", seed=2, start=start)
        admit(store, added)  # evicts the oldest once the cache is full
        start += 60
        ahead.step()  # some land before the cut, seen ahead...
        admit(store, make_objects(3, 100, prefix="val/", seed=3, start=start))
        start += 3  # ...and some only at the cut
        n = store.cut(store.next_epoch())
        assert n is not None
        # The retirement this cut makes due, a grace ago: the next admissions may evict its samples.
        store.retire(now=time.time() - RETIRE_GRACE - 1)
        admit(store, make_objects(2, 100, prefix="late/", seed=4, start=start))
        start += 2  # landed after the cut, before it is shown: in the next epoch only
        step = ahead.step()
        whole.step()
        assert step.published == [n]
        used += step.ahead
        same_epoch(ahead, whole, n)
        store.retire(now=time.time() + 10_000)
    assert used == list(range(1, 7)), used  # every cut came from the tree built ahead
    assert not (ahead.folder / "epoch-6" / "old").exists()  # emptied folders went with their entries
    assert store.stats().evicted_total > 0  # the front moved: eviction happened meanwhile
    # Entries carried over are hard links of the epoch before's symlinks: one inode per entry.
    ahead.step()
    whole.step()
    ahead.drain()
    new, old = tree_of(ahead.folder / "epoch-6"), tree_of(ahead.folder / "epoch-5")
    shared = [rel for rel in new if not rel.endswith("/") and rel in old]
    assert len(shared) > 100
    for rel in shared:
        one, two = os.lstat(ahead.folder / "epoch-6" / rel), os.lstat(ahead.folder / "epoch-5" / rel)
        assert one.st_ino == two.st_ino and one.st_nlink >= 2, rel
    # Retired epochs left the folder; nothing but the tree being built ahead is a temporary name.
    built = ahead._ahead.tree.tree
    assert sorted(os.listdir(ahead.folder)) == sorted([*os.listdir(whole.folder), built.name])
    assert built.name.startswith(folderview.TEMP_PREFIX)


def test_a_clash_or_a_sample_taken_out_is_written_whole_still_identical(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache")
    admit(store, make_objects(50, 10, prefix="d/", seed=1))
    store.cut(0)
    ahead, whole = pair(store, tmp_path)
    settle(ahead)
    # A sample taken out of the store inside the next epoch's range (the scrub's quarantine).
    victim = next(o for o in store.stored_objects(after_id=10, limit=1))
    store.take_out([(victim, "test")], quarantine=False)
    n = store.cut(store.next_epoch())
    assert n is not None
    step = ahead.step()
    whole.step()
    assert step.published == [n] and step.ahead == [n]  # found and dropped at the cut: still ahead
    same_epoch(ahead, whole, n)
    # A key that is a file and a folder prefix of another: the tree builder shows the folder,
    # which a tree grown in admission order cannot: written whole.
    admit(store, {"d/00001.bin/x": b"clash"})
    settle(ahead)
    n = store.cut(store.next_epoch())
    assert n is not None
    step = ahead.step()
    whole.step()
    assert step.published == [n] and step.ahead == []
    same_epoch(ahead, whole, n)


def test_retiring_runs_in_the_background_and_nothing_visible_is_half_removed(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=0.0)
    admit(store, make_objects(300, 10, prefix="r/", seed=1))
    store.cut(0)
    ahead, _ = pair(store, tmp_path)
    settle(ahead)
    store.cut(1)
    assert store.retire(now=time.time() + 10_000) == [0]
    step = ahead.step()
    assert step.published == [1] and step.retired == [0]
    assert not (ahead.folder / "epoch-0").exists()
    assert not (ahead.folder / ".epochfs/epoch-0.manifest").exists()
    ahead.drain()
    left = [n for n in os.listdir(ahead.folder) if n.startswith(folderview.TEMP_PREFIX + "retired-")]
    assert left == []


def test_a_publish_never_waits_for_a_removal_in_progress(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Retiring hands the tree to the remover's thread: while a removal is in progress (here held
    until the test lets it go, as a 1M-entry tree takes tens of seconds), the next epochs are
    published from the tree built ahead all the same."""
    from epochfs.sidecar import folderview_remove

    held, entered = threading.Event(), threading.Event()
    real = folderview_remove.remove_tree
    in_the_publishers_thread: list[Path] = []

    def slow_removal(path: Path) -> None:
        if threading.current_thread() is threading.main_thread():  # the step itself would wait
            in_the_publishers_thread.append(path)
        else:
            entered.set()
            held.wait(60)
        real(path)

    monkeypatch.setattr(folderview_remove, "remove_tree", slow_removal)
    store = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=0.0)
    admit(store, make_objects(300, 10, prefix="r/", seed=1))
    store.cut(0)
    ahead, _ = pair(store, tmp_path)
    try:
        for n in (1, 2):
            admit(store, make_objects(20, 10, prefix="r/", seed=10 + n, start=1000 * n))
            settle(ahead)
            assert store.cut(n) == n
            store.retire(now=time.time() + 10_000)
            step = ahead.step()
            assert step.published == [n] and step.ahead == [n], step
            assert (ahead.folder / f"epoch-{n}").is_dir()
            assert entered.wait(10), "the retired tree went to the remover"
        assert not held.is_set()  # both published while the first removal was still held
        assert in_the_publishers_thread == []
    finally:
        held.set()
        ahead.drain()
    left = [x for x in os.listdir(ahead.folder) if x.startswith(folderview.TEMP_PREFIX + "retired-")]
    assert left == []
