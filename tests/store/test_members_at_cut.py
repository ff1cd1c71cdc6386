"""An epoch cut just before the index is damaged survives the rebuild (issue 20, item 4; audit).

Before: a live epoch's members file was written only by the sampler's keeper thread, about a second
after the cut (:mod:`epochfs.sidecar.store.memberfiles`), so an index damaged in that second was
rebuilt without the newest epoch although a reader may already be inside it (its number refused,
its files ENOENT, its objects orphans). Now the cut puts the file in place inside its own write
transaction, before the commit makes the epoch visible (epochs up to ``AT_CUT`` members; a larger
one is still the keeper's, a documented window).

No keeper runs here (``open_store`` is the store alone, as under ``epochfs cut`` or between two
passes of the keeper): whatever file exists was written by the cut. Real SQLite files with real
damage (garbage over leaf pages, ``store_helpers.garble``), the start-up check and recovery as the
sampler runs them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, open_store
from store_helpers import epoch_snapshot, garble, restart_as_the_sampler, sid_of

from epochfs.sidecar.store import (
    INDEX_NAME,
    CatalogRow,
    Policy,
    Schedule,
    Store,
    memberfiles,
)
from epochfs.sidecar.store.memberfiles import path_of


@pytest.mark.parametrize("how", ["cut", "lookup"])
def test_an_epoch_cut_just_before_the_damage_comes_back_with_the_same_manifest(
        tmp_path: Path, how: str) -> None:
    """Epoch 0 has the keeper's file; epoch 1 is cut (by ``store.cut``: the sampler, ``/v1/cut``,
    ``epochfs cut``; or by a lookup: the FUSE server's cut) and the index is damaged before the
    keeper's next pass. Epoch 1 must come back with the same files and row."""
    cache = tmp_path / "cache"
    objects = make_objects(500, 700)
    keys = sorted(objects)
    with open_store(cache, keep_epochs=3) as store:
        admit(store, {k: objects[k] for k in keys[:250]})
        assert store.cut() == 0
        store.write_members()  # the keeper's pass after epoch 0
        admit(store, {k: objects[k] for k in keys[250:]})
        if how == "cut":
            assert store.cut() == 1
        else:
            assert store.request_cut(1), "the lookup cut epoch 1"
        before = epoch_snapshot(store)
        infos = store.epochs()
    assert [len(before[n]) for n in (0, 1)] == [250, 500]
    garble(cache, "samples")

    problem, _, report = restart_as_the_sampler(cache)
    assert problem != "ok", "the damage was found"
    with Store(cache, create=True) as store:
        assert epoch_snapshot(store) == before, "epoch 1 survived with the same manifest"
        assert store.epochs() == infos
        assert store.next_epoch() == 2
    assert path_of(cache, 1).exists(), "written by the cut: no keeper pass since epoch 0"
    assert report.orphans_removed == 0, "no object of epoch 1 removed as an orphan"


def test_a_schedule_window_cut_just_before_the_damage_comes_back(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    objects = make_objects(300, 50)
    keys = sorted(objects)
    catalog = [CatalogRow(k, sid_of(k), 50, "v", rank=i * 7 % 1000) for i, k in enumerate(keys)]
    policy = Policy(capacity=1 << 30, keep_epochs=3, schedule=Schedule(initial=100, growth=1.5))
    with open_store(cache) as store:
        store.configure(policy)
        store.add_catalog(catalog)
        store.finalize_catalog()
        admit(store, objects)
        assert store.cut(0) == 0
        before = epoch_snapshot(store)
    assert len(before[0]) == 100
    (cache / INDEX_NAME).write_bytes(b"not a database" * 400)
    with Store(cache, create=True) as store:
        assert epoch_snapshot(store) == before
        assert store.policy() == policy


def test_an_epoch_above_the_limit_is_written_at_its_cut_as_a_chained_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An epoch of more than AT_CUT members (here AT_CUT is lowered to 100 so a small epoch stands
    for 1M) gets its file from its cut when it can chain on the previous epoch's file: the cost is
    what changed (test_members_chained.py). Only more than AT_CUT changed samples (the first
    epoch of a big cache) are left to the keeper's next pass (the remaining window)."""
    monkeypatch.setattr(memberfiles, "AT_CUT", 100)
    cache = tmp_path / "cache"
    objects = make_objects(300, 100)
    with open_store(cache) as store:
        admit(store, dict(list(objects.items())[:100]))
        assert store.cut() == 0
        assert path_of(cache, 0).exists(), "100 members: written at the cut"
        admit(store, dict(list(objects.items())[100:150]))
        assert store.cut() == 1
        assert path_of(cache, 1).exists(), "150 members, 50 new: written at the cut, chained"
        admit(store, dict(list(objects.items())[150:]))
        assert store.cut() == 2
        assert not path_of(cache, 2).exists(), "150 new: left to the keeper"
        assert store.write_members() == [2]


def test_a_cut_whose_transaction_fails_leaves_no_file(tmp_path: Path) -> None:
    """The file goes in place before the commit; a transaction that fails after it (here: an
    error raised inside it, as a failed commit raises out of it) removes the file again."""
    cache = tmp_path / "cache"
    with open_store(cache) as store:
        admit(store, make_objects(20, 100))
        ix = store._ix
        with pytest.raises(RuntimeError), memberfiles.at_cut(cache) as keep, ix.write() as db:
            db.execute("INSERT INTO epochs(n, cut_at, samples, bytes, new, evicted, max_sample, "
                       "last_read, first_sample) VALUES(0, 0, 20, 2000, 20, 0, 20, 0, 1)")
            assert keep(db, 0)
            assert path_of(cache, 0).exists()
            raise RuntimeError("the commit failed")
        assert not path_of(cache, 0).exists()
        assert store.epochs() == []


def test_a_members_file_that_cannot_be_written_does_not_fail_the_cut(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A write error (here ``epochs/`` is a plain file, so the folder cannot be made; a full
    volume is the same) is logged and the cut stands, as it did before: the keeper tries again."""
    cache = tmp_path / "cache"
    with open_store(cache) as store:
        admit(store, make_objects(20, 100))
        (cache / memberfiles.MEMBERS_DIR).write_bytes(b"")
        caplog.set_level(logging.WARNING, logger="epochfs.store")
        assert store.cut() == 0
        assert [e.epoch for e in store.epochs()] == [0]
    assert any("could not be written at its cut" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("limit", [memberfiles.AT_CUT, 100])
def test_a_file_left_by_a_killed_cut_never_stands_for_the_epoch_cut_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    """A cut killed between its file's rename and its commit leaves ``epoch-N.members`` for an
    epoch that was never cut, and N is cut again (the high-water mark's ``cutting`` above the
    index's newest was never committed). The new cut replaces that file (a small epoch) or removes
    it (above AT_CUT: the keeper writes the right one, which it would not over a file present)."""
    monkeypatch.setattr(memberfiles, "AT_CUT", limit)
    cache = tmp_path / "cache"
    objects = make_objects(150, 100)
    with open_store(cache) as store:
        admit(store, objects)
        memberfiles.folder(cache).mkdir()
        path_of(cache, 0).write_bytes(b"left by a killed cut\n")
        assert store.cut() == 0
        if limit == 100:
            assert not path_of(cache, 0).exists()
            assert store.write_members() == [0]
        before = epoch_snapshot(store)
    (cache / INDEX_NAME).write_bytes(b"not a database" * 400)
    with Store(cache, create=True) as store:
        assert epoch_snapshot(store) == before
