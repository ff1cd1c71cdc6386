"""The folder view's parts on their own (issue 25): the manifest body kept sorted and joined ahead,
the store's reads of the admission order the tree built ahead follows, and the wake on a cut.

The body is checked against the obvious model (a sorted set, joined whole) through random adds
and removes of every size, pages splitting and emptying; the reads against a real store as
samples land and epochs are cut; the wake against a real cut in another
thread (inotify on the cache folder, no poll).
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, make_objects, open_store

from epochfs.sidecar import folderview, folderview_body
from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.folderview_body import ManifestBody
from epochfs.sidecar.folderview_wake import CutWatch
from epochfs.torchclient import layout


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_body_is_the_sorted_join_of_its_lines(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    monkeypatch.setattr(folderview_body, "PAGE", 8)  # many pages, many splits, pages emptied
    rng = random.Random(seed)
    body, model = ManifestBody(), set[bytes]()
    for _ in range(400):
        if rng.random() < 0.55 or not model:
            new = {f"d{rng.randrange(9)}/{rng.randrange(10**5):05d}\t1\tmd5:x\n".encode()
                   for _ in range(rng.choice([1, 2, 7, 40, 300]))} - model
            body.add(new)
            model |= new
        else:
            gone = rng.sample(sorted(model), min(len(model), rng.choice([1, 3, 30, 400])))
            body.remove(gone)
            model -= set(gone)
        assert len(body) == len(model)
        assert b"".join(body.chunks()) == b"".join(sorted(model))
    with pytest.raises(KeyError):
        body.remove([b"not there\n"])


def test_the_store_reads_the_admission_order(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache")
    assert store.sample_id_bounds() == (0, 0)
    assert store.samples_after(0, limit=10) == []
    admit(store, make_objects(30, 10, prefix="a/"))
    lo, hi = store.sample_id_bounds()
    assert (lo, hi) == (1, 30)
    rows = store.samples_after(5, limit=10)
    assert [r.id for r in rows] == list(range(6, 16))
    assert rows[0].path == "a/00005.bin" and rows[0].size == 10 and rows[0].checksum.startswith("md5:")
    assert store.epoch_extent(0) is None  # not cut
    assert store.cut(0) == 0
    ext = store.epoch_extent(0)
    assert ext is not None and (ext.first, ext.last, ext.samples, ext.bytes) == (1, 30, 30, 300)
    assert {f.object_name.rpartition("/")[2] for f in store.epoch_files(0)} == {
        r.sid for r in store.samples_after(0, limit=100)}
    admit(store, make_objects(5, 10, prefix="b/"))
    assert [r.path for r in store.samples_after(30, limit=10)] == [f"b/{i:05d}.bin" for i in range(5)]
    assert store.sample_id_bounds() == (1, 35)
    store.close()


def test_a_cut_wakes_the_watch_before_its_timeout(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache")
    admit(store, make_objects(5, 10))
    watch = CutWatch(store.root)
    try:
        assert watch.fd >= 0, "inotify is missing on this machine"
        assert watch.wait(0.01) is False  # nothing happened: the timeout
        admit(store, make_objects(5, 10, start=5))
        watch.wait(0.01)  # admissions rename nothing the watch looks for at the top
        cutter = threading.Timer(0.05, store.cut, args=(0,))
        cutter.start()
        assert watch.wait(600) is True  # woken by the cut (a timeout returns False)
        cutter.join()
        assert store.newest_epoch() == 0
    finally:
        watch.close()
        store.close()


def test_the_publisher_shows_a_cut_without_waiting_for_its_poll(tmp_path: Path) -> None:
    """The publishing loop with a poll interval of 600 s: a cut is shown all the same (woken by
    the cut's rename of ``epochs.hwm``), ahead, and another cut ends the loop once stopped."""
    store = open_store(tmp_path / "cache")
    admit(store, make_objects(40, 10, prefix="d/"))
    store.cut(0)
    publisher = FolderPublisher(store=store, folder=tmp_path / "view", link_root=Path("/efs"), ahead=True)
    watch = CutWatch(store.root)
    stop = threading.Event()
    loop = threading.Thread(target=folderview._publish_until, args=(stop, publisher),
                            kwargs={"interval": 600.0, "watch": watch}, daemon=True)
    loop.start()
    try:
        wait_until(lambda: layout.list_epochs(publisher.folder) == [0], timeout=60, what="epoch 0")
        wait_until(lambda: (built := publisher._ahead.tree) is not None and not built.pending(), timeout=60,
                   what="the tree built ahead")
        admit(store, make_objects(5, 10, prefix="d/", start=40))
        store.cut(1)
        wait_until(lambda: 1 in layout.list_epochs(publisher.folder), timeout=60, what="epoch 1")
        assert (publisher.folder / ".epochfs" / "epoch-1.manifest").is_file()
        stop.set()
        store.cut(2)
        loop.join(60)
        assert not loop.is_alive()
    finally:
        stop.set()
        watch.close()
        publisher.close()
        store.close()
