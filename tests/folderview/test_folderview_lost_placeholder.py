"""The folder view keeps a lost sample's entry as a placeholder that answers ELOOP (issue 20).

The FUSE view answers EIO for a sample the remote lost; a plain folder has no server on the read
path, so before this the entry stayed a symlink to the object file that is gone, and a plain open
got ENOENT: the answer of a missing file and of a mount being replaced. Now the publisher replaces
the entry, in every published epoch that holds the sample (and in an epoch published after the
loss), by a symlink to itself: the listing (``os.listdir``, ``os.scandir``, ``os.walk``, ``glob``)
and the manifest are unchanged, an open answers ELOOP at once, ``.epochfs/lost.json`` names it,
and the torch client raises ``SampleLostError`` (errno EIO) from the placeholder alone. Checked
with a real store and publisher, a sample made lost as the scrub does it, and a reader verifying
every byte of two epochs meanwhile. Each test fails on the code before (the entry dangled: ENOENT,
no placeholder)."""

from __future__ import annotations

import errno
import glob
import io
import json
import os
import stat
import time
from pathlib import Path

import numpy as np
import pytest
from common import wait_until
from fuse_helpers import admit, open_store, sid_of
from lost_helpers import Reader, make_lost, names

from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.folderview_lost import SCRATCH_PREFIX, place
from epochfs.sidecar.folderview_publisher import TEMP_PREFIX
from epochfs.sidecar.store import Store, object_name
from epochfs.torchclient import EpochDataset, SampleLostError
from epochfs.torchclient.decode import SampleDecodeError, decode_bytes, load_sample
from epochfs.torchclient.lost import (
    LOST_NAME,
    PLACEHOLDER_MARK,
    is_placeholder,
    lost_error,
    placeholder_target,
)

LOST = "train/b/0009.npy"


def npy_objects(count: int) -> dict[str, bytes]:
    out = {}
    for i in range(count):
        buf = io.BytesIO()
        np.save(buf, np.full(64, i, dtype=np.float32))
        out[f"train/{'ab'[i % 2]}/{i:04d}.npy"] = buf.getvalue()
    return out


def publisher_for(store: Store, folder: Path, *, ahead: bool = False) -> FolderPublisher:
    return FolderPublisher(store=store, folder=folder, link_root=store.objects_dir.absolute(), ahead=ahead)


def links(epoch: Path) -> dict[str, str]:
    """Every entry of ``epoch`` -> its symlink target."""
    return {rel: os.readlink(epoch / rel) for rel in names(epoch)}


@pytest.mark.parametrize("ahead", [False, True], ids=["written-whole", "built-ahead"])
def test_a_lost_sample_keeps_its_entry_in_every_live_epoch_and_an_open_answers_eloop(
        tmp_path: Path, ahead: bool) -> None:
    cache, folder = tmp_path / "cache", tmp_path / "view"
    objects = npy_objects(24)
    store = open_store(cache, keep_epochs=3)
    try:
        admit(store, objects)
        assert store.cut(0) == 0 and store.cut(1, force=True) == 1
        publisher = publisher_for(store, folder, ahead=ahead)
        publisher.recover()
        publisher.step(force_status=True)
        epochs = [folder / "epoch-0", folder / "epoch-1"]
        before = {e: (e.stat().st_ino, links(e), (folder / ".epochfs" / f"{e.name}.manifest").read_bytes())
                  for e in epochs}
        assert all(set(b[1]) == set(objects) for b in before.values())
        reader = Reader(epochs, objects, LOST, listed=epochs, lost_errnos=[errno.ENOENT, errno.ELOOP])
        reader.start()
        try:
            wait_until(lambda: reader.passes >= 2, what="the reader's first passes")
            make_lost(store, LOST)
            publisher.step(force_status=True)
            wait_until(lambda: errno.ELOOP in reader.lost_errnos, what="the reader meeting the placeholder")
            passes = reader.passes
            wait_until(lambda: reader.passes >= passes + 3, timeout=60, what="three more reader passes")
        finally:
            reader.stop.set()
            reader.join(timeout=60)
        assert not reader.problems, reader.problems[:5]

        # An epoch cut after the loss holds the sample too (the store keeps it in its epochs).
        assert store.cut(2, force=True) == 2
        publisher.step(force_status=True)
        epochs.append(folder / "epoch-2")
        for epoch in epochs:
            entry = epoch / LOST
            assert names(epoch) == set(objects), f"{epoch.name}: os.walk lists every entry"
            assert LOST.rpartition("/")[2] in os.listdir(entry.parent)
            assert [e.name for e in os.scandir(entry.parent) if e.name == entry.name] == [entry.name]
            assert str(entry) in glob.glob(str(epoch / "**" / "*.npy"), recursive=True)
            assert stat.S_ISLNK(os.lstat(entry).st_mode) and is_placeholder(entry)
            assert os.readlink(entry) == f"{entry.name}/{PLACEHOLDER_MARK}"
            with pytest.raises(OSError) as raised:
                open(entry, "rb").close()
            assert raised.value.errno == errno.ELOOP, raised.value
            assert not isinstance(raised.value, FileNotFoundError), "not a missing file"
            assert not os.path.exists(entry) and not entry.is_file()
            assert stat.S_IMODE(os.stat(entry.parent).st_mode) == 0o555, "the folder is read-only again"
        for epoch in epochs[:2]:
            inode, targets, manifest = before[epoch]
            assert epoch.stat().st_ino == inode, "the published epoch is the same folder"
            assert (folder / ".epochfs" / f"{epoch.name}.manifest").read_bytes() == manifest
            assert {k: v for k, v in links(epoch).items() if k != LOST} == \
                {k: v for k, v in targets.items() if k != LOST}, "no other entry changed"
        assert not [n for n in os.listdir(folder) if n.startswith(SCRATCH_PREFIX)], "no temporary name left"
        doc = json.loads((folder / ".epochfs" / LOST_NAME).read_text())
        size = len(objects[LOST])
        assert doc["lost"] == [{"path": LOST, "object": object_name(sid_of(LOST)), "size": size}]

        # The torch client: SampleLostError (errno EIO) at once, from the placeholder.
        ds = EpochDataset(folder, 1, decode="npy", progress=None)
        paths = [str(ds.path(i)) for i in range(len(ds))]
        started = time.monotonic()
        with pytest.raises(SampleLostError) as lost_raised:
            ds[paths.index(str(epochs[1] / LOST))]
        assert time.monotonic() - started < 5, "not retried"
        e = lost_raised.value
        assert e.errno == errno.EIO and e.filename == str(epochs[1] / LOST)
        assert f"(key {LOST})" in str(e) and "ELOOP" in str(e)
        ds.release()
    finally:
        store.close()


def test_the_placeholder_alone_says_lost_and_a_real_link_loop_is_not_lost(tmp_path: Path) -> None:
    """The client needs no record to call the placeholder lost (a reader that cannot see
    ``.epochfs/``), and calls no other ELOOP lost."""
    epoch = tmp_path / "view" / "epoch-4" / "train"
    epoch.mkdir(parents=True)
    (tmp_path / "view" / ".epochfs").mkdir()
    os.symlink(placeholder_target("x.npy"), epoch / "x.npy")
    os.symlink("y.npy", epoch / "y.npy")  # a loop of the dataset's own, not a placeholder
    with pytest.raises(SampleLostError) as raised:
        load_sample(str(epoch / "x.npy"), decode_bytes, retry_seconds=30)
    assert raised.value.errno == errno.EIO and "(key train/x.npy)" in str(raised.value)
    err = OSError(errno.ELOOP, "loop", str(epoch / "y.npy"))
    assert lost_error(str(epoch / "y.npy"), err) is None
    with pytest.raises(SampleDecodeError, match="Too many levels of symbolic links"):
        load_sample(str(epoch / "y.npy"), decode_bytes, retry_seconds=30)  # as before: not lost


def test_place_replaces_only_the_lost_samples_own_link(tmp_path: Path) -> None:
    """An entry of the same name linking elsewhere (another sample) is left alone; a placeholder
    is not replaced again; the scratch folder is one of the publisher's temporary names."""
    assert SCRATCH_PREFIX.startswith(TEMP_PREFIX)
    folder = tmp_path / "d"
    folder.mkdir()
    scratch = tmp_path / "s"
    scratch.mkdir()
    os.symlink("/objects/ab/other", folder / "a.npy")
    os.symlink("/objects/cd/lost", folder / "b.npy")
    os.chmod(folder, 0o555)
    assert not place(folder / "a.npy", "cd/lost", scratch)
    assert not place(folder / "missing.npy", "cd/lost", scratch)
    assert place(folder / "b.npy", "cd/lost", scratch)
    assert not place(folder / "b.npy", "cd/lost", scratch)
    assert os.readlink(folder / "a.npy") == "/objects/ab/other"
    assert is_placeholder(folder / "b.npy")
    assert sorted(os.listdir(folder)) == ["a.npy", "b.npy"] and os.listdir(scratch) == []
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o555


def test_a_restarted_publisher_keeps_the_epoch_and_its_placeholder(tmp_path: Path) -> None:
    """Recovery compares an epoch's first entry with the store's link: a placeholder there must
    not make the epoch 'stale' (removed under its readers and written again, dangling)."""
    cache, folder = tmp_path / "cache", tmp_path / "view"
    objects = {f"a/{i:04d}.npy": bytes([i]) * 200 for i in range(6)}
    first = sorted(objects)[0]
    store = open_store(cache)
    try:
        admit(store, objects)
        assert store.cut(0) == 0
        publisher = publisher_for(store, folder)
        publisher.recover()
        publisher.step(force_status=True)
        make_lost(store, first)
        publisher.step(force_status=True)
        epoch = folder / "epoch-0"
        inode = epoch.stat().st_ino
        assert is_placeholder(epoch / first)
        again = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir.absolute())
        report = again.recover()
        again.step(force_status=True)
        assert report.stale == [] and epoch.stat().st_ino == inode
        assert is_placeholder(epoch / first)
    finally:
        store.close()
