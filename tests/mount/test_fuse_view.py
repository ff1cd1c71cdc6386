"""The namespace (View) and the FUSE translator, without a mount: layout, manifests, errors."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, open_store, sid_of

from epochfs.fuse.libfuse import find_libfuse3
from epochfs.fuse.view import EpochTree, NotALink, NotFound, View
from epochfs.sidecar.store import FileEntry
from epochfs.torchclient.layout import MANIFEST_MAGIC, parse_manifest

os.environ.setdefault("FUSE_LIBRARY_PATH", find_libfuse3())
# mfusepy binds libfuse when imported: choose libfuse 3 first.
from epochfs.fuse import operations

LINK_ROOT = Path("/cache/objects-ro")


@pytest.fixture
def store(tmp_path: Path):
    s = open_store(tmp_path / "cache", min_samples=2)
    yield s
    s.close()


def test_tree_layout_and_links(store) -> None:
    objs = make_objects(3, 10, prefix="a/b/") | make_objects(2, 10, prefix="c/")
    admit(store, objs)
    assert store.cut(0) == 0
    view = View(store=store, link_root=LINK_ROOT)
    names = [n for n, _ in view.listdir("/")]
    assert names == [".epochfs", "epoch-0", "latest"]
    assert [n for n, _ in view.listdir("/epoch-0")] == ["a", "c"]
    assert [n for n, _ in view.listdir("/epoch-0/a/b")] == ["00000.bin", "00001.bin", "00002.bin"]
    target = view.readlink("/epoch-0/a/b/00001.bin")
    assert target == f"{LINK_ROOT}/{sid_of('a/b/00001.bin')[:2]}/{sid_of('a/b/00001.bin')}"
    attr = view.getattr("/epoch-0/a/b/00001.bin")
    assert stat.S_ISLNK(attr.mode) and attr.size == len(target)
    assert view.getattr("/epoch-0/a").is_dir
    assert view.readlink("/latest") == "epoch-0"
    with pytest.raises(NotALink):
        view.readlink("/epoch-0/a")
    for bad in ("/epoch-0/nope", "/epoch-00", "/epoch-x", "/nope", "/.epochfs/nope",
                "/.epochfs/epoch-3.manifest", "/epoch-0/a/b/00001.bin/x"):
        with pytest.raises(NotFound):
            view.getattr(bad)


def test_manifest_format(store) -> None:
    objs = make_objects(4, 33, prefix="d/")
    admit(store, objs)
    store.cut(0)
    view = View(store=store, link_root=LINK_ROOT)
    text = view.read_file("/.epochfs/epoch-0.manifest").decode()
    lines = text.splitlines()
    assert lines[0] == f"{MANIFEST_MAGIC}\tepoch=0\tfiles=4\tbytes={4 * 33}"
    rows = [line.split("\t") for line in lines[1:]]
    assert [r[0] for r in rows] == sorted(objs)
    for path, size, checksum in rows:
        assert int(size) == len(objs[path])
        assert checksum == "md5:" + hashlib.md5(objs[path]).hexdigest()
    assert view.getattr("/.epochfs/epoch-0.manifest").size == len(text.encode())
    parsed = parse_manifest(text, source="view", epoch=0)  # what the torch client reads
    assert parsed.paths == sorted(objs) and parsed.total_bytes == 4 * 33


@pytest.mark.parametrize("name", ["epoch-007", "epoch-00", "epoch-+7", "epoch- 7", "epoch-7 ", "epoch-7\n",
                                  "epoch-\u0667", "Epoch-7", "epoch-1000000000000000007"])
def test_only_canonical_epoch_names_are_epochs(store, name: str) -> None:
    """The layout's strict grammar: no second name for epoch 7, and no cut asked through one."""
    admit(store, make_objects(2, 10))
    assert store.cut(6) == 6  # explicit: epoch 7 is the next one a lookup may cut
    view = View(store=store, link_root=LINK_ROOT)
    for path in (f"/{name}", f"/.epochfs/{name}.manifest", f"/{name}/00000.bin"):
        with pytest.raises(NotFound):
            view.getattr(path)
    assert store.newest_epoch() == 6 and store.stats().pending_cuts == []
    assert view.getattr("/epoch-7").is_dir  # the canonical name asks for, and gets, the cut
    assert [n for n, _ in view.listdir("/")] == [".epochfs", "epoch-6", "epoch-7", "latest"]


def test_clashing_and_unsafe_paths_are_skipped() -> None:
    files = [
        FileEntry("a", 1, "md5:0", "aa/aa"),
        FileEntry("a/b", 1, "md5:1", "bb/bb"),
        FileEntry("../up", 1, "md5:2", "cc/cc"),
        FileEntry("ok", 1, "md5:3", "dd/dd"),
    ]
    tree = EpochTree(epoch=0, cut_at=1.0, files=files, link_root=LINK_ROOT)
    assert sorted(tree.links) == ["a/b", "ok"]  # the folder wins over the file named like it
    assert "files=2\tbytes=2" in tree.manifest().decode().splitlines()[0]


def test_lookup_above_newest_cuts_or_queues(store) -> None:
    view = View(store=store, link_root=LINK_ROOT)
    admit(store, make_objects(1, 10))
    with pytest.raises(NotFound):
        view.getattr("/epoch-0")  # min_samples=2: not yet
    assert [n for n, _ in store.pending_cuts()] == [0]
    admit(store, make_objects(1, 10, start=1))
    assert view.getattr("/epoch-0").is_dir  # now at once, no refresh needed
    with pytest.raises(NotFound):
        view.getattr("/epoch-5")  # a lookup never skips ahead: only the next epoch is cut
    assert store.cut(5) == 5  # an explicit cut may (a resumed trainer's number)
    assert view.getattr("/epoch-5").is_dir
    with pytest.raises(NotFound):
        view.getattr("/epoch-3")  # below the newest, never cut
    assert view.getattr("/epoch-6").is_dir
    assert [e.epoch for e in store.epochs()] == [0, 5, 6]


def test_reads_are_recorded_debounced(store) -> None:
    admit(store, make_objects(2, 10))
    store.cut(0)
    view = View(store=store, link_root=LINK_ROOT, read_debounce=60)
    view.getattr("/epoch-0")
    view.listdir("/epoch-0/train")
    assert view.flush_reads() == [0]
    view.getattr("/epoch-0")
    assert view.flush_reads() == []  # debounced


def test_status_json_is_fresh(store) -> None:
    view = View(store=store, link_root=LINK_ROOT)
    import json

    assert json.loads(view.read_file("/.epochfs/status.json"))["samples"] == 0
    admit(store, make_objects(3, 10))
    assert json.loads(view.read_file("/.epochfs/status.json"))["samples"] == 3


@pytest.mark.parametrize("call", operations.WRITE_CALLS)
def test_every_write_call_is_erofs(store, call: str) -> None:
    ops = operations.EpochOperations(view=View(store=store, link_root=LINK_ROOT), timeout=10)
    with pytest.raises(OSError) as e:
        getattr(ops, call)("/epoch-0/x", 0, 0)
    assert e.value.errno == errno.EROFS


def test_errors_translate(store, caplog) -> None:
    ops = operations.EpochOperations(view=View(store=store, link_root=LINK_ROOT), timeout=10)
    with pytest.raises(OSError) as e:
        ops.getattr("/nope")
    assert e.value.errno == errno.ENOENT

    def boom(path: str) -> str:
        raise RuntimeError("disk on fire")

    ops.view.readlink = boom  # type: ignore[method-assign]
    with pytest.raises(OSError) as e:
        ops.readlink("/latest")
    assert e.value.errno == errno.EIO
    assert isinstance(e.value.__cause__, RuntimeError)
    assert "disk on fire" in caplog.text


def test_operations_define_no_unimplemented_calls() -> None:
    """mfusepy registers any attribute named like a FUSE call: keep only what we implement."""
    import mfusepy

    implemented = {"getattr", "readlink", "readdir_with_offset", "opendir", "releasedir", "open", "read",
                   "release", "statfs",
                   "init_with_config", "destroy", *operations.WRITE_CALLS}
    fuse_calls = {name for name, *_ in mfusepy.fuse_operations._fields_} | {"init_with_config",
                                                                          "readdir_with_offset"}
    defined = {n for n in fuse_calls if n in vars(operations.EpochOperations)}
    assert defined == implemented & fuse_calls


def test_requests_are_counted_by_operation(store) -> None:
    from epochfs.fuse.metrics import fuse_metrics

    m = fuse_metrics()

    def count(op: str, err: str | None = None) -> float:
        if err is None:
            return m.requests.labels(op=op)._value.get()
        return m.errors.labels(op=op, errno=err)._value.get()

    ops = operations.EpochOperations(view=View(store=store, link_root=LINK_ROOT), timeout=10)
    before = (count("readdir"), count("getattr"), count("getattr", "ENOENT"))
    operations.translate_listing(ops, "/")
    ops.getattr("/")
    with pytest.raises(OSError):
        ops.getattr("/nope")
    assert (count("readdir"), count("getattr"), count("getattr", "ENOENT")) == (
        before[0] + 1, before[1] + 2, before[2] + 1)
