"""A file named like a folder never hides the folder: the folder wins, in every epoch.

A sorted listing skips a key ``c`` beside keys ``c/...`` ("it is also a folder of other keys"),
but an unsorted one (an S3 Inventory, a hand-written index) catalogs both, and the tree builder
then met the file ``c`` first in path order and skipped every ``c/...`` file: ten files of a
folder hidden for one file (``10 of 12 file(s) not shown``). The tree now leaves the file out and
counts it as the clash (docs/listing.md, docs/mount.md "Rows not shown"): through a real mount,
and for any set of paths against the rule written out plainly (hypothesis).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fuse_helpers import admit, files_under, mounted, open_store
from hypothesis import given, settings
from hypothesis import strategies as st

from epochfs.fuse.tree import EpochTree
from epochfs.fuse.treebuild import unsafe_path
from epochfs.sidecar.store import FileEntry
from epochfs.torchclient import layout

needs_fuse = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                reason="needs root and /dev/fuse")


@pytest.mark.fuse
@needs_fuse
def test_a_file_named_like_a_folder_leaves_the_folder_shown_through_a_mount(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache)
    folder = {f"c/{i:05d}.bin": bytes([i]) * (i + 1) for i in range(10)}
    # ``c`` and ``c.bin`` sort before every ``c/...`` path: the file is met first.
    admit(store, {"c": b"a file", "c.bin": b"beside", "ok.bin": b"ok"} | folder)
    assert store.cut(0) == 0
    store.close()
    with mounted(cache, tmp_path / "mnt") as m:
        epoch = m.path / "epoch-0"
        assert (epoch / "c").is_dir()
        assert files_under(epoch) == folder | {"c.bin": b"beside", "ok.bin": b"ok"}
        manifest = layout.read_manifest(m.path, 0)
        assert manifest is not None
        assert sorted(e.path for e in manifest.entries) == sorted([*folder, "c.bin", "ok.bin"])
        log = m.log_text()
    assert "'c' not shown: clashes with a folder of the same name" in log
    assert "1 of 13 file(s) not shown" in log


def _entry(path: str) -> FileEntry:
    return FileEntry(path=path, size=len(path), checksum="md5:0", object_name=f"o{abs(hash(path))}")


def _shown_by_rule(paths: list[str]) -> set[str]:
    """The rule, plainly: every safe path once, less each one that another shown path needs as a
    folder (the deepest folders decide first: ``a``, ``a/b``, ``a/b/c`` shows only ``a/b/c``)."""
    shown = {p for p in paths if not unsafe_path(p)}
    for p in sorted(shown, key=lambda p: -p.count("/")):
        if p in shown:
            parts = p.split("/")
            shown -= {"/".join(parts[:i]) for i in range(1, len(parts))}
    return shown


def _built(paths: list[str], tmp_path: Path) -> tuple[EpochTree, list[FileEntry]]:
    files = [_entry(p) for p in sorted(set(paths))]
    return EpochTree(epoch=0, cut_at=0.0, files=files, link_root=tmp_path), files


def test_the_folder_wins_at_any_depth_past_siblings_that_sort_between(tmp_path: Path) -> None:
    paths = ["a", "a b", "a!", "a-1", "a.d", "a.d/x", "a/y", "a/y.z", "a/y/z", "b",
             "k/c", "k/c-1", "k/c.1", "k/c.1/x", "k/c/x", "k/d"]
    tree, files = _built(paths, tmp_path)
    shown = {"a b", "a!", "a-1", "a.d/x", "a/y.z", "a/y/z", "b", "k/c-1", "k/c.1/x", "k/c/x", "k/d"}
    assert set(tree.links) == shown == _shown_by_rule(paths)
    assert tree.files_shown == len(shown)
    folders = {rel for rel, is_dir in tree.walk() if is_dir}
    assert {"a", "a.d", "a/y", "k", "k/c", "k/c.1"} <= folders
    body = tree.manifest().decode().splitlines()[1:]
    assert [line.split("\t")[0] for line in body] == [f.path for f in files if f.path in shown]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["c", "c.", "c!", "c/", "d", ".", "/"]), min_size=1, max_size=6)
                .map("".join), min_size=1, max_size=25))
def test_every_set_of_paths_shows_what_the_rule_says(tmp_path_factory: pytest.TempPathFactory,
                                                     paths: list[str]) -> None:
    tree, files = _built(paths, tmp_path_factory.getbasetemp())
    expected = _shown_by_rule(paths)
    assert set(tree.links) == expected
    assert tree.files_shown == len(expected)
    body = tree.manifest().decode().splitlines()[1:]
    assert [line.split("\t")[0] for line in body] == [f.path for f in files if f.path in expected]
