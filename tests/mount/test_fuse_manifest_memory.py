"""What the FUSE server keeps per file beyond the tree (issue 14): a manifest is kept compressed,
not as ~100 bytes of text per file, and a build gives the heap's free pages back to the system
(glibc otherwise keeps the build's high-water mark in the server's RSS)."""

from __future__ import annotations

import gc
import random
import tracemalloc
from pathlib import Path

from fuse_helpers import admit, make_objects, open_store

from epochfs.fuse.packed import PackedWriter
from epochfs.fuse.tree import EpochTree
from epochfs.fuse.view import View
from epochfs.sidecar.store import FileEntry
from epochfs.torchclient.layout import format_manifest

LINK_ROOT = Path("/cache/objects-ro")


def test_the_view_keeps_a_manifest_compressed(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache")
    try:
        admit(store, make_objects(1500, 8, prefix="train/n01440764/"))
        assert store.cut(0) == 0
        view = View(store=store, link_root=LINK_ROOT)
        view.tree(0)
        gc.collect()
        tracemalloc.start()
        try:
            size = view.getattr("/.epochfs/epoch-0.manifest").size  # built, and kept
            gc.collect()
            kept, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert view.read_file("/.epochfs/epoch-0.manifest").count(b"\n") == 1501
        assert view._manifests  # kept for the next reader...
        assert kept < 0.6 * size, (kept, size)  # ...in well under the text's size (was: all of it)
    finally:
        store.close()


def test_a_packed_manifest_reads_as_the_formatted_text() -> None:
    rng = random.Random(7)
    rows = [FileEntry(f"train/c{i // 700:03d}/{i:06d}.JPEG", rng.randrange(10**6),
                      f"md5:{rng.randbytes(16).hex()}", f"{i:04x}/{i:032x}")
            for i in range(10_000)]  # 3 batches, ~10 chunks of 64 KiB
    tree = EpochTree(epoch=3, cut_at=1.0, files=rows, link_root=LINK_ROOT)
    text = format_manifest(3, [(f.path, f.size, f.checksum) for f in rows]).encode()
    packed = tree.packed_manifest()
    assert len(packed) == len(text) and bytes(packed) == text
    for _ in range(300):  # FUSE reads: any offset and size, across the header and chunk boundaries
        a = rng.randrange(len(text) + 10)
        b = a + rng.choice((1, 100, 4096, 1 << 17))
        assert packed[a:b] == text[a:b]


def test_packed_bytes_slice_like_bytes() -> None:
    rng = random.Random(3)
    data = bytes(rng.randrange(4) for _ in range(1000))
    w = PackedWriter(chunk=7)
    for at in range(0, len(data), 13):
        w.write(data[at:at + 13])
    packed = w.finish(b"head\n")
    whole = b"head\n" + data
    assert len(packed) == len(whole) and bytes(packed) == whole
    for a in range(-3, len(whole) + 3, 5):
        for n in (0, 1, 6, 7, 8, 50):
            assert packed[a:a + n] == whole[a:a + n]
    assert packed[-1] == whole[-1] and packed[::2] == whole[::2]


def _heap_rss() -> int:
    """Resident bytes of the main heap (``[heap]`` in /proc/self/smaps)."""
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
                inside = line.rstrip().endswith("[heap]")
            elif inside and line.startswith("Rss:"):
                return int(line.split()[1]) * 1024
    return 0


def test_a_tree_build_gives_free_heap_pages_back(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache")
    try:
        admit(store, make_objects(3, 8))
        assert store.cut(0) == 0
        view = View(store=store, link_root=LINK_ROOT)
        # Holes in the heap, as a build's chunks of rows leave: 16 MB of 600-byte blocks (malloc,
        # not Python's small-object arenas), one in 64 kept so that none of it is the heap's top.
        blocks = [bytes(600) for _ in range(28_000)]
        kept = blocks[::64]
        before = _heap_rss()
        del blocks
        gc.collect()
        assert _heap_rss() > before - (4 << 20)  # freed, but glibc keeps the pages
        view.tree(0)
        assert _heap_rss() < before - (8 << 20)  # the build trimmed the heap: pages went back
        assert kept
    finally:
        store.close()
