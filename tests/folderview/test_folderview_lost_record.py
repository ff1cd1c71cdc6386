"""The folder view publishes which samples the remote lost: ``.epochfs/lost.json`` (issue 20).

Without FUSE nothing can answer EIO for a lost sample's entry: it becomes a placeholder, a
symlink to itself, and a plain ``open`` gets ELOOP (docs/folderview.md says why). What the folder
view does besides, checked here with the publisher against a real store and a sample made lost as
the scrub does it: the entry stays listed in every epoch that holds it; a plain open's answer is
the documented one (ELOOP from the placeholder that ``lstat`` finds); ``.epochfs/lost.json`` names
the sample (path, object file, size) while it is lost and is gone once no live epoch holds it; the
publisher logs it once; and the torch client calls exactly that entry lost: it raises
``SampleLostError`` naming its key at once, while a file deleted behind the sidecar's back in the
same epoch (waiting for its repair, so ``status.json`` says ``lost == repairing``) is not called
lost. Before the record the client guessed from ``status.json``'s counts and called that second
file lost too."""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest
from fuse_helpers import admit, open_store, sid_of
from lost_helpers import make_lost, names

from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.store import object_name
from epochfs.torchclient.decode import SampleDecodeError, decode_bytes, load_sample
from epochfs.torchclient.layout import read_status
from epochfs.torchclient.lost import LOST_NAME, SampleLostError, lost_error, placeholder_target, read_lost


def npy(prefix: str, count: int) -> dict[str, bytes]:
    out = {}
    for i in range(count):
        buf = io.BytesIO()
        np.save(buf, np.full(64, i, dtype=np.float32))
        out[f"{prefix}/{i:04d}.npy"] = buf.getvalue()  # 384 bytes each
    return out


def test_the_folder_view_records_a_lost_sample_and_a_plain_open_gets_the_documented_answer(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache, folder = tmp_path / "cache", tmp_path / "view"
    first = npy("a", 8)
    lost, deleted = "a/0003.npy", "a/0005.npy"
    # An epoch budget of 7 samples: epoch 0 holds a/0001-a/0007; after 4 more, epoch 1 drops a/0001-a/0004.
    store = open_store(cache, capacity=12 * 384, keep_epochs=1, in_use_seconds=0.0, headroom=0.34)
    try:
        admit(store, first)
        assert store.cut(0) == 0
        publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir.absolute())
        control = folder / ".epochfs"
        publisher.recover()
        (control / LOST_NAME).write_text('{"count": 1, "lost": [{"path": "a/0001.npy", "object": "x", '
                                         '"size": 1}]}')  # left by an earlier run: not true now
        publisher.step(force_status=True)
        assert not (control / LOST_NAME).exists(), "no sample lost: no record (the FUSE view's layout)"
        epoch = folder / "epoch-0"
        listed = names(epoch)
        assert lost in listed and deleted in listed

        caplog.set_level(logging.WARNING, logger="epochfs.folderview")
        make_lost(store, lost)
        publisher.step(force_status=True)

        # What a plain reader sees: the entry listed, its placeholder (a link to itself), ELOOP.
        path = epoch / lost
        assert names(epoch) == listed, "the epoch keeps its entry"
        assert os.path.islink(path) and os.readlink(path) == placeholder_target(path.name)
        with pytest.raises(OSError) as raised:
            open(path, "rb").close()
        assert raised.value.errno == errno.ELOOP

        # The record, beside status.json's count.
        doc = json.loads((control / LOST_NAME).read_text())
        assert doc == {"count": 1, "lost": [{"path": lost, "object": object_name(sid_of(lost)), "size": 384}]}
        assert read_lost(folder) == {lost: object_name(sid_of(lost))}
        status = read_status(folder)
        assert status is not None and (status["lost"], status["repairing"]) == (1, 1)
        said = [r.getMessage() for r in caplog.records if "lost from the remote" in r.getMessage()]
        assert len(said) == 1 and lost in said[0] and LOST_NAME in said[0] and "ELOOP" in said[0], said
        publisher.step(force_status=True)
        again = [r for r in caplog.records if "lost from the remote" in r.getMessage()]
        assert len(again) == 1, "logged once"

        # A file deleted by hand, not yet found by the scrub: status still says lost == repairing == 1.
        os.unlink(store.objects_dir / object_name(sid_of(deleted)))
        publisher.step(force_status=True)
        status = read_status(folder)
        assert status is not None and (status["lost"], status["repairing"]) == (1, 1)
        other = str(epoch / deleted)
        assert lost_error(other, FileNotFoundError(errno.ENOENT, "gone", other)) is None, \
            "the record does not name it: not lost (it comes back with its repair)"
        with pytest.raises(SampleDecodeError, match="vanished"):
            load_sample(other, decode_bytes, retry_seconds=0.3)
        started = time.monotonic()
        with pytest.raises(SampleLostError) as lost_raised:
            load_sample(str(path), decode_bytes, retry_seconds=30)
        assert time.monotonic() - started < 5, "not retried"
        e = lost_raised.value
        assert e.errno == errno.EIO and e.filename == str(path)
        assert f"(key {lost})" in str(e) and LOST_NAME in str(e)
        (store.objects_dir / object_name(sid_of(deleted))).write_bytes(first[deleted])  # its repair
        assert bytes(load_sample(other, decode_bytes).numpy()) == first[deleted]

        # Once no live epoch holds it, it leaves the cache and the record goes.
        admit(store, npy("b", 4))
        assert store.cut(1, force=True) == 1
        assert store.retire(now=time.time() + 10**6) == [0]
        store.evict(12 * 384)
        assert store.stats().lost == 0
        publisher.step(force_status=True)
        assert not (folder / "epoch-0").exists()
        assert not (control / LOST_NAME).exists()
        assert read_lost(folder) is None
    finally:
        store.close()


def test_a_restarted_publisher_writes_the_record_again(tmp_path: Path) -> None:
    """The record is rewritten from the store after a restart (it is a view of the index, like
    status.json), and removed when a stale one names samples that are no longer lost."""
    cache, folder = tmp_path / "cache", tmp_path / "view"
    objects = npy("a", 6)
    store = open_store(cache)
    try:
        admit(store, objects)
        assert store.cut(0) == 0
        make_lost(store, "a/0002.npy")
        control = folder / ".epochfs"
        for _ in range(2):
            publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir.absolute())
            publisher.recover()
            if (control / LOST_NAME).exists():
                (control / LOST_NAME).unlink()  # lost with the volume's last write, say
            publisher.step(force_status=True)
            assert read_lost(folder) == {"a/0002.npy": object_name(sid_of("a/0002.npy"))}
            publisher.close()
    finally:
        store.close()
