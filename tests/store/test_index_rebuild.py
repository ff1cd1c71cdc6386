"""A damaged index is rebuilt from what is on disk, not by dropping the published epochs (issue 20,
item 4; sidecar/store/memberfiles.py, memberrestore.py, reset.py).

Before: garbage on a few pages of ``index.sqlite``, and the reset gave a fresh, empty index: every
epoch gone (a reader inside one got ENOENT for every file), start-up recovery removed every object
file as an orphan, and the sampler fetched the whole cache again. Now each live epoch's members are
kept in ``<cache>/epochs/epoch-N.members`` (written by each cut, by the sampler's keeper for a big epoch),
and the reset builds the fresh index from them before it takes the damaged one's place: the same
epochs, numbers, files and manifests, no object of them removed, none fetched again.

Real SQLite files with real damage (garbage written over pages picked with SQLite's ``dbstat``),
the real in-process sampler loop over sidecar/remote/testing.py."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, cut_epochs, make_objects, open_store
from integrity_helpers import objects_of, sampling
from sampler_helpers import verify_cache
from store_helpers import epoch_snapshot, garble, restart_as_the_sampler, sid_of

from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.store import (
    INDEX_NAME,
    CatalogRow,
    Policy,
    Schedule,
    Store,
    object_name,
)
from epochfs.sidecar.store.memberfiles import path_of


def object_files(cache: Path) -> set[str]:
    return {f"{d.name}/{f.name}" for d in (cache / "objects").iterdir() for f in d.iterdir()}


# ---------------------------------------------------------------------------- the store
def test_a_damaged_index_is_rebuilt_with_every_live_epoch_and_no_object_removed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    objects = make_objects(520, 700)
    keys = sorted(objects)
    with open_store(cache, keep_epochs=3, capacity=10 << 20) as store:
        admit(store, {k: objects[k] for k in keys[:200]})
        assert store.cut() == 0
        admit(store, {k: objects[k] for k in keys[200:350]})
        assert store.cut() == 1
        admit(store, {k: objects[k] for k in keys[350:500]})
        assert store.cut() == 2
        admit(store, {k: objects[k] for k in keys[500:]})  # after the last cut: in no epoch
        assert all(path_of(cache, n).exists() for n in (0, 1, 2)), "each cut wrote its file"
        assert store.write_members() == [], "a file per epoch, written once"
        before = epoch_snapshot(store)
        infos = store.epochs()
        max_sample = int(store._ix.query("SELECT MAX(max_sample) FROM epochs")[0][0])
    assert [len(before[n]) for n in (0, 1, 2)] == [200, 350, 500]
    files_before = object_files(cache)
    assert len(files_before) == 520
    garble(cache, "samples")

    caplog.set_level(logging.ERROR, logger="epochfs.store")
    problem, seconds, report = restart_as_the_sampler(cache)
    assert problem != "ok", "the full check found the damage"
    lines = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert len(lines) == 1 and "moved aside to index.sqlite.corrupt-" in lines[0], lines
    assert "epochs 0, 1, 2 restored" in lines[0] and "500 object files kept" in lines[0], lines[0]

    with Store(cache, create=True) as store:
        assert epoch_snapshot(store) == before, "the same epochs with the same files"
        assert store.epochs() == infos, "the same numbers, counts, cut times (manifest headers)"
        stats = store.stats()
        assert (stats.samples, stats.cache_bytes) == (500, 500 * 700), "the running totals recounted"
        assert stats.repairing == 0
        # Numbers go on above the newest; a new sample's id is above every restored cut.
        assert store.next_epoch() == 3
        admit(store, {"new/0.bin": b"n" * 700})
        assert int(store._ix.query("SELECT id FROM samples WHERE key='new/0.bin'")[0][0]) > max_sample
        assert store.cut() == 3
        assert len(store.epoch_files(3)) == 501 and before[2] == [
            f for f in store.epoch_files(3) if f.path != "new/0.bin"]
    # Recovery removed the 20 objects in no epoch (orphans now), and nothing of the epochs.
    assert report.orphans_removed == 20
    assert files_before - object_files(cache) == {object_name(sid_of(k)) for k in keys[500:]}
    assert seconds < 10


def test_the_sampler_fetches_nothing_of_the_restored_epochs_again(tmp_path: Path) -> None:
    """500 samples in 3 epochs cut while the sampler fetched; the sampler's own thread writes the
    members files; 7 pages of the index garbled; the next start rebuilds, and the sampler's
    relisting fetches only what no epoch held (here: nothing)."""
    objects = objects_of(500, size=1000)
    remote = MemoryRemote(objects)
    cache = tmp_path / "cache"
    with sampling(cache, remote, "--keep-epochs", "3", "--scrub-rate", "0") as (store, _):
        for n, count in enumerate((150, 300, 500)):
            wait_until(lambda c=count: store.stats().samples >= c, what=f"{count} samples")  # type: ignore[misc]
            assert store.cut(force=True) == n
        wait_until(lambda: store.stats().samples == 500, what="every object admitted")
        wait_until(lambda: all(path_of(cache, n).exists() for n in range(3)), timeout=10,
                   what="the sampler's keeper wrote the three members files")
        before = epoch_snapshot(store)
    assert len(before[2]) == 500
    assert sum(remote.opens.values()) == 500
    garble(cache, "samples")

    problem, seconds, _ = restart_as_the_sampler(cache)
    assert problem != "ok"
    opened = dict(remote.opens)
    with sampling(cache, remote, "--keep-epochs", "3", "--scrub-rate", "0") as (store, _):
        assert epoch_snapshot(store) == before
        assert store.stats().samples == 500
        # Listed again (the fixture lists before the loop starts): no key is left to fetch.
        assert store.candidates(after_rank=None, limit=1) == [] and store.repairs_due() == []
        assert epoch_snapshot(store) == before
    refetched = {k: n - opened.get(k, 0) for k, n in remote.opens.items() if n != opened.get(k)}
    members = {f.path for files in before.values() for f in files}
    assert not {k for k in refetched if k in members}, f"fetched again: {sorted(refetched)[:5]}"
    verify_cache(cache, objects)
    print(f"\nrebuild: {seconds:.3f}s from the start's check to the epochs back; "
          f"{len(refetched)} of {len(objects)} objects fetched again")


def test_a_missing_or_short_object_is_repaired_in_place_and_the_epoch_stays_whole(tmp_path: Path) -> None:
    objects = objects_of(60, size=1000)
    remote = MemoryRemote(objects)
    cache = tmp_path / "cache"
    with sampling(cache, remote, "--scrub-rate", "0") as (store, _):
        wait_until(lambda: store.stats().samples == 60, what="every object admitted")
        assert store.cut(force=True) == 0
        wait_until(lambda: path_of(cache, 0).exists(), timeout=10, what="the members file")
        before = epoch_snapshot(store)
    keys = sorted(objects)
    gone, short = cache / "objects" / object_name(sid_of(keys[3])), \
        cache / "objects" / object_name(sid_of(keys[7]))
    gone.unlink()
    os.chmod(short, 0o644)
    os.truncate(short, 10)
    (cache / INDEX_NAME).write_bytes(b"not a database" * 400)  # found at the writer's open
    restart_as_the_sampler(cache)
    assert not short.exists(), "a short file is never served"
    with sampling(cache, remote, "--scrub-rate", "0") as (store, _):
        assert epoch_snapshot(store) == before, "the epoch lists both while they are fetched again"
        wait_until(lambda: store.stats().repaired_total == 2 and store.stats().repairing == 0,
                   what="both repaired in place")
        assert epoch_snapshot(store) == before
    assert remote.opens[keys[3]] == remote.opens[keys[7]] == 2
    assert sum(remote.opens.values()) == 62
    verify_cache(cache, objects)


def test_schedule_mode_windows_come_back_with_their_files_and_ranks(tmp_path: Path) -> None:
    """Windows recorded by their bounds in the sampling order (schema 4) are written from those
    bounds and restored as rows; the samples keep their ranks, so the next window is cut by its
    bounds again once the catalog is listed again."""
    import random

    cache = tmp_path / "cache"
    objects = make_objects(60, 50)
    keys = sorted(objects)
    ranks = random.Random(3).sample(range(10_000), len(keys))
    catalog = [CatalogRow(k, sid_of(k), 50, "v", rank=r) for k, r in zip(keys, ranks, strict=True)]
    policy = Policy(capacity=1 << 30, keep_epochs=3, schedule=Schedule(initial=20, growth=1.5))
    with open_store(cache) as store:
        store.configure(policy)
        store.add_catalog(catalog)
        store.finalize_catalog()
        admit(store, objects)
        for n in range(3):
            assert store.cut(n) == n
        assert store._ix.query("SELECT COUNT(*) FROM epochs WHERE lo_key IS NOT NULL")[0][0] == 3
        store.write_members()
        before = epoch_snapshot(store)
    assert [len(before[n]) for n in range(3)] == [20, 30, 45]
    (cache / INDEX_NAME).write_bytes(b"not a database" * 400)
    with Store(cache, create=True) as store:
        assert epoch_snapshot(store) == before
        assert store.policy() == policy, "the rules came back with the epochs"
        store.add_catalog(catalog)  # listed again
        store.finalize_catalog()
        held = {f.path for files in before.values() for f in files}
        assert {c.key for _, c in store.candidates(after_rank=None, limit=100)} == set(keys) - held
        admit(store, {k: objects[k] for k in keys if k not in held})  # only those fetched again
        assert store.cut(3) == 3
        assert store._ix.query("SELECT lo_key IS NOT NULL FROM epochs WHERE n=3")[0][0] == 1
        assert len(store.epoch_files(3)) == 60


# ---------------------------------------------------------------------------- the members files
def test_a_damaged_members_file_loses_its_epoch_only_and_its_number_is_never_cut_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    with open_store(cache, keep_epochs=3) as store:
        cut_epochs(store, 3)
        store.write_members()
        before = epoch_snapshot(store)
    damaged = path_of(cache, 2)
    lines = damaged.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"train/00025", b"train/00925", 1)  # the hash no longer matches
    damaged.write_bytes(b"".join(lines))
    (cache / INDEX_NAME).write_bytes(b"not a database" * 400)
    caplog.set_level(logging.ERROR, logger="epochfs.store")
    with Store(cache, create=True) as store:  # a writer's open finds the damage
        assert epoch_snapshot(store) == {0: before[0], 1: before[1]}
        assert store.cut_ready(2) is False and store.request_cut(2) is False
        with pytest.raises(ValueError, match="high-water mark 2"):
            store.cut(2)
        assert store.next_epoch() == 3
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "epoch 2 cannot be restored" in text and "epoch(s) 2 lost" in text, text


def test_a_retired_epoch_loses_its_members_file_and_is_never_restored(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    objects = make_objects(40, 100)
    keys = sorted(objects)
    with open_store(cache, keep_epochs=2, in_use_seconds=0.0) as store:
        for n in range(4):
            admit(store, {k: objects[k] for k in keys[n * 10:(n + 1) * 10]})
            assert store.cut() == n
            store.write_members()
        assert sorted(p.name for p in (cache / "epochs").iterdir()) == \
            [f"epoch-{n}.members" for n in range(4)]
        kept = path_of(cache, 1).read_bytes()
        assert store.retire() == [0, 1]
        # Out of the epochs' files, kept only as the bases of epoch 2's and 3's chained files
        # (written at their cuts: test_members_chained.py), never restored as epochs.
        assert sorted(p.name for p in (cache / "epochs").iterdir()) == \
            ["epoch-0.base", "epoch-1.base", "epoch-2.members", "epoch-3.members"]
        # A file left by a crash between retire()'s rename and its commit... cannot be (the rename
        # comes first); one put back by hand for a retired epoch goes at the keeper's next look,
        # which also rewrites epoch 2's file whole (its base retired) and drops the bases.
        path_of(cache, 1).write_bytes(kept)
        assert store.write_members() == [2] and not path_of(cache, 1).exists()
        assert sorted(p.name for p in (cache / "epochs").iterdir()) == ["epoch-2.members", "epoch-3.members"]
        before = epoch_snapshot(store)
    (cache / INDEX_NAME).write_bytes(b"not a database" * 400)
    with Store(cache, create=True) as store:
        assert epoch_snapshot(store) == before
        assert [e.epoch for e in store.epochs()] == [2, 3]


def test_members_files_name_every_member_with_its_row(tmp_path: Path) -> None:
    """The file's format: a header with the epoch's row, lines of members, a count and hash."""
    cache = tmp_path / "cache"
    with open_store(cache) as store:
        admit(store, {"a/x.bin": b"x" * 5, "a/y.bin": b"y" * 7})
        assert store.cut() == 0
        store.write_members()
    lines = path_of(cache, 0).read_text().splitlines()
    head, end = json.loads(lines[0]), json.loads(lines[-1])
    rows = [r for line in lines[1:-1] for r in json.loads(line)]
    assert (head["epoch"], head["samples"], head["bytes"]) == (0, 2, 12)
    assert [(r[1], r[2], r[4]) for r in rows] == [(sid_of("a/x.bin"), "a/x.bin", 5),
                                                  (sid_of("a/y.bin"), "a/y.bin", 7)]
    assert end["end"] == 2 and len(end["sha256"]) == 64
