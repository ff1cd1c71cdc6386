"""The folder view: a sample the remote lost keeps its entry, and the torch client says so (issue 20).

The folder view's entries are plain symlinks into the objects folder; nothing can turn a lost
sample's into EIO without a server on the read path. What the folder view does: the entry becomes
a placeholder answering ELOOP (tests/folderview/test_folderview_lost_placeholder.py), and the
published ``epoch-0/`` is otherwise never touched (same folder, same entries, same manifest)
while a reader verifies every other byte, ``status.json`` counts the
lost sample, ``epochfs_samples_lost`` too, and the torch client (``EpochDataset``, ``EpochLoader``
with a worker process, ``ArrayLoader``) raises ``SampleLostError`` (an OSError, errno EIO, naming
the file) at once. Before, it retried the ENOENT for ``retry_seconds`` (30 s) and then raised
``SampleDecodeError("sample file vanished or never existed ...")``."""

from __future__ import annotations

import errno
import io
import os
import time
from pathlib import Path

import numpy as np
import pytest
from common import wait_until
from fuse_helpers import admit, open_store
from lost_helpers import Reader, make_lost, names, store_gauge

from epochfs.sidecar.folderview import FolderPublisher
from epochfs.torchclient import ArrayLoader, EpochDataset, EpochLoader, SampleLostError
from epochfs.torchclient.layout import read_status


def npy_objects(count: int) -> dict[str, bytes]:
    out = {}
    for i in range(count):
        buf = io.BytesIO()
        np.save(buf, np.full(64, i, dtype=np.float32))
        out[f"train/{i:04d}.npy"] = buf.getvalue()
    return out


def test_a_lost_sample_keeps_its_published_entry_and_the_client_raises_eio(tmp_path: Path) -> None:
    cache, folder = tmp_path / "cache", tmp_path / "view"
    objects = npy_objects(24)
    lost = sorted(objects)[9]
    store = open_store(cache)
    try:
        admit(store, objects)
        assert store.cut(0) == 0
        publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir.absolute())
        publisher.recover()
        publisher.step(force_status=True)
        epoch = folder / "epoch-0"
        inode = epoch.stat().st_ino
        manifest = (folder / ".epochfs" / "epoch-0.manifest").read_bytes()
        reader = Reader([epoch], objects, lost, listed=[epoch], lost_errnos=[errno.ENOENT, errno.ELOOP])
        reader.start()
        try:
            wait_until(lambda: reader.passes >= 2, what="the reader's first passes")
            make_lost(store, lost)
            publisher.step(force_status=True)
            wait_until(lambda: errno.ELOOP in reader.lost_errnos, what="the reader meeting the placeholder")
            passes = reader.passes
            wait_until(lambda: reader.passes >= passes + 3, timeout=60, what="three more reader passes")
        finally:
            reader.stop.set()
            reader.join(timeout=60)
        assert not reader.problems, reader.problems[:5]

        publisher.step(force_status=True)
        assert epoch.stat().st_ino == inode, "the published epoch is the same folder"
        assert names(epoch) == set(objects), "its entries never change"
        assert (folder / ".epochfs" / "epoch-0.manifest").read_bytes() == manifest
        assert os.path.islink(epoch / lost) and not os.path.exists(epoch / lost)
        status = read_status(folder)
        assert status is not None and (status["lost"], status["repairing"]) == (1, 1)
        assert store_gauge(store, "epochfs_samples_lost") == 1

        # EpochDataset: at once (retry_seconds is 30 s), an OSError with errno EIO naming the file.
        ds = EpochDataset(folder, 0, decode="npy", progress=None)
        paths = [str(ds.path(i)) for i in range(len(ds))]
        index = paths.index(str(epoch / lost))
        started = time.monotonic()
        with pytest.raises(SampleLostError) as raised:
            ds[index]
        assert time.monotonic() - started < 5
        e = raised.value
        assert isinstance(e, OSError) and e.errno == errno.EIO and e.filename == str(epoch / lost)
        assert "lost from the remote" in str(e) and lost in str(e)
        other = (index + 1) % len(ds)
        expected = np.load(io.BytesIO(objects[os.path.relpath(paths[other], epoch)]))
        assert ds[other].numpy().tobytes() == expected.tobytes()
        ds.release()

        # EpochLoader: the worker process's error comes back as the same type, errno EIO.
        started = time.monotonic()
        with EpochLoader(folder, batch_size=4, num_workers=1, decode="npy", progress=None,
                         report=False) as loader, pytest.raises(SampleLostError) as raised:
            for _ in loader.epoch(0):
                pass
        assert time.monotonic() - started < 20
        assert raised.value.errno == errno.EIO and lost in str(raised.value)

        # ArrayLoader: the reader threads' error, the same.
        started = time.monotonic()
        with ArrayLoader(folder, batch_size=4, num_threads=2, progress=None, report=False) as arrays, \
                pytest.raises(SampleLostError) as raised:
            for _ in arrays.epoch(0):
                pass
        assert time.monotonic() - started < 20
        assert raised.value.errno == errno.EIO and lost in str(raised.value)
    finally:
        store.close()
