"""One test drives both views over one store: a real FUSE mount and the folder publisher.

For the same store and the same sequence of cuts (explicit, a jump, one made by a lookup on the
mount) and retirements, both list the same epochs with the same entries, the same symlink targets,
the same manifests, the same ``latest`` and the same bytes; their status documents agree but for
the clock.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from common import wait_until
from fuse_helpers import admit, files_under, make_objects, mounted, open_store

from epochfs.sidecar.folderview import FolderPublisher
from epochfs.torchclient import layout

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]


def tree_of(root: Path) -> dict[str, Any]:
    """Everything a reader can see under a view root, without following the entries' links:
    folder listings, link targets, control files (status without its clock) and the bytes read
    through every entry."""
    latest = os.readlink(root / "latest") if os.path.lexists(root / "latest") else None
    out: dict[str, Any] = {"latest": latest, "epochs": layout.list_epochs(root),
                           "root": sorted(os.listdir(root))}
    out["control"] = sorted(os.listdir(root / ".epochfs"))
    for n in out["epochs"]:
        base = root / layout.epoch_name(n)
        listings, targets = {}, {}
        for dirpath, dirs, files in os.walk(base):
            rel = os.path.relpath(dirpath, base)
            listings[rel] = sorted(dirs + files)
            for name in files:
                targets[os.path.normpath(os.path.join(rel, name))] = os.readlink(os.path.join(dirpath, name))
        out[f"epoch-{n}"] = {
            "listings": listings,
            "targets": targets,
            "manifest": layout.manifest_path(root, n).read_bytes(),
            "bytes": files_under(base),
        }
    status = layout.read_status(root)
    assert status is not None
    status.pop("time", None)
    out["status"] = status
    return out


def test_the_folder_view_equals_the_fuse_view(tmp_path: Path) -> None:
    cache, mnt, folder = tmp_path / "cache", tmp_path / "mnt", tmp_path / "folder"
    store = open_store(cache, keep_epochs=2, in_use_seconds=3600.0)
    first = make_objects(25, 5000, seed=1)
    # Paths the view's rules show or hide: nested, unicode, spaces, and a clash (a file named
    # like a folder another key needs), which both views must resolve the same way.
    odd = {"deep/a/b/c.npy": b"c" * 100, "deep/a/ü ñ.bin": b"u" * 7, "clash": b"file",
           "clash/inner.bin": b"inner", "zero.bin": b""}
    admit(store, first | odd)
    store.cut(0)
    publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir, grace=False)
    publisher.recover()

    def same(expected_epochs: list[int]) -> None:
        publisher.step(force_status=True)
        wait_until(lambda: layout.list_epochs(mnt) == expected_epochs, timeout=10, what="the mount's epochs")
        # After a cut on lookup the mount's refresher drops the kernel's cached `latest` at once,
        # on its own thread: the listing can show the new epoch a moment before `latest` does.
        newest = layout.epoch_name(max(expected_epochs))
        wait_until(lambda: os.readlink(mnt / layout.LATEST_NAME) == newest, timeout=10,
                   what="the mount's latest")
        # The status documents are read at different moments; the store does not change meanwhile.
        fuse_view, folder_view = tree_of(mnt), tree_of(folder)
        assert folder_view["epochs"] == expected_epochs
        assert folder_view == fuse_view

    with mounted(cache, mnt, args=("--link-root", str(store.objects_dir))):
        same([0])
        admit(store, make_objects(10, 70_000, start=25, seed=2))
        store.cut(1)
        same([0, 1])
        # A cut made by a lookup on the mount: the folder publishes the same epoch.
        admit(store, make_objects(3, 100, start=35, seed=3))
        assert os.path.isdir(mnt / "epoch-2")
        same([0, 1, 2])
        # An explicit jump (epochfs cut --epoch 5), then retirement of all but the newest two.
        store.cut(5)
        same([0, 1, 2, 5])
        assert store.retire(now=time.time() + 7200) == [0, 1]
        same([2, 5])
        assert tree_of(folder)["epoch-5"]["bytes"] == tree_of(folder)["epoch-2"]["bytes"]
    store.close()
