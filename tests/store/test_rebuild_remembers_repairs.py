"""A rebuild of a damaged index remembers which samples wait for their repair, and which are lost
(issue 20, "An epoch never changes under a reader"; sidecar/store/repairlog.py).

Before: the members files, which a damaged index is rebuilt from, do not say which samples are in
``repairs``, and the rebuild takes back as sound every object file of the recorded size without
reading it. A sample a scrub had found with a flipped byte (its damaged file kept in place until
the repair renames the right bytes over it) became an ordinary sample again: its damaged bytes were
served, with no error, until a scrub found them again; a sample lost because the remote's bytes
changed was fetched again for nothing. Now every change of ``repairs`` is appended to
``<cache>/epochs/repairs.log`` inside its transaction, and the rebuild marks those samples again.

Real SQLite files with real damage, the real in-process sampler loop over sidecar/remote/testing.py,
``epochfs verify``'s pass for the take-out."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

from common import wait_until
from integrity_helpers import damage, objects_of, sampling
from sampler_helpers import verify_cache
from store_helpers import epoch_snapshot, restart_as_the_sampler, sid_of

from epochfs.fuse.tree import EpochTree
from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.scrub import verify
from epochfs.sidecar.store import INDEX_NAME, Admission, CatalogRow, Policy, Store, object_name, repairlog
from epochfs.sidecar.store.integrity import objects_after
from epochfs.sidecar.store.memberfiles import path_of


def _manifests(store: Store) -> dict[int, bytes]:
    """Each live epoch's manifest as the FUSE view renders it."""
    return {e.epoch: bytes(EpochTree(epoch=e.epoch, cut_at=e.cut_at, files=store.epoch_files(e.epoch),
                                     link_root=Path("/links")).packed_manifest())
            for e in store.epochs()}


def _damage_index(cache: Path) -> None:
    (cache / INDEX_NAME).write_bytes(b"not a database" * 400)  # found at the writer's open


def test_a_sample_waiting_for_its_repair_still_waits_after_a_rebuild_and_is_repaired_in_place(
        tmp_path: Path) -> None:
    objects = objects_of(40, size=2000)
    remote = MemoryRemote(objects)
    cache = tmp_path / "cache"
    with sampling(cache, remote, "--scrub-rate", "0") as (store, _):
        wait_until(lambda: store.stats().samples == 40, what="every object admitted")
        assert store.cut(force=True) == 0
        wait_until(lambda: path_of(cache, 0).exists(), timeout=10, what="the members file")
    key = sorted(objects)[11]
    path = cache / "objects" / object_name(sid_of(key))
    damage(path, "flip")
    damaged = path.read_bytes()
    with Store(cache) as store:  # epochfs verify on the stopped cache: taken out, kept in place
        report = verify(store, quarantine=True, err=io.StringIO(), progress_every=1e9)
        assert [d["key"] for d in report["damaged"]] == [key], report
        assert (store.stats().repairing, store.stats().lost) == (1, 0)
        before, manifests = epoch_snapshot(store), _manifests(store)
    assert path.read_bytes() == damaged, "kept in place for its repair"
    _damage_index(cache)

    _, _, recovered = restart_as_the_sampler(cache)
    assert recovered.orphans_removed == 0
    assert [p.name for p in cache.glob(f"{INDEX_NAME}.corrupt-*")], "the damaged index was replaced"
    with Store(cache) as store:
        assert epoch_snapshot(store) == before and _manifests(store) == manifests, "the same epoch"
        stats = store.stats()
        assert (stats.repairing, stats.lost) == (1, 0), "still waiting for its repair after the rebuild"
        # (repairs_due() waits for the sampler's listing: the rebuilt index has no catalog yet)
        waiting = store._ix.query("SELECT s.key, r.lost FROM repairs r JOIN samples s ON s.id = r.sample")
        assert waiting == [(key, 0)], waiting
        assert key not in {o.key for o in objects_after(store._ix, 0, 100)}, "no scrub needed to find it"
    assert path.read_bytes() == damaged, "its file kept in place: a reader never gets ENOENT"

    opened = remote.opens[key]
    with sampling(cache, remote, "--scrub-rate", "0") as (store, _):
        wait_until(lambda: store.stats().repaired_total == 1 and store.stats().repairing == 0,
                   what="repaired in place")
        assert epoch_snapshot(store) == before and _manifests(store) == manifests, "same names, same lines"
        assert store.stats().samples == 40
    assert remote.opens[key] == opened + 1, "fetched once more: the repair"
    assert sum(remote.opens.values()) == 41, "the first fetch of 40 and the repair: nothing else"
    assert path.read_bytes() == objects[key]
    verify_cache(cache, objects)


def _admit(store: Store, key: str, body: bytes) -> None:
    temp = store.tmp_dir / f"{sid_of(key)}.part"
    temp.write_bytes(body)
    md5 = hashlib.md5(body).hexdigest()
    store.admit([Admission(key, sid_of(key), len(body), f"md5:{md5}", md5, temp)])


def test_a_lost_sample_stays_lost_after_a_rebuild_and_is_not_fetched_again(tmp_path: Path) -> None:
    """A sample whose remote bytes changed cannot be repaired (its epochs were cut with the old
    ones): lost, its entry kept, its file gone. After a rebuild it is lost still, not due for a
    repair that can only fail again; a sample waiting beside it waits still."""
    cache = tmp_path / "cache"
    keys = ("a", "b", "c", "d")
    body = {k: k.encode() * 700 for k in keys}
    catalog = [CatalogRow(k, sid_of(k), 700, "v1", i) for i, k in enumerate(keys)]
    with Store(cache, create=True) as store:
        store.recover()
        store.configure(Policy(capacity=10**6, headroom=0.0))
        for k in keys:
            _admit(store, k, body[k])
        store.add_catalog(catalog)
        assert store.cut(0) == 0
        for k in ("b", "c"):
            damage(store.objects_dir / object_name(sid_of(k)), "flip")
        found = [o for o in objects_after(store._ix, 0, 10) if o.key in ("b", "c")]
        store.take_out([(o, "md5 mismatch") for o in found], quarantine=False)
        _admit(store, "b", b"B" * 700)  # b's repair: the remote's object changed
        stats = store.stats()
        assert (stats.repairing, stats.lost) == (2, 1) and [c.key for c in store.repairs_due()] == ["c"]
        before = epoch_snapshot(store)
        lost = store.objects_dir / object_name(sid_of("b"))
        waiting = store.objects_dir / object_name(sid_of("c"))
    assert not lost.exists() and waiting.exists()
    _damage_index(cache)

    restart_as_the_sampler(cache)
    with Store(cache) as store:
        store.add_catalog(catalog)  # the sampler lists the remote again
        assert epoch_snapshot(store) == before
        stats = store.stats()
        assert (stats.repairing, stats.lost) == (2, 1), "b lost, c waiting: as before the damage"
        assert [c.key for c in store.repairs_due()] == ["c"], "b is not fetched again"
        _, entries = store.lost_samples()
        assert entries is not None and [e.path for e in entries] == ["b"]
    assert not lost.exists() and waiting.exists()


def test_the_log_holds_what_the_index_committed_after_a_start(tmp_path: Path) -> None:
    """A mark appended before a commit that never came (here: the transaction rolled back), a
    torn last line (a writer killed inside its append) and the marks of a repair that landed are
    all gone after the next start's recovery: the log is the committed table again, so a later
    rebuild marks nothing that the index did not hold."""
    cache = tmp_path / "cache"
    catalog = [CatalogRow(k, sid_of(k), 500, "v1", i) for i, k in enumerate("abc")]
    with Store(cache, create=True) as store:
        store.recover()
        store.configure(Policy(capacity=10**6, headroom=0.0))
        for k in ("a", "b", "c"):
            _admit(store, k, k.encode() * 500)
        store.add_catalog(catalog)
        assert store.cut(0) == 0
        objs = {o.key: o for o in objects_after(store._ix, 0, 10)}
        for k in ("a", "b"):
            damage(store.objects_dir / object_name(sid_of(k)), "flip")
        store.take_out([(objs["a"], "md5"), (objs["b"], "md5")], quarantine=False)
        _admit(store, "a", b"a" * 500)  # a repaired in place
        try:
            with store._ix.write() as db:
                repairlog.note(db, cache, [(objs["c"].id, objs["c"].sid, repairlog.WAITING, 0.0)])
                raise RuntimeError("killed before the commit")
        except RuntimeError:
            pass
        with open(repairlog.path_of(cache), "ab") as f:
            f.write(b'[1,"torn')
        assert set(repairlog.load(cache)) == {objs["b"].id, objs["c"].id}, "c's mark never committed"
        lines = repairlog.path_of(cache).read_bytes().splitlines()
        assert len(lines) == 5, lines  # a, b taken out; a repaired; c; the torn one
    with Store(cache) as store:
        store.recover()
    lines = repairlog.path_of(cache).read_bytes().splitlines()
    assert [json.loads(line)[:3] for line in lines] == [[objs["b"].id, objs["b"].sid, repairlog.WAITING]]
    _damage_index(cache)
    restart_as_the_sampler(cache)
    with Store(cache) as store:
        store.add_catalog(catalog)  # the sampler lists the remote again
        assert [c.key for c in store.repairs_due()] == ["b"], "only b waits: a repaired, c never taken out"
        assert store.stats().repairing == 1


def test_a_torn_append_costs_only_its_own_line(tmp_path: Path) -> None:
    """A writer killed inside its append leaves half a line; the next append starts a new line,
    so only the torn mark is skipped (logged), never the ones after it."""
    cache = tmp_path / "cache"
    with Store(cache, create=True) as store:
        with store._ix.write() as db:
            repairlog.note(db, cache, [(1, "s1", repairlog.WAITING, 1.0)])
        with open(repairlog.path_of(cache), "ab") as f:
            f.write(b'[2,"s2",')
        with store._ix.write() as db:
            repairlog.note(db, cache, [(3, "s3", repairlog.LOST, 3.0), (1, "s1", repairlog.REPAIRED, 4.0)])
    assert repairlog.load(cache) == {3: repairlog.Mark("s3", True, 3.0)}
