"""The tree built ahead on a fresh cache, and after the epoch budget grows (review 54).

The publisher starts with the sampler, and may read the store's policy before the sampler's
``configure`` recorded it: the store then answers its defaults, capacity 1, an epoch budget of one
byte. The tree built ahead trimmed its set by that budget (kept for 5 s), dropping every sample
admitted meanwhile for good, so every cut was written whole until the publisher restarted (with
S3, every sample arriving in those seconds: the tree held none). Likewise a budget that grows (the
sampler restarted with a larger ``--capacity``) left the samples the smaller one dropped out of
every later tree. Here, on a real store and the real publishers (one building ahead, one writing
every epoch whole, the reference), every cut must come from the tree built ahead, identical to the
whole build.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from folderview_helpers import pair, same_epoch, settle
from fuse_helpers import admit, make_objects, open_store

from epochfs.sidecar import folderview_ahead
from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.store import Meta, Policy, Store


def _cut_shown_ahead(store: Store, ahead: FolderPublisher, whole: FolderPublisher) -> int:
    """Cut the next epoch; both publishers show it, the ahead one from its tree, identical."""
    n = store.cut(store.next_epoch())
    assert n is not None
    step = ahead.step()
    whole.step()
    assert step.published == [n] and step.ahead == [n], step
    same_epoch(ahead, whole, n)
    return n


def _entries(tree: Path | None) -> int:
    """Files (symlinks) in the tree under its temporary name."""
    assert tree is not None
    return sum(len(files) for _dirpath, _dirs, files in os.walk(tree))


def test_a_publisher_started_before_the_sampler_configured_the_store_cuts_ahead(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache", create=True)  # fresh: no policy recorded yet
    ahead, whole = pair(store, tmp_path)  # their first step read the store's defaults
    assert ahead._ahead.tree is not None  # the tree built ahead exists, the policy read
    store.configure(Policy(capacity=1 << 30))  # the sampler starts: every sample lands at once
    admit(store, make_objects(300, 100, prefix="train/a/", seed=1))
    settle(ahead)
    assert _entries(ahead._ahead.tree.tree) == 300  # none trimmed by a budget not configured
    assert _cut_shown_ahead(store, ahead, whole) == 0
    for round_ in range(2):  # and the epochs after it, as samples go on landing
        admit(store, make_objects(50, 100, prefix="train/b/", seed=2, start=50 * round_))
        settle(ahead)
        _cut_shown_ahead(store, ahead, whole)


@pytest.mark.parametrize("reread", [True, False], ids=["budget-reread", "budget-cached"])
def test_samples_a_smaller_budget_dropped_are_pulled_again_when_it_grows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reread: bool) -> None:
    """The sampler restarts with a larger ``--capacity``: the next epoch holds samples the tree
    dropped by the old budget. ``budget-reread``: the publisher reads the new budget before the
    cut, and the tree holds them again before it is asked; ``budget-cached``: it still holds the
    old one at the cut, and the cut pulls them back itself."""
    if reread:  # the policy read at every step (a real read of the index: no value stands in)
        monkeypatch.setattr(folderview_ahead, "BUDGET_SECONDS", 0.0, raising=False)
    # 100 samples fit the cache, the epoch budget (half of it) holds the newest 50.
    store = open_store(tmp_path / "cache", capacity=100 * 100, headroom=0.5)
    admit(store, make_objects(80, 100, prefix="train/a/", seed=1))
    ahead, whole = pair(store, tmp_path)
    settle(ahead)
    assert _entries(ahead._ahead.tree.tree) == 50  # trimmed to the budget
    assert _cut_shown_ahead(store, ahead, whole) == 0  # the newest 50
    settle(ahead)
    store.configure(Policy(capacity=1 << 30, headroom=0.5))  # restarted with a larger capacity
    admit(store, make_objects(10, 100, prefix="train/b/", seed=2))
    settle(ahead)
    if reread:
        assert _entries(ahead._ahead.tree.tree) == 90  # pulled again ahead
    n = _cut_shown_ahead(store, ahead, whole)
    assert len(list(store.iter_epoch_files(n))) == 90  # the old budget would have held 50
    admit(store, make_objects(10, 100, prefix="train/c/", seed=3))
    settle(ahead)
    _cut_shown_ahead(store, ahead, whole)


def test_a_cut_holding_the_whole_cache_beyond_the_budget_is_built_ahead(tmp_path: Path) -> None:
    """Nothing left to fetch (a complete listing, every key cached): a cut holds the whole cache,
    beyond the epoch budget (``store.snapshot.budget_at_cut``). The first such cut pulls back
    what the budget trimmed; the trees after it keep what the last epoch held."""
    store = open_store(tmp_path / "cache", capacity=100 * 100, headroom=0.5)  # budget: 50 samples
    admit(store, make_objects(80, 100, prefix="train/a/", seed=1))
    store.set_meta(Meta.LISTING_COMPLETE, "1")  # the listing's end, as the sampler records it
    ahead, whole = pair(store, tmp_path)
    settle(ahead)
    for _ in range(3):
        n = _cut_shown_ahead(store, ahead, whole)
        assert len(list(store.iter_epoch_files(n))) == 80  # the whole cache, not the budget's 50
        settle(ahead)
        assert _entries(ahead._ahead.tree.tree) == 80  # kept ahead now
