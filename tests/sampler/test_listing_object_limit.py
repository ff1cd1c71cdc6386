"""The object limit recorded with a listing: a higher one lists afresh, a lower one does not, and a
cache listed before limits were recorded lists afresh once under a limit (its limit is unknown).

Before: a name recorded without a limit covered any, so every cache listed before the upgrade that
had been refused for objects over its limit kept its catalog of 0 keys after ``--capacity`` was
raised as the refusal asks."""

from __future__ import annotations

from pathlib import Path

from epochfs.sidecar.listing import Lister, source_for
from epochfs.sidecar.remote.testing import PagedMemoryRemote
from epochfs.sidecar.store import Meta, Store


def test_the_recorded_limit_decides_whether_a_start_lists_afresh(tmp_path: Path) -> None:
    remote = PagedMemoryRemote({"small": b"x" * 10, "big": b"x" * 5000}, page=10)
    with Store(tmp_path / "c", create=True) as store:
        old = Lister(store, source_for(remote), seed=0)  # no limit: the name recorded before limits
        assert old.run().complete and store.meta(Meta.LISTING_SOURCE) == "list"
        assert Lister(store, source_for(remote), seed=0).needed() is False
        assert Lister(store, source_for(remote), seed=0, object_limit=1000).needed() is True
        limited = Lister(store, source_for(remote), seed=0, object_limit=1000)
        assert limited.run(fresh=True).complete
        assert Lister(store, source_for(remote), seed=0, object_limit=500).needed() is False
        assert Lister(store, source_for(remote), seed=0, object_limit=1000).needed() is False
        assert Lister(store, source_for(remote), seed=0, object_limit=10_000).needed() is True
        assert Lister(store, source_for(remote), seed=0).needed() is True
