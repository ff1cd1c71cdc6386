"""The compact epoch tree (issue 14): the same answers as a plain tree of dicts for random nested
layouts, and a bound on its memory per file (the dict tree held ~0.85 KB per file)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochfs.fuse.tree import DIR_MODE, LINK_MODE, Attr, EpochTree, NotADirectory, NotALink, NotFound
from epochfs.sidecar.store import FileEntry
from epochfs.torchclient.layout import format_manifest

LINK_ROOT = Path("/cache/objects-ro")
CUT_AT = 12.5


def _safe(path: str) -> bool:
    return bool(path) and "\0" not in path and not any(p in ("", ".", "..") for p in path.split("/"))


class Reference:
    """The tree as plain dicts, the rules written out (first of a path in store order wins, a
    folder beats a file of the same name, as a sorted listing's rule is, unsafe paths skipped):
    what the compact tree must answer."""

    def __init__(self, files: list[FileEntry]) -> None:
        self.dirs: dict[str, dict[str, Attr]] = {"": {}}
        self.links: dict[str, str] = {}
        folders = {"/".join(f.path.split("/")[:i]) for f in files if _safe(f.path)
                   for i in range(1, f.path.count("/") + 1)}
        for f in files:
            parts = f.path.split("/")
            if not _safe(f.path) or f.path in folders:
                continue
            parent = ""
            for part in parts[:-1]:
                here = f"{parent}/{part}" if parent else part
                if here not in self.dirs:
                    self.dirs[here] = {}
                    self.dirs[parent][part] = Attr(DIR_MODE, 0, CUT_AT, 2)
                parent = here
            if f.path in self.links:
                continue
            target = f"{LINK_ROOT}/{f.object_name}"
            self.links[f.path] = target
            self.dirs[parent][parts[-1]] = Attr(LINK_MODE, len(target.encode()), CUT_AT)

    def lookup(self, rel: str) -> Attr:
        if rel in self.dirs:
            return Attr(DIR_MODE, 0, CUT_AT, 2)
        parent, _, name = rel.rpartition("/")
        return self.dirs[parent][name]


NAMES = st.sampled_from(["a", "a-b", "a.c", "a0", "b", "é", "日本", "a b", "z" * 30, "..", ""])
PATHS = st.lists(NAMES, min_size=1, max_size=4).map("/".join)
OBJECTS = st.text(alphabet="0123456789abcdef", min_size=1, max_size=40)


@st.composite
def epochs(draw: st.DrawFn) -> list[FileEntry]:
    paths = draw(st.lists(PATHS, max_size=60))
    files = [FileEntry(p, draw(st.integers(0, 10**6)), f"md5:{i}", f"{o[:2]}/{o}")
             for i, (p, o) in enumerate(zip(paths, draw(st.lists(OBJECTS, min_size=len(paths),
                                                                    max_size=len(paths))), strict=True))]
    return sorted(files, key=lambda f: f.path)  # the store's order: by key, which is the path


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(epochs())
def test_same_answers_as_the_dict_tree(files: list[FileEntry]) -> None:
    ref = Reference(files)
    tree = EpochTree(epoch=3, cut_at=CUT_AT, files=iter(files), link_root=LINK_ROOT,
                     reread=lambda: iter(files))
    for rel, children in ref.dirs.items():
        listing = tree.listdir(rel)
        assert list(listing) == sorted(children.items())  # readdir order and offsets
        assert len(listing) == len(children)
        if children:
            assert listing[len(children) - 1] == sorted(children.items())[-1]
        with pytest.raises(IndexError):
            listing[len(children)]
        assert tree.lookup(rel) == Attr(DIR_MODE, 0, CUT_AT, 2)
        with pytest.raises(NotALink):
            tree.readlink(rel)
        for name in ("nope", "a/", "a-"):
            with pytest.raises(NotFound):
                tree.lookup(f"{rel}/{name}" if rel else name)
    for rel, target in ref.links.items():
        assert tree.readlink(rel) == target
        assert tree.lookup(rel) == ref.lookup(rel)
        with pytest.raises(NotADirectory):
            tree.listdir(rel)
        with pytest.raises(NotFound):
            tree.lookup(rel + "/a")
    assert dict(tree.links) == ref.links and len(tree.links) == len(ref.links)
    assert set(tree.dirs) == set(ref.dirs) and len(tree.dirs) == len(ref.dirs)
    order = {d: i for i, d in enumerate(tree.dirs)}
    assert all(order[d.rpartition("/")[0]] < order[d] for d in order if d)  # parents first
    assert all(d in tree.dirs for d in ref.dirs) and not any(f in tree.dirs for f in ref.links)
    first: dict[str, FileEntry] = {}
    for f in files:  # a path listed twice shows (and is in the manifest) once: its first entry
        if f.path in ref.links:
            first.setdefault(f.path, f)
    rows = [(f.path, f.size, f.checksum) for f in first.values()]
    assert tree.manifest() == format_manifest(3, rows).encode()

def test_files_out_of_path_order_are_refused() -> None:
    files = [FileEntry("b", 1, "md5:0", "aa/aa"), FileEntry("a", 1, "md5:1", "bb/bb")]
    with pytest.raises(ValueError, match="path order"):
        EpochTree(epoch=0, cut_at=1.0, files=files, link_root=LINK_ROOT)


def test_a_changed_epoch_gives_no_manifest() -> None:
    files = [FileEntry("a", 1, "md5:0", "aa/aa"), FileEntry("b", 1, "md5:1", "bb/bb")]
    reads = [files, files[:1], [*files, FileEntry("c", 1, "md5:2", "cc/cc")]]
    tree = EpochTree(epoch=0, cut_at=1.0, files=files, link_root=LINK_ROOT, reread=lambda: reads.pop(0))
    assert b"files=2" in tree.manifest()
    for _ in range(2):
        with pytest.raises(NotFound):
            tree.manifest()


FILES_MEASURED = 20_000
BYTES_PER_FILE = 200  # the aim of issue 14 for the FUSE server


def _imagenet_like(count: int) -> Iterator[FileEntry]:
    """``train/<class>/<class>_<n>.JPEG`` in path order, 1,000 files per class, real sample ids."""
    import hashlib

    for i in range(count):
        cls = f"n{1440764 + i // 1000:08d}"
        path = f"train/{cls}/{cls}_{i:06d}.JPEG"
        sid = hashlib.blake2b(path.encode(), digest_size=16).hexdigest()
        yield FileEntry(path, 110_000 + i, "md5:" + sid, f"{sid[:2]}/{sid}")


def test_memory_per_file_is_small() -> None:
    """What a built tree keeps, measured by tracemalloc: a bound per file (the dict tree fails it)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tree = EpochTree(epoch=0, cut_at=1.0, files=_imagenet_like(FILES_MEASURED), link_root=LINK_ROOT)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert tree.lookup("train/n01440764/n01440764_000007.JPEG").mode == LINK_MODE
    assert len(tree.listdir("train")) == FILES_MEASURED // 1000
    assert kept / FILES_MEASURED < BYTES_PER_FILE, f"{kept / FILES_MEASURED:.0f} bytes per file"
