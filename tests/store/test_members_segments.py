"""Index damage costs no live epoch of any size (issue 20): segments written ahead of the cut.

Before: a cut wrote its epoch's members file itself only when it would list at most ``AT_CUT``
members (chained on the previous live epoch's file); the first epoch of a big cache, or one cut
after more than ``AT_CUT`` admissions, got its file from the keeper seconds later (23-27 s at 1M),
and an index damaged meanwhile lost that live epoch. Now the keeper writes *segments* of the
admission order ahead of the cut (:mod:`epochfs.sidecar.store.membersegments`) and the cut chains
its file on them, listing only what was admitted since the newest one.

``AT_CUT`` is lowered to 100 (a segment is due after 50 admissions): a 200-member epoch stands for
a 1M one. The keeper runs only where a test calls ``write_members`` (one pass, as its thread
does); the index is damaged right after the cut, before any other pass. Real SQLite caches, the
index replaced by garbage, the sampler's start-up check and recovery.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from fuse_helpers import admit, make_objects, open_store
from store_helpers import epoch_snapshot, members_head, restart_as_the_sampler

from epochfs.sidecar.store import INDEX_NAME, Store, memberfiles, membersegments, object_name
from epochfs.sidecar.store.memberfiles import path_of
from epochfs.sidecar.store.objects import OBJECTS_DIR

LIMIT = 100


@pytest.fixture(autouse=True)
def _small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memberfiles, "AT_CUT", LIMIT)


def _own(path: Path) -> int:
    """Members listed in a file itself (its last line's count)."""
    return int(json.loads(path.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1])["end"])


def _segments(cache: Path) -> list[str]:
    """The segments' names, by the last id they cover (the newest last)."""
    return sorted(membersegments.segments(cache), key=lambda s: int(s.split("-")[2]))


def _damage(cache: Path) -> None:
    (cache / INDEX_NAME).write_bytes(b"not a database" * 400)


def _drop(cache: Path, sample_id: int) -> None:
    """A sample gone from the index, the running totals and its object file, as eviction takes one
    (which never takes one above the newest cut: this stands for any other way to drop one)."""
    db = sqlite3.connect(cache / INDEX_NAME)
    try:
        with db:
            sid, size = db.execute("SELECT sid, size FROM samples WHERE id=?", (sample_id,)).fetchone()
            db.execute("DELETE FROM samples WHERE id=?", (sample_id,))
            db.execute("UPDATE counters SET value=value-1 WHERE name='cache_samples'")
            db.execute("UPDATE counters SET value=value-? WHERE name='cache_bytes'", (size,))
    finally:
        db.close()
    (cache / OBJECTS_DIR / object_name(str(sid))).unlink()


def _admit_in_rounds(store: Store, objects: dict[str, bytes], keys: list[str], rounds: list[int],
                     *, keeper: bool = True) -> int:
    """Admit ``rounds`` keys after another, a keeper pass after each; returns the keys used."""
    at = 0
    for count in rounds:
        admit(store, {k: objects[k] for k in keys[at:at + count]})
        at += count
        if keeper:
            store.write_members()
    return at


def _restores(cache: Path, before: dict[int, Any], orphans: int = 0) -> None:
    _damage(cache)
    _, _, report = restart_as_the_sampler(cache)
    assert any(p.name.startswith(f"{INDEX_NAME}.corrupt") for p in cache.iterdir()), "replaced"
    with Store(cache, create=True) as store:
        assert epoch_snapshot(store) == before, "every live epoch back with its manifest"
    assert report.orphans_removed == orphans, "no object of a live epoch removed as an orphan"


def test_a_first_epoch_above_the_limit_is_written_at_its_cut(tmp_path: Path) -> None:
    """The first epoch of a big cache (no epoch to chain on): 180 samples admitted, the keeper's
    segments cover the first 120, the cut lists the last 60 and chains on them; damaged right
    after the cut, the epoch comes back; and again after a second damage (its segments are kept
    by the rebuild, as its file names them)."""
    cache = tmp_path / "cache"
    objects = make_objects(180, 200)
    keys = sorted(objects)
    with open_store(cache) as store:
        _admit_in_rounds(store, objects, keys, [60, 60, 30])
        assert len(_segments(cache)) == 2, "a segment after more than 50 admissions past the newest"
        admit(store, {k: objects[k] for k in keys[150:]})
        assert store.cut() == 0
        before = epoch_snapshot(store)
    assert len(before[0]) == 180
    head = members_head(path_of(cache, 0))
    assert head["epochfs_members"] == memberfiles.SEGMENTED
    assert head["base"]["segment"] == _segments(cache)[-1] and head["base_span"] == [1, 120]
    assert _own(path_of(cache, 0)) == 60, "the cut listed only what the segments do not"
    _restores(cache, before)
    assert len(_segments(cache)) == 2, "kept: the restored epoch's file names them"
    _restores(cache, before)


def test_a_rebuild_removes_the_segments_above_its_newest_epoch(tmp_path: Path) -> None:
    """A rebuilt index hands out again the ids above its newest restored epoch: a segment over
    them (admitted after the newest cut, in no epoch) is removed by the rebuild, and the next big
    cut chains on the segments written since, over the new samples."""
    cache = tmp_path / "cache"
    objects = make_objects(300, 200)
    keys = sorted(objects)
    with open_store(cache, keep_epochs=3) as store:
        admit(store, {k: objects[k] for k in keys[:50]})
        assert store.cut() == 0
        _admit_in_rounds(store, objects, keys[50:], [60])
        assert _segments(cache) == ["segment-51-110"]
        before = epoch_snapshot(store)
    _restores(cache, before, orphans=60)  # in no epoch: not kept, as before
    assert _segments(cache) == [], "ids 51-110 are handed out again"
    with open_store(cache, keep_epochs=3) as store:
        _admit_in_rounds(store, objects, keys[110:], [60, 60])
        admit(store, {k: objects[k] for k in keys[230:]})
        assert store.cut() == 1
        head = members_head(path_of(cache, 1))
        assert head["base"]["segment"] == _segments(cache)[-1] and head["base_span"] == [1, 170]
        before = epoch_snapshot(store)
    assert len(before[1]) == 50 + 190
    _restores(cache, before)


@pytest.mark.parametrize("depth", [8, 2])
def test_an_epoch_cut_after_more_than_the_limit_is_written_at_its_cut(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, depth: int) -> None:
    """Epoch 0 (50 members, its own file), then 330 admissions with keeper passes between (a
    chain of segments anchored on epoch 0's file; with a chain of at most 2, compacted into one
    segment over everything since epoch 0), then the cut of epoch 1: its file is in place at the
    cut, takes ids 1-350 from the chain and lists the last 30; both epochs come back."""
    monkeypatch.setattr(membersegments, "DEPTH", depth)
    cache = tmp_path / "cache"
    objects = make_objects(430, 200)
    keys = sorted(objects)
    with open_store(cache, keep_epochs=3) as store:
        admit(store, {k: objects[k] for k in keys[:50]})
        assert store.cut() == 0
        _admit_in_rounds(store, objects, keys[50:], [60, 60, 60, 60, 60, 30])
        names = _segments(cache)
        top = members_head(membersegments.segments(cache)[names[-1]])
        assert top["anchor"]["epoch"] == 0 and top["depth"] <= depth
        if depth == 2:
            assert top["own"] == [51, 350], "compacted: one link over everything since epoch 0"
        assert store.cut() == 1
        before = epoch_snapshot(store)
    assert [len(before[n]) for n in (0, 1)] == [50, 380]
    head = members_head(path_of(cache, 1))
    assert head["base"]["segment"] == names[-1] and head["base_span"] == [1, 350]
    assert _own(path_of(cache, 1)) == 30
    _restores(cache, before)


def test_a_segment_with_a_sample_dropped_is_not_chained_onto(tmp_path: Path) -> None:
    """A sample dropped inside the newest segment's range after it was written: the cut chains on
    the older segment below it (which still matches the index) and lists the dropped one's range
    itself; a drop in the older segment leaves more to list than the limit: no file at the cut
    (the keeper writes it whole, as before), never one chained on a segment that lists a sample
    the index no longer has."""
    cache = tmp_path / "cache"
    objects = make_objects(300, 200)
    keys = sorted(objects)
    with open_store(cache, keep_epochs=3) as store:
        admit(store, {k: objects[k] for k in keys[:50]})
        assert store.cut() == 0
        _admit_in_rounds(store, objects, keys[50:], [60, 60])
        admit(store, {k: objects[k] for k in keys[170:180]})
        first, second = _segments(cache)
        assert members_head(membersegments.segments(cache)[second])["own"] == [111, 170]
        _drop(cache, 150)
        assert store.cut() == 1
        before = epoch_snapshot(store)
        assert len(before[1]) == 179
        head = members_head(path_of(cache, 1))
        assert head["base"]["segment"] == first and head["base_span"] == [1, 110]
        assert _own(path_of(cache, 1)) == 69, "111-180 but the dropped sample, listed by the cut"

        _admit_in_rounds(store, objects, keys[180:], [60, 60])
        admit(store, {k: objects[k] for k in keys[300:]})
        low = _segments(cache)[-2]
        _drop(cache, int(low.split("-")[1]) + 5)
        assert store.cut() == 2
        assert not path_of(cache, 2).exists(), "no segment it may chain on: the keeper's"
        assert store.write_members() == [2]
        assert "base" not in members_head(path_of(cache, 2)), "written whole"
        before = epoch_snapshot(store)
    _restores(cache, before)


@pytest.mark.parametrize("how", ["damaged", "missing"])
def test_a_damaged_segment_refuses_the_epochs_chained_through_it(tmp_path: Path, how: str) -> None:
    """Epoch 1's file chains on a segment, which chains on another: that lower segment damaged (a
    byte changed in a line, its hash no longer matches) or missing refuses epoch 1 whole (never
    restored with part of its members); epoch 0, whose file names no segment, comes back."""
    cache = tmp_path / "cache"
    objects = make_objects(230, 200)
    keys = sorted(objects)
    with open_store(cache, keep_epochs=3) as store:
        admit(store, {k: objects[k] for k in keys[:50]})
        assert store.cut() == 0
        _admit_in_rounds(store, objects, keys[50:], [60, 60, 60])
        assert store.cut() == 1
        before = epoch_snapshot(store)
    low = membersegments.segments(cache)[_segments(cache)[0]]
    assert members_head(path_of(cache, 1))["base"]["segment"] == _segments(cache)[-1]
    if how == "damaged":
        low.write_bytes(low.read_bytes().replace(b"train/", b"trAin/", 1))
    else:
        low.unlink()
    _damage(cache)
    restart_as_the_sampler(cache)
    with Store(cache, create=True) as store:
        assert epoch_snapshot(store) == {0: before[0]}, "epoch 1 refused whole, epoch 0 back"


def test_the_keeper_rewrites_a_file_chained_on_segments_and_they_go(tmp_path: Path) -> None:
    """After the cut, the keeper's pass rewrites the epoch's file whole (at its pace, as it wrote
    every big file before: chains do not grow with every big cut) and its segments go at the next
    pass; the segments of the chain above the newest epoch stay. An epoch chained on segments that
    retires before that rewrite takes them with it: its file is renamed to a base no file names
    and removed, then its segments: no file outlives what needs it."""
    cache = tmp_path / "cache"
    objects = make_objects(400, 200)
    keys = sorted(objects)
    with open_store(cache, keep_epochs=1, in_use_seconds=0.0) as store:
        admit(store, {k: objects[k] for k in keys[:50]})
        assert store.cut() == 0
        _admit_in_rounds(store, objects, keys[50:], [60, 60])
        assert store.cut() == 1
        used = set(_segments(cache))
        assert len(used) == 2 and "segment" in members_head(path_of(cache, 1))["base"]
        before = epoch_snapshot(store)
        at = 170 + _admit_in_rounds(store, objects, keys[170:], [60])
        assert "base" not in members_head(path_of(cache, 1)), "rewritten whole"
        above = set(_segments(cache)) - used
        assert len(above) == 1
        store.write_members()
        assert set(_segments(cache)) == above, "the chain above epoch 1 stays, the others went"
        assert epoch_snapshot(store) == before

        at += _admit_in_rounds(store, objects, keys[at:], [60])
        admit(store, {k: objects[k] for k in keys[at:at + 10]})
        assert store.cut() == 2
        assert "segment" in members_head(path_of(cache, 2))["base"]
        assert store.retire(now=10**10) == [0, 1]
        admit(store, {k: objects[k] for k in keys[at + 10:at + 20]})
        assert store.cut() == 3
        assert members_head(path_of(cache, 3))["base"]["epoch"] == 2
        assert store.retire(now=10**10) == [2]
        for _ in range(3):
            store.write_members()
        assert "base" not in members_head(path_of(cache, 3)), "rewritten whole: its base retired"
        assert _segments(cache) == [] and not list(cache.glob("epochs/*.base")), "nothing left"
