"""A lost sample in the FUSE namespace, without a mount (issue 20): the view and the translator.

The mount test (tests/mount/test_lost_sample_mount.py) shows what a reader sees; this one pins the
pieces: the entry stays in the listing as a regular file of the sample's size (its manifest line
and node numbers unchanged), open and readlink raise :class:`LostSample` and the translator turns
that into EIO with a count and a rate-limited log line; every other entry stays a symlink."""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
from fuse_helpers import admit, make_objects, open_store
from lost_helpers import make_lost

from epochfs.fuse.libfuse import find_libfuse3
from epochfs.fuse.lost import LostLog, LostSample
from epochfs.fuse.metrics import fuse_metrics
from epochfs.fuse.view import NotFound, View

os.environ.setdefault("FUSE_LIBRARY_PATH", find_libfuse3())
# mfusepy binds libfuse when imported: choose libfuse 3 first.
from epochfs.fuse import operations

LINK_ROOT = Path("/cache/objects-ro")


def test_the_lost_entry_stays_listed_as_a_file_and_its_reads_raise(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache")
    try:
        objects = make_objects(6, 100, prefix="a/")
        admit(store, objects)
        assert store.cut(0) == 0
        view = View(store=store, link_root=LINK_ROOT)
        tree = view.tree(0)
        listing, shape, manifest = list(view.listdir("/epoch-0/a")), tree.shape, view.manifest(0)
        lost = "a/00003.bin"
        make_lost(store, lost)
        assert [n for n, _ in view.listdir("/epoch-0/a")] == [n for n, _ in listing], "still a link"
        assert stat.S_ISLNK(view.getattr(f"/epoch-0/{lost}").mode), "until the next refresh"
        view.refresh()
        after = list(view.listdir("/epoch-0/a"))
        assert [n for n, _ in after] == [n for n, _ in listing]
        modes = {n: a.mode for n, a in after}
        assert stat.S_ISREG(modes["00003.bin"]) and all(stat.S_ISLNK(m) for n, m in modes.items()
                                                         if n != "00003.bin")
        attr = view.getattr(f"/epoch-0/{lost}")
        assert stat.S_ISREG(attr.mode) and attr.size == 100 and attr.mode & 0o777 == 0o444
        assert view.tree(0).shape == shape and view.manifest(0) == manifest
        for call in (view.readlink, view.open_file):
            with pytest.raises(LostSample) as raised:
                call(f"/epoch-0/{lost}")
            assert (raised.value.epoch, raised.value.rel) == (0, lost)
        view.readlink("/epoch-0/a/00002.bin")
        with pytest.raises(NotFound):
            view.open_file("/epoch-0/a/00002.bin")
        assert view.lost.take_new() == [lost] and view.lost.take_new() == []
        assert view.refresh() and view.lost.take_new() == [], "an unchanged set is not re-read"

        ops = operations.EpochOperations(view=view, timeout=10)
        before = fuse_metrics().lost_reads.labels(op="open")._value.get()
        with pytest.raises(operations.FuseOSError) as eio:
            ops.open(f"/epoch-0/{lost}", SimpleNamespace(flags=os.O_RDONLY, fh=0))
        assert eio.value.errno == errno.EIO
        with pytest.raises(operations.FuseOSError) as eio:
            ops.readlink(f"/epoch-0/{lost}")
        assert eio.value.errno == errno.EIO
        assert fuse_metrics().lost_reads.labels(op="open")._value.get() == before + 1
    finally:
        store.close()


def test_the_log_is_rate_limited_and_sums_up_what_it_left_out(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limiter = LostLog(burst=3, interval=60.0, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="epochfs.fuse")
    for _ in range(10):
        limiter.report(LostSample(4, "train/x.npy"), "open")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert all(line.startswith("epoch-4/train/x.npy: its sample was lost") for line in lines)
    now[0] = 61.0
    caplog.clear()
    limiter.report(LostSample(4, "train/y.npy"), "open")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and lines[0].startswith("7 more read(s) of samples lost from the remote")
    assert lines[1].startswith("epoch-4/train/y.npy")
