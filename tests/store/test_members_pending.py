"""Index damage costs no live schedule-mode window of any size (issue 20): its file written ahead.

Before: a schedule-mode window of more than ``AT_CUT`` members got its members file only from the
keeper seconds after its cut (23-27 s at 1M under load): an index damaged in between lost that live
epoch. Now the keeper writes the predicted next window's file ahead
(:mod:`epochfs.sidecar.store.memberpending`, ``epochs/pending-<N>.members``) and the cut renames it
into place after a cheap check that it lists exactly the window it cuts.

``AT_CUT`` is lowered to 100: a 300-key window stands for a 1M one. The keeper runs only where a
test calls ``write_members`` (one pass, as its thread does); ``cut_ready`` measures the next
window ahead as the sampler does after each cut. Real SQLite caches, the index replaced by
garbage, the sampler's start-up check and recovery.
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, open_store
from store_helpers import epoch_snapshot, members_head, restart_as_the_sampler, sid_of

from epochfs.sidecar.store import INDEX_NAME, CatalogRow, Policy, Schedule, Store, memberfiles, object_name
from epochfs.sidecar.store.memberfiles import path_of
from epochfs.sidecar.store.memberpending import path_for, pending
from epochfs.sidecar.store.objects import OBJECTS_DIR

LIMIT = 100
POLICY = Policy(capacity=1 << 30, keep_epochs=3, schedule=Schedule(initial=300, growth=1.2))


@pytest.fixture(autouse=True)
def _small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memberfiles, "AT_CUT", LIMIT)


def _damage(cache: Path) -> None:
    (cache / INDEX_NAME).write_bytes(b"not a database" * 400)


def _schedule_store(cache: Path, keys: int = 400) -> tuple[Store, dict[str, bytes]]:
    """A schedule-mode store with a complete listing of ``keys`` keys in a shuffled rank order,
    every key admitted."""
    objects = make_objects(keys, 50)
    names = sorted(objects)
    ranks = random.Random(7).sample(range(10 * keys), keys)
    store = open_store(cache)
    store.configure(POLICY)
    store.add_catalog([CatalogRow(k, sid_of(k), 50, "v", rank=r) for k, r in zip(names, ranks, strict=True)])
    store.finalize_catalog()
    admit(store, objects)
    return store, objects


def _written_ahead(store: Store, cache: Path, n: int) -> None:
    """The sampler's look at the next window, then one keeper pass: window n's file written ahead."""
    assert store.cut_ready(n), "the window is complete"
    store.write_members()
    assert list(pending(cache)) == [n], "the keeper wrote the next window's file ahead"


def _drop(cache: Path, key: str) -> None:
    """A sample gone from the index, the running totals and its object file, as eviction takes one."""
    db = sqlite3.connect(cache / INDEX_NAME)
    try:
        with db:
            sid, size = db.execute("SELECT sid, size FROM samples WHERE key=?", (key,)).fetchone()
            db.execute("DELETE FROM samples WHERE key=?", (key,))
            db.execute("UPDATE counters SET value=value-1 WHERE name='cache_samples'")
            db.execute("UPDATE counters SET value=value-? WHERE name='cache_bytes'", (size,))
    finally:
        db.close()
    (cache / OBJECTS_DIR / object_name(str(sid))).unlink()


def test_a_big_window_cut_just_before_the_damage_comes_back(tmp_path: Path) -> None:
    """Windows 0 (300 keys) and 1 (360) above the limit: the keeper writes each ahead, the cut
    renames it into place, and an index damaged right after the cut of 1 (no keeper pass since)
    is rebuilt with every live window's manifest and row as they were at the cut."""
    cache = tmp_path / "cache"
    store, _ = _schedule_store(cache)
    with store:
        _written_ahead(store, cache, 0)
        assert store.cut() == 0
        assert pending(cache) == {}, "renamed into place"
        assert members_head(path_of(cache, 0))["epochfs_members"] == memberfiles.AHEAD
        _written_ahead(store, cache, 1)
        assert store.cut() == 1
        before = epoch_snapshot(store)
        infos = store.epochs()
    assert [len(before[n]) for n in (0, 1)] == [300, 360]
    assert pending(cache) == {} and members_head(path_of(cache, 1))["epochfs_members"] == memberfiles.AHEAD
    _damage(cache)
    _, _, report = restart_as_the_sampler(cache)
    assert report.orphans_removed == 40, "only the samples in no epoch, as before"
    with Store(cache, create=True) as store:
        assert epoch_snapshot(store) == before, "both windows came back with their manifests"
        assert store.policy() == POLICY
        assert store.epochs() == infos, "the same rows"


def test_a_sample_replaced_in_the_window_since_is_not_listed_from_the_old_file(tmp_path: Path) -> None:
    """A member evicted and admitted again after the file was written (same key, same count, same
    ends, a new id and row): the running total's mark says so, the cut does not use the file
    (removed), and the keeper's next pass writes the epoch's file whole, as before."""
    cache = tmp_path / "cache"
    store, objects = _schedule_store(cache)
    with store:
        _written_ahead(store, cache, 0)
        victim = _pending_keys(cache, 0)[150]
        _drop(cache, victim)
        admit(store, {victim: objects[victim]})
        assert store.cut() == 0
        assert pending(cache) == {}, "stale once its window is cut"
        assert not path_of(cache, 0).exists(), "not from a file that lists another row"
        assert store.write_members() == [0], "the keeper's file, as before"
        assert members_head(path_of(cache, 0))["epochfs_members"] == memberfiles.FORMAT
        before = epoch_snapshot(store)
    assert victim in {f.path for f in before[0]}
    _damage(cache)
    restart_as_the_sampler(cache)
    with Store(cache, create=True) as store:
        assert epoch_snapshot(store) == before


def test_a_sample_evicted_outside_the_window_leaves_the_file_in_use(tmp_path: Path) -> None:
    """A sample in no window evicted after the file was written (the running total's mark no
    longer holds): the window's samples up to the mark's id, counted, are all still there; the
    keeper keeps the file and the cut renames it into place."""
    cache = tmp_path / "cache"
    store, objects = _schedule_store(cache)
    with store:
        _written_ahead(store, cache, 0)
        members, mark = _member_lines(path_for(cache, 0)), members_head(path_for(cache, 0))["mark"]
        _drop(cache, next(k for k in sorted(objects) if k not in set(_pending_keys(cache, 0))))
        store.write_members()
        assert _member_lines(path_for(cache, 0)) == members, "still holds: not written again"
        assert members_head(path_for(cache, 0))["mark"] == [mark[0] - 1, mark[1]], "a mark that holds again"
        assert store.cut() == 0
        assert members_head(path_of(cache, 0))["epochfs_members"] == memberfiles.AHEAD
        before = epoch_snapshot(store)
    _damage(cache)
    restart_as_the_sampler(cache)
    with Store(cache, create=True) as store:
        assert epoch_snapshot(store) == before


def _member_lines(path: Path) -> bytes:
    """A file's member lines (between its first and its last line)."""
    data = path.read_bytes()
    return data[data.index(b"\n") + 1:data.rstrip(b"\n").rindex(b"\n")]


def _pending_keys(cache: Path, n: int) -> list[str]:
    out: list[str] = []
    with open(path_for(cache, n), "rb") as f:
        f.readline()
        for line in f:
            if line.startswith(b"["):
                out.extend(str(r[2]) for r in json.loads(line))
    return out


def test_another_window_size_is_not_cut_from_the_file(tmp_path: Path) -> None:
    """The schedule changed after the file was written (window 0 of 250 keys, not 300): other
    ends, other count: not used, removed."""
    cache = tmp_path / "cache"
    store, _ = _schedule_store(cache)
    with store:
        _written_ahead(store, cache, 0)
        store.configure(Policy(capacity=1 << 30, keep_epochs=3, schedule=Schedule(initial=250, growth=1.2)))
        assert store.cut() == 0
        assert len(store.epoch_files(0)) == 250
        assert pending(cache) == {} and not path_of(cache, 0).exists()


def test_a_pending_file_cut_short_is_never_renamed_into_place(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    store, _ = _schedule_store(cache)
    with store:
        _written_ahead(store, cache, 0)
        p = path_for(cache, 0)
        p.write_bytes(p.read_bytes()[:-40])  # its last line lost
        assert store.cut() == 0
        assert pending(cache) == {} and not path_of(cache, 0).exists()


def test_a_damaged_pending_file_is_refused_whole_by_the_rebuild(tmp_path: Path) -> None:
    """A byte flipped inside a member line after the keeper wrote it (the cut does not read the file
    whole): the rebuild refuses the epoch whole by the file's hash, never half restored."""
    cache = tmp_path / "cache"
    store, _ = _schedule_store(cache)
    with store:
        _written_ahead(store, cache, 0)
        p = path_for(cache, 0)
        data = bytearray(p.read_bytes())
        at = data.index(b"train/", len(data) // 2)
        data[at] ^= 0x01
        p.write_bytes(bytes(data))
        assert store.cut() == 0
    assert path_of(cache, 0).exists()
    _damage(cache)
    restart_as_the_sampler(cache)
    with Store(cache, create=True) as store:
        assert store.epochs() == [], "refused whole"


def test_the_first_line_rewritten_at_the_cut_is_checked_by_the_rebuild(tmp_path: Path) -> None:
    """The epoch's first line, put over the padded one at the cut, is covered by its own hash."""
    cache = tmp_path / "cache"
    store, _ = _schedule_store(cache)
    with store:
        _written_ahead(store, cache, 0)
        assert store.cut() == 0
    p = path_of(cache, 0)
    data = p.read_bytes()
    head = members_head(p)
    p.write_bytes(data.replace(f'"samples":{head["samples"]}'.encode(), f'"samples":{head["samples"] + 1}'
                               .encode(), 1))
    _damage(cache)
    restart_as_the_sampler(cache)
    with Store(cache, create=True) as store:
        assert store.epochs() == [], "refused whole"


def test_stale_pending_files_are_removed(tmp_path: Path) -> None:
    """A pending file for another number than the next epoch's goes at the keeper's next pass; the
    rebuild removes them all (its index hands out ids again)."""
    cache = tmp_path / "cache"
    store, _ = _schedule_store(cache)
    with store:
        _written_ahead(store, cache, 0)
        (cache / "epochs" / "pending-7.members").write_bytes(path_for(cache, 0).read_bytes())
        store.write_members()
        assert list(pending(cache)) == [0], "the stale one removed, the next window's kept"
        mtime = path_for(cache, 0).stat().st_mtime_ns
        store.write_members()
        assert path_for(cache, 0).stat().st_mtime_ns == mtime, "still holds: not written again"
    _damage(cache)
    restart_as_the_sampler(cache)
    assert pending(cache) == {}
