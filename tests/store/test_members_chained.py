"""Index damage costs no live epoch, however large (issue 20, item 4): chained members files.

Before: a cut wrote its epoch's members file itself only up to ``AT_CUT`` members (50,000); a larger
epoch waited for the keeper thread, 13-18 s after the cut at 1M keys, and an index damaged in that
window was rebuilt without it. Now a snapshot epoch's file is written at its cut for the cost of
what changed since the previous live epoch's cut: it names that epoch's file as its base and lists
only the members outside the base's range (:mod:`epochfs.sidecar.store.memberchain`).

``AT_CUT`` is lowered to 100 here so that a 150-member epoch stands for a 1M one. No keeper runs
unless a test calls ``write_members`` (one pass): whatever file exists was written by the cut. Real
SQLite files, the index replaced by garbage, the sampler's start-up check and recovery.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from fuse_helpers import admit, make_objects, open_store
from store_helpers import epoch_snapshot, restart_as_the_sampler

from epochfs.sidecar.store import INDEX_NAME, Store, memberfiles
from epochfs.sidecar.store.epochpins import RETIRE_GRACE
from epochfs.sidecar.store.memberfiles import base_path_of, path_of

LIMIT = 100


@pytest.fixture(autouse=True)
def _small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memberfiles, "AT_CUT", LIMIT)


def _head(cache: Path, n: int, *, base: bool = False) -> dict[str, Any]:
    path = base_path_of(cache, n) if base else path_of(cache, n)
    with open(path, "rb") as f:
        head = json.loads(f.readline())
    assert isinstance(head, dict)
    return head


def _lines(cache: Path, n: int) -> int:
    """Members listed in epoch ``n``'s own file (its last line's count)."""
    last = path_of(cache, n).read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    return int(json.loads(last)["end"])


def _damage(cache: Path) -> None:
    (cache / INDEX_NAME).write_bytes(b"not a database" * 400)


def _two_cuts(store: Store, objects: dict[str, bytes], at: int, end: int | None = None) -> None:
    """Epoch 0 over the first ``at`` keys (sorted), epoch 1 after the keys up to ``end`` land."""
    keys = sorted(objects)
    admit(store, {k: objects[k] for k in keys[:at]})
    assert store.cut() == 0
    admit(store, {k: objects[k] for k in keys[at:end]})
    assert store.cut() == 1


@pytest.mark.parametrize("how", ["cut", "lookup"])
def test_an_epoch_above_the_limit_damaged_right_after_its_cut_comes_back_whole(
        tmp_path: Path, how: str) -> None:
    """Epoch 0 (80 members) has its file from its cut; epochs 1 (160) and 2 (240) are above the
    limit, cut (by ``store.cut`` or a lookup) and the index damaged before any keeper pass: both
    come back with the same manifests, their files written by their cuts, each listing only the
    80 samples admitted since the previous cut."""
    cache = tmp_path / "cache"
    objects = make_objects(240, 300)
    keys = sorted(objects)
    with open_store(cache, keep_epochs=3) as store:
        for n in range(3):
            admit(store, {k: objects[k] for k in keys[n * 80:(n + 1) * 80]})
            if how == "cut" or n == 0:
                assert store.cut() == n
            else:
                assert store.request_cut(n)
        before = epoch_snapshot(store)
        infos = store.epochs()
    assert [len(before[n]) for n in range(3)] == [80, 160, 240]
    assert [_lines(cache, n) for n in range(3)] == [80, 80, 80], "each lists what changed"
    assert [_head(cache, n).get("base", {}).get("epoch") for n in range(3)] == [None, 0, 1]
    _damage(cache)

    _, _, report = restart_as_the_sampler(cache)
    assert any(p.name.startswith(f"{INDEX_NAME}.corrupt") for p in cache.iterdir()), "replaced"
    with Store(cache, create=True) as store:
        assert epoch_snapshot(store) == before, "every epoch back with its manifest"
        assert store.epochs() == infos
        assert store.next_epoch() == 3
    assert report.orphans_removed == 0, "no object of a live epoch removed as an orphan"


def test_a_first_epoch_above_the_limit_is_still_the_keepers(tmp_path: Path) -> None:
    """With nothing to chain on (the first epoch, or one after a schedule window), an epoch above
    the limit gets its file from the keeper's next pass, as before (the remaining window)."""
    cache = tmp_path / "cache"
    with open_store(cache) as store:
        admit(store, make_objects(150, 100))
        assert store.cut() == 0
        assert not path_of(cache, 0).exists(), "150 members, no base: left to the keeper"
        assert store.write_members() == [0]
        assert _head(cache, 0).get("first_sample") == 1, "a whole file records its range"


def test_more_changed_than_the_limit_is_left_to_the_keeper(tmp_path: Path) -> None:
    """The limit applies to what a cut writes: more than AT_CUT samples admitted since the
    previous cut, and the keeper writes the (whole) file."""
    cache = tmp_path / "cache"
    objects = make_objects(200, 100)
    with open_store(cache) as store:
        _two_cuts(store, objects, 50)
        assert not path_of(cache, 1).exists(), "150 new members: the keeper's"
        assert store.write_members() == [1]
        assert "base" not in _head(cache, 1)


def test_a_chain_over_evictions_and_a_retired_base(tmp_path: Path) -> None:
    """A full cache: each cut's range starts above the previous one's (the oldest samples leave
    the epoch, then the cache), and epoch 4 retires while epoch 5's file still names it. The
    retirement leaves ``epoch-4.base`` (never an epoch of its own), the rebuild reads the chain
    through it; the keeper then rewrites the chained file whole and removes the base."""
    cache = tmp_path / "cache"
    objects = make_objects(240, 1000)
    keys = sorted(objects)
    with open_store(cache, capacity=200_000, keep_epochs=1, in_use_seconds=0.0) as store:
        for n in range(6):  # 40 samples a round; an epoch holds at most 150, the cache 200
            store.retire(now=time.time() - RETIRE_GRACE - 1)  # a grace ago: its samples may go now
            admit(store, {k: objects[k] for k in keys[n * 40:(n + 1) * 40]})
            assert store.cut() == n
        rows = store._ix.query("SELECT first_sample FROM epochs ORDER BY n")
        assert [int(r[0]) for r in rows] == [1, 1, 1, 11, 51, 91], "the oldest leave each epoch"
        assert store._ix.query("SELECT MIN(id) FROM samples")[0][0] > 1, "and the cache"
        assert _head(cache, 5)["base"] == {"epoch": 4, "cut_at": _head(cache, 4)["cut_at"],
                                           "max_sample": _head(cache, 4)["max_sample"]}
        assert _lines(cache, 5) == 40
        assert store.retire(now=10**10) == [4], "epoch 4 retires: epoch 5 stays as the newest"
        assert not path_of(cache, 4).exists() and base_path_of(cache, 4).exists()
        before = epoch_snapshot(store)
        assert list(before) == [5] and len(before[5]) == 150
    _damage(cache)
    restart_as_the_sampler(cache)
    with Store(cache, create=True) as store:
        assert epoch_snapshot(store) == before, "epoch 5 back through its retired base; 4 not"
        assert store.write_members() == [5], "the keeper rewrites epoch 5's file whole"
    assert "base" not in _head(cache, 5)
    assert not base_path_of(cache, 4).exists(), "then the base no file names goes"


def test_a_chained_file_whose_base_is_missing_is_refused(tmp_path: Path) -> None:
    """A file whose base is missing (or damaged) is treated as missing: its epoch is not restored
    (never restored with part of its members), as a missing file's epoch was not before."""
    cache = tmp_path / "cache"
    objects = make_objects(160, 100)
    with open_store(cache) as store:
        _two_cuts(store, objects, 80)
    path_of(cache, 0).write_bytes(path_of(cache, 0).read_bytes().replace(b"train/", b"trAin/", 1))
    _damage(cache)
    with Store(cache, create=True) as store:
        assert store.epochs() == [], "epoch 0's file is damaged: 0 and 1 (chained on it) are lost"


def test_a_retirement_killed_before_its_commit_gives_the_file_back(tmp_path: Path) -> None:
    """The retirement renames an epoch's file to its base name before its commit; a commit that
    never comes (kill -9, here the rename made by hand) leaves the epoch live: start-up recovery
    renames the file back, so a damage before the keeper's next pass still restores it."""
    cache = tmp_path / "cache"
    objects = make_objects(160, 100)
    with open_store(cache) as store:
        _two_cuts(store, objects, 80)
        before = epoch_snapshot(store)
    memberfiles.remove(cache, [0])  # what retire() does before its commit
    assert not path_of(cache, 0).exists()
    restart_as_the_sampler(cache)
    assert path_of(cache, 0).exists() and not base_path_of(cache, 0).exists()
    _damage(cache)
    with Store(cache, create=True) as store:
        assert epoch_snapshot(store) == before


def test_a_rebuilt_epoch_is_a_base_for_the_next_cut(tmp_path: Path) -> None:
    """After a rebuild the restored epochs are listed row by row (no range in their rows), but
    their files still record the range they were cut as: the next cut chains on them, and a
    second damage right after it restores that epoch too."""
    cache = tmp_path / "cache"
    objects = make_objects(240, 100)
    keys = sorted(objects)
    with open_store(cache, keep_epochs=3) as store:
        _two_cuts(store, objects, 80, 160)
    _damage(cache)
    restart_as_the_sampler(cache)
    with open_store(cache, keep_epochs=3) as store:
        admit(store, {k: objects[k] for k in keys[160:]})
        assert store.cut() == 2
        assert _head(cache, 2)["base"]["epoch"] == 1
        assert _lines(cache, 2) == 80
        before = epoch_snapshot(store)
    assert [len(before[n]) for n in range(3)] == [80, 160, 240]
    _damage(cache)
    restart_as_the_sampler(cache)
    with Store(cache, create=True) as store:
        assert epoch_snapshot(store) == before
