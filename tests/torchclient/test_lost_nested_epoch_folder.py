"""A dataset folder named like an epoch (``runs/epoch-3/``) inside a published epoch (issue 20).

The torch client finds the mount above a file from its ``epoch-N`` folder, to read the folder
view's ``.epochfs/lost.json`` and to name the sample's key. It took the nearest ``epoch-N``
parent: for ``view/epoch-0/runs/epoch-3/0001.npy`` that was ``view/epoch-0/runs``, where no record
is, so a lost sample was retried and reported vanished. Checked with the real publisher over a
real store, the sample made lost as the scrub does it."""

from __future__ import annotations

import errno
import time
from pathlib import Path

import pytest
from fuse_helpers import admit, open_store
from lost_helpers import make_lost

from epochfs.sidecar.folderview import FolderPublisher
from epochfs.torchclient.decode import decode_bytes, load_sample
from epochfs.torchclient.lost import SampleLostError, lost_error


def test_a_lost_sample_under_a_dataset_folder_named_epoch_n_is_reported_lost(tmp_path: Path) -> None:
    cache, folder = tmp_path / "cache", tmp_path / "view"
    objects = {f"runs/epoch-3/{i:04d}.bin": bytes([i]) * 300 for i in range(4)}
    lost = "runs/epoch-3/0001.bin"
    store = open_store(cache, capacity=1 << 20, in_use_seconds=0.0)
    try:
        admit(store, objects)
        assert store.cut(0) == 0
        publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir.absolute())
        publisher.recover()
        publisher.step(force_status=True)
        make_lost(store, lost)
        publisher.step(force_status=True)

        path = str(folder / "epoch-0" / lost)
        err = lost_error(path, FileNotFoundError(errno.ENOENT, "gone", path))
        assert err is not None, "the record names it: lost"
        assert f"(key {lost})" in str(err) and "lost.json lists it" in str(err)
        started = time.monotonic()
        with pytest.raises(SampleLostError):
            load_sample(path, decode_bytes, retry_seconds=30)
        assert time.monotonic() - started < 5, "not retried"
        whole = str(folder / "epoch-0" / "runs" / "epoch-3" / "0002.bin")
        assert bytes(load_sample(whole, decode_bytes).numpy()) == objects["runs/epoch-3/0002.bin"]
    finally:
        store.close()


def test_a_plain_folder_without_a_control_folder_keeps_the_nearest_epoch(tmp_path: Path) -> None:
    """No ``.epochfs/`` anywhere (a plain copy of an epoch): nothing says a sample was lost."""
    leaf = tmp_path / "epoch-0" / "runs" / "epoch-3"
    leaf.mkdir(parents=True)
    path = leaf / "a.bin"
    path.symlink_to(tmp_path / "missing")
    assert lost_error(str(path), FileNotFoundError(errno.ENOENT, "gone", str(path))) is None
