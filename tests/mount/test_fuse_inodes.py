"""Inode numbers computed from the view (the low-level adapter keeps no table of them): every node of
random nested trees has a number that maps back to its path, numbers are distinct, and numbers of
retired epochs or out-of-range nodes name nothing."""

from __future__ import annotations

import ctypes
from pathlib import Path
from types import SimpleNamespace

import pytest
from fuse_helpers import admit, make_objects, open_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochfs.fuse.inodes import (
    CONTROL_INO,
    LATEST_INO,
    MAX_EPOCH,
    ROOT_INO,
    STATUS_INO,
    Inodes,
    epoch_ino,
    manifest_ino,
    split_ino,
)
from epochfs.fuse.lowlevel_abi import MissingCall, bind
from epochfs.fuse.tree import EpochTree, NotADirectory, NotFound
from epochfs.fuse.view import View
from epochfs.sidecar.store import FileEntry

NAMES = st.sampled_from(["a", "a-b", "a.c", "b", "é", "日本", "a b", "z" * 30, "..", ""])
PATHS = st.lists(NAMES, min_size=1, max_size=5).map("/".join)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(PATHS, max_size=80))
def test_every_node_number_maps_back_to_its_path(paths: list[str]) -> None:
    files = sorted((FileEntry(p, 1, f"md5:{i}", f"ab/{i:04d}") for i, p in enumerate(paths)),
                   key=lambda f: f.path)
    tree = EpochTree(epoch=0, cut_at=1.0, files=files, link_root=Path("/objects"))
    seen = set()
    for rel, is_dir in tree.walk():
        node = tree.node_of(rel)
        assert tree.path_of(node) == rel
        seen.add(node)
        if is_dir:
            first = tree.first_child(rel)
            for i, (name, _) in enumerate(tree.listdir(rel)):
                child = f"{rel}/{name}" if rel else name
                assert tree.node_of(child) == first + i  # readdir's numbers are lookups' numbers
        else:
            with pytest.raises(NotADirectory):
                tree.first_child(rel)
    assert len(seen) == sum(1 for _ in tree.walk())
    for bad in (len(seen) - 1, len(seen) + 5, -2):  # the walk counts the root (-1) too
        with pytest.raises(NotFound):
            tree.path_of(bad)


def test_the_number_scheme_keeps_kinds_apart() -> None:
    fixed = {ROOT_INO, CONTROL_INO, LATEST_INO, STATUS_INO}
    numbers = {epoch_ino(n, node) for n in (0, 1, 7, MAX_EPOCH) for node in (-1, 0, 1, 10**6)}
    numbers |= {manifest_ino(n) for n in (0, 1, 7, MAX_EPOCH)}
    assert len(numbers) == 4 * 4 + 4 and not numbers & fixed
    assert split_ino(epoch_ino(7, 41)) == (7, 41)
    assert split_ino(epoch_ino(0)) == (0, -1)
    assert split_ino(manifest_ino(3)) is None and split_ino(STATUS_INO) is None
    for bad in (-1, MAX_EPOCH + 1):
        with pytest.raises(NotFound):
            epoch_ino(bad)
        with pytest.raises(NotFound):
            manifest_ino(bad)


def test_paths_and_numbers_of_a_store_view(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=0.0)
    admit(store, {**make_objects(3, 10, prefix="train/a/"),
                  **make_objects(2, 10, prefix="train/b/", start=3)})
    store.cut(0)
    view = View(store=store, link_root=tmp_path / "objects")
    inodes = Inodes(view)
    paths = ["/", "/.epochfs", "/latest", "/.epochfs/status.json", "/.epochfs/epoch-0.manifest",
             "/epoch-0", "/epoch-0/train", "/epoch-0/train/a", "/epoch-0/train/b/00004.bin"]
    numbers = [inodes.ino(p) for p in paths]
    assert len(set(numbers)) == len(paths)
    assert [inodes.path(i) for i in numbers] == paths
    assert inodes.first_child_ino("/") is None and inodes.first_child_ino("/.epochfs") is None
    assert inodes.first_child_ino("/epoch-0/train/b") == inodes.ino("/epoch-0/train/b/00003.bin")
    for missing in ("/epoch-0/train/c", "/nope", "/.epochfs/other", "/epoch-1/train"):
        with pytest.raises(NotFound):
            inodes.ino(missing)
    # Epoch 0 retires: its numbers name nothing any more (the kernel is told, and gets ENOENT).
    admit(store, make_objects(2, 10, prefix="train/c/", start=9))
    store.cut(1)
    assert store.retire() == [0]
    view.refresh()
    assert 0 not in view.snapshot.live
    with pytest.raises(NotFound):
        inodes.path(numbers[paths.index("/epoch-0/train/a")])
    assert inodes.path(numbers[paths.index("/epoch-0")]) == "/epoch-0"  # a name only: getattr says ENOENT
    with pytest.raises(NotFound):
        inodes.path(1 << 40 | 5)  # a node of an epoch that never was
    store.close()


def test_a_libfuse_without_a_low_level_call_is_named() -> None:
    partial = SimpleNamespace(fuse_session_new=SimpleNamespace(), fuse_session_mount=SimpleNamespace(),
                              fuse_session_unmount=SimpleNamespace())
    with pytest.raises(MissingCall, match="libfuse has no fuse_session_destroy"):
        bind(partial)
    assert partial.fuse_session_mount.restype is ctypes.c_int


class _Shifting:
    """A stand-in view whose epoch 0 is built from another file list the second time: what the
    contract forbids, and what must not make a kernel-held number name another file."""

    def __init__(self, lists: list[list[FileEntry]]) -> None:
        self.lists = lists

    def tree(self, n: int) -> EpochTree:
        files = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
        return EpochTree(epoch=n, cut_at=1.0, files=files, link_root=Path("/objects"))


def test_a_number_of_an_epoch_whose_files_changed_names_nothing() -> None:
    before = [FileEntry(f"c/{i}", 1, "md5:0", f"ab/{i:04d}") for i in range(5)]
    after = [FileEntry(f"c/{i}", 1, "md5:0", f"ab/{i:04d}") for i in range(1, 6)]  # same shape, other files
    inodes = Inodes(_Shifting([before, after]))  # type: ignore[arg-type]
    ino = inodes.ino("/epoch-0/c/2")
    with pytest.raises(NotFound, match="changed since its inode numbers were given"):
        inodes.path(ino)
    with pytest.raises(NotFound, match="changed"):
        inodes.ino("/epoch-0/c/3")
    same = Inodes(_Shifting([before, list(before)]))  # type: ignore[arg-type]
    assert same.path(same.ino("/epoch-0/c/2")) == "/epoch-0/c/2"
