"""Epoch 0's progress toward its cut condition is worded in one place for both of its readers:
``epochfs status``'s line (:func:`epochfs.sidecar.status.first_epoch_line`) and ``epochfs cut``'s
refusal (:func:`epochfs.sidecar.cli_cache.not_met`). Each says it after its own head ("epoch 0:
12/14 samples cached (86%)", "epoch 0 would hold 12 of the 14 sample(s) its condition needs");
what holds the cut back (the store's warning, the epoch budget, the listing's first round) is
:func:`~epochfs.sidecar.status.first_epoch_hold`'s, so the two cannot drift apart. Every branch of
both is pinned here, word for word, on the store's ``first_epoch`` documents."""

from __future__ import annotations

from typing import Any

import pytest

from epochfs.sidecar.cli_cache import not_met
from epochfs.sidecar.status import first_epoch_hold, first_epoch_line
from epochfs.sidecar.store import Policy, Stats

ROUND = ", waiting for the listing's first round (a page of every folder, at most 3 s)"
NOTE = ("16 cached, of which an epoch holds the newest 12: those within the epoch budget of "
        "48.0 KiB (--capacity less --headroom)")
WARNING = "--min-samples 350 is more than the 300 samples an epoch holds"
CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    # name: (first_epoch, first_epoch_line's, not_met's)
    "warning": ({"samples": 300, "target": 350, "warning": WARNING, "listing_round": True},
                f"epoch 0: 300/350 samples cached (86%); WARNING: {WARNING}",
                f"epoch 0 would hold 300 of the 350 sample(s) its condition needs: {WARNING}"),
    "budget": ({"samples": 12, "target": 14, "cached": 16, "budget": 48 * 1024},
               f"epoch 0: 12/14 samples cached (86%); {NOTE}",
               f"epoch 0 would hold 12 of the 14 sample(s) its condition needs; {NOTE}"),
    "listing round": ({"samples": 5, "target": 4, "listing_round": True},
                      f"epoch 0: 4/4 samples cached (100%){ROUND}",
                      f"epoch 0 would hold 5 of the 4 sample(s) its condition needs{ROUND}"),
    "round, short of the target": ({"samples": 3, "target": 4, "listing_round": True},
                                   "epoch 0: 3/4 samples cached (75%)",
                                   "epoch 0 would hold 3 of the 4 sample(s) its condition needs"),
    "complete": ({"samples": 4, "target": 4},
                 "epoch 0: 4/4 samples cached (100%): it is cut at the first lookup of epoch-0 on the FUSE "
                 "view; on the folder view when the torch client asks for it, at --cut-interval or by "
                 "`epochfs cut`",
                 "epoch 0 would hold 4 of the 4 sample(s) its condition needs"),
}


def _stats(first: dict[str, Any] | None, samples: int = 0) -> Stats:
    return Stats(cache_bytes=0, capacity_bytes=1 << 30, samples=samples, inflight_bytes=0,
                 backpressure=False, catalog_objects=0, pending_cuts=[], epochs=[], first_epoch=first)


@pytest.mark.parametrize("name", sorted(CASES))
def test_status_and_cut_say_each_branch_word_for_word(name: str) -> None:
    first, status_line, refusal = CASES[name]
    line = first_epoch_line({"first_epoch": first}, None)
    assert line == status_line  # no rate given: no estimate follows
    assert not_met(_stats(first), Policy(capacity=1 << 30, min_samples=1)) == refusal


@pytest.mark.parametrize("name", sorted(CASES))
def test_what_holds_the_cut_back_is_one_functions(name: str) -> None:
    first, status_line, refusal = CASES[name]
    have, target = int(first["samples"]), int(first["target"])
    held = first_epoch_hold(first, have, target, warning="; WARNING: ")
    if held is None:
        assert name in ("round, short of the target", "complete")
    else:
        assert status_line.endswith(held)
        assert refusal.endswith(first_epoch_hold(first, have, target, warning=": ") or "")


def test_without_epoch_0_the_refusal_counts_the_cache() -> None:
    assert first_epoch_line({"first_epoch": None}) is None
    assert not_met(_stats(None, samples=3), Policy(capacity=1 << 30, min_samples=5)) == (
        "3 sample(s) complete, condition not met")
