"""A key skipped as a file/folder name clash keeps its catalog row: still the remote's, repairable.

A listing skips a key that is also a folder of other keys (``a`` beside ``a/b``): it cannot be
shown as both. Where the clash was found in the key's own page (or the key named a span's
boundary folder) the row was left out, so a relist's end dropped it as "gone from the remote",
and a cached sample of it that was damaged could not be repaired (no row: marked lost). Every
clash now writes the row and marks it :data:`~epochfs.sidecar.store.catalog.SKIPPED_CLASH`: never
fetched as a new sample, repaired in place when its cached sample is damaged. A key skipped for
another reason (its downloads failed for good) is still lost, as before. The end-to-end case
(``epochfs sample``, ``relist`` and ``verify`` over S3) is
tests/sampler/test_clash_after_upload_repair.py.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from integrity_helpers import damage
from store_helpers import sid_of

from epochfs.sidecar.catalog import build_catalog
from epochfs.sidecar.listing import CatalogReport
from epochfs.sidecar.listing.clashes import ClashFinder
from epochfs.sidecar.listing.filter import PageFilter
from epochfs.sidecar.remote import RemoteObject
from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.store import Admission, CatalogRow, Policy, Store, object_name
from epochfs.sidecar.store.catalog import SKIPPED_CLASH
from epochfs.sidecar.store.integrity import objects_after


def _objects(*keys: str) -> list[RemoteObject]:
    return [RemoteObject(k, 1, "v1") for k in keys]


def test_every_clash_keeps_its_row_to_be_marked(tmp_path: Path) -> None:
    report = CatalogReport()
    filt = PageFilter(report, seed=0, shard_index=0, shard_count=1, object_limit=100)
    finder = ClashFinder()
    first = filt.page(_objects("a", "a!"), finder)  # UTF-8 byte order, as S3 lists
    assert [r.key for r in first.rows] == ["a", "a!"] and first.clashes == []
    # "a" clashes with a later page's key; "b/c" with a key of its own page; "cat" with a key of
    # another stretch (a span that starts at cat/), found as the pages commit.
    second = filt.page(_objects("a/x", "b/c", "b/c/d", "cat"), finder)
    assert [r.key for r in second.rows] == ["a/x", "b/c", "b/c/d", "cat"]
    assert sorted(second.clashes) == ["a", "b/c"]
    third = filt.page(_objects("cat/x"), ClashFinder())
    assert filt.across([second.edges, third.edges]) == ["cat"]
    assert (report.clashes, report.added, second.skips) == (3, 4, 0), "counted when marked, once"


def test_a_relist_keeps_a_clash_skipped_key_and_does_not_call_it_gone(tmp_path: Path) -> None:
    with Store(tmp_path / "cache", create=True) as store:
        remote = MemoryRemote({"k/a.bin": b"1", "k/b.bin": b"2"})
        build_catalog(store, remote, seed=0, shard_index=0, shard_count=1, object_limit=100)
        remote = MemoryRemote({"k/a.bin": b"1", "k/a.bin/inner.bin": b"3", "k/b.bin": b"2"})
        report = build_catalog(store, remote, seed=0, shard_index=0, shard_count=1, object_limit=100,
                               fresh=True)
        assert (report.complete, report.dropped, report.clashes) == (True, 0, 1), str(report)
        assert "gone from the remote" not in str(report)
        rows = dict(store._ix.query("SELECT key, skipped FROM catalog"))
        assert rows == {"k/a.bin": SKIPPED_CLASH, "k/a.bin/inner.bin": 0, "k/b.bin": 0}
        offered = [c.key for _, c in store.candidates(after_rank=None, limit=10)]
        assert sorted(offered) == ["k/a.bin/inner.bin", "k/b.bin"], "never fetched as a new sample"
        assert store.stats().skipped_total == 1
        again = build_catalog(store, remote, seed=0, shard_index=0, shard_count=1, object_limit=100,
                              fresh=True)
        assert (again.dropped, again.clashes) == (0, 1)
        assert store.stats().skipped_total == 1, "the same clash is not counted again by a relist"


@pytest.mark.parametrize("skip", [SKIPPED_CLASH, 1])
def test_a_damaged_sample_of_a_clash_skipped_key_waits_for_its_repair(tmp_path: Path, skip: int) -> None:
    """Skipped as a clash: the remote still has it, the repair fetches it (``repairs_due``). Skipped
    because its downloads failed for good (1): nothing would fetch it, it is lost, as before."""
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=10**6, headroom=0.0))
        body = b"x" * 600
        temp = store.tmp_dir / "a.part"
        temp.write_bytes(body)
        md5 = hashlib.md5(body).hexdigest()
        store.admit([Admission("k/a.bin", sid_of("k/a.bin"), len(body), f"md5:{md5}", md5, temp)])
        store.add_catalog([CatalogRow("k/a.bin", sid_of("k/a.bin"), 600, md5, 0)])
        with store._ix.write() as db:
            db.execute("UPDATE catalog SET skipped=? WHERE key='k/a.bin'", (skip,))
        assert store.cut(0) == 0
        path = store.objects_dir / object_name(sid_of("k/a.bin"))
        damage(path, "flip")
        obj = next(o for o in objects_after(store._ix, 0, 10) if o.key == "k/a.bin")
        taken = store.take_out([(obj, "digest mismatch")], quarantine=False)
        due = [c.key for c in store.repairs_due()]
        stats = store.stats()
        if skip == SKIPPED_CLASH:
            assert taken[0].refetch is not None and due == ["k/a.bin"]
            assert (stats.repairing, stats.lost) == (1, 0), "waiting for its repair, not lost"
            assert path.exists(), "kept in place until the repair lands"
        else:
            assert due == [] and (stats.repairing, stats.lost) == (1, 1)
            assert not path.exists()
