"""More class folders than the listing has spans for (``MAX_FOLDER_SPANS``, 1,024): the
discovery cuts them into key ranges, which name only their first folder, so the class labels
(store/classes.py, ``.epochfs/classes.json``) must get every folder the discovery found when the
listing is prepared, sorted, before any epoch: the same numbering on every node of a job. Before,
the first record held the ranges' first folders and each node appended the other ~750 in the
order its own epochs met them."""

from __future__ import annotations

import threading
from pathlib import Path

from epochfs.sidecar.listing import Lister, source_for
from epochfs.sidecar.listing.paged import MAX_FOLDER_SPANS
from epochfs.sidecar.remote.testing import PagedMemoryRemote
from epochfs.sidecar.store import Store, classes

FOLDERS = 4 * MAX_FOLDER_SPANS - 24  # more than a span each: listed as ranges


def remote() -> PagedMemoryRemote:
    return PagedMemoryRemote({f"train/n{i:05d}/{j}.jpg": b"x" for i in range(FOLDERS) for j in range(2)},
                             page=1000)


def test_every_class_folder_is_numbered_at_the_listings_start_the_same_on_every_node(
        tmp_path: Path) -> None:
    numbered = []
    for shard in range(2):  # two nodes, each its shard of the keys
        with Store(tmp_path / f"node{shard}", create=True) as store:
            lister = Lister(store, source_for(remote()), seed=0, threads=2, stop=threading.Event(),
                            shard_index=shard, shard_count=2)
            _, parts, _ = lister.prepare()
            assert len(parts) <= MAX_FOLDER_SPANS + 1 < FOLDERS  # ranges, not a span a folder
            numbered.append(classes.read(store.root).folders)
    want = [f"train/n{i:05d}" for i in range(FOLDERS)]
    assert [f for f in numbered[0] if f != "train"] == want
    assert numbered[0] == numbered[1]
