"""No cut makes an epoch that holds no sample: on a volume that can hold nothing more, the budget
the sampler records is 1 byte ("1 byte where it can hold nothing", docs/sampler.md "Disk space"),
and an epoch cut to it was empty. A trainer read such epochs as 0 files without an error, and they
took the --keep-epochs slots of real ones. Now, while sampling is paused on the full volume, a cut
holds the newest cached samples within the newest live epoch's size; with no live epoch the next
one answers "not yet" and is cut once the budget the disk allows is recorded again.

A real store, samples admitted as the sampler admits them, and the budget and the pause recorded
the way the sampler records them (``dataclasses.replace(policy, capacity=...)`` then
``configure``; ``set_backpressure("disk full")``)."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
from fuse_helpers import open_store
from sidecar_helpers import EPOCHFS
from store_helpers import put

from epochfs.sidecar import cutrequest
from epochfs.sidecar.cutrequest import CutRequest
from epochfs.sidecar.store import Store

KIB4 = 4096


def _full_volume(store: Store, capacity: int = 1) -> None:
    """What the sampler records while the volume allows less than --capacity (sampler/room.py)."""
    store.configure(dataclasses.replace(store.policy(), capacity=capacity))
    store.set_backpressure("disk full")


@pytest.mark.parametrize("min_samples", [1, 3])
def test_with_no_epoch_a_one_byte_budget_cuts_nothing_until_room_returns(
        tmp_path: Path, min_samples: int) -> None:
    with open_store(tmp_path / "cache", capacity=1 << 20, min_samples=min_samples) as store:
        for i in range(10):
            put(store, f"train/{i:03d}.bin", KIB4)
        full = store.policy()
        _full_volume(store)
        assert store.cut_ready(0) is False, "the epoch would hold no sample"
        assert store.request_cut(0) is False, "a lookup answers not yet"
        assert store.cut() is None, "the timer's and the queue's cut"
        assert store.cut(force=True) is None, "--force: an epoch still needs one sample"
        assert store.process_cut_requests() == []
        code, doc = cutrequest.answer(store, CutRequest(0))
        assert code == 202
        assert doc["message"] == ("epoch 0 is queued: the cache's volume is full (disk full); it is cut "
                                  "once room returns and its condition holds; ask again")
        assert store.epochs() == [] and store.pending_cuts()[0][0] == 0
        store.configure(full)  # the room is back: the budget the disk allows is recorded again
        store.set_backpressure(None)
        assert [n for n, _ in store.process_cut_requests()] == [0]
        assert store.stats().epochs[-1]["samples"] == 10


@pytest.mark.parametrize("min_samples", [1, 3])
def test_on_a_full_volume_an_epoch_holds_what_the_newest_epoch_held(tmp_path: Path, min_samples: int) -> None:
    """Each cut while the volume is full (a lookup, the timer, ``epochfs cut``) holds the newest
    cached samples within the newest epoch's size: real samples, never none, and the sampler,
    which fetches a share of the headroom per cut, gets its cut."""
    with open_store(tmp_path / "cache", capacity=1 << 20, min_samples=min_samples) as store:
        for i in range(10):
            put(store, f"train/{i:03d}.bin", KIB4)
        assert store.cut() == 0
        _full_volume(store)
        assert store.request_cut(1) is True
        assert store.cut() == 2
        assert store.cut(force=True) == 3
        held = [(e["epoch"], e["samples"], e["bytes"]) for e in store.stats().epochs]
        assert held == [(n, 10, 10 * KIB4) for n in range(4)]
        assert [f.path for f in store.epoch_files(3)] == [f.path for f in store.epoch_files(0)]


def test_a_budget_that_holds_fewer_than_min_samples_waits(tmp_path: Path) -> None:
    """A budget the disk allows that holds a few samples, sampling not paused: epochs are cut to
    the budget that exists, and not below --min-samples (``--force`` cuts what it holds)."""
    with open_store(tmp_path / "cache", capacity=1 << 20, min_samples=3) as store:
        for i in range(10):
            put(store, f"train/{i:03d}.bin", KIB4)
        assert store.cut() == 0
        store.configure(dataclasses.replace(store.policy(), capacity=3 * KIB4))  # an epoch of 2
        assert store.cut() is None
        assert store.cut(force=True) == 1, "--force cuts what the budget holds"
        assert store.stats().epochs[-1]["samples"] == 2


def test_a_forced_cut_the_full_volume_refuses_says_so(tmp_path: Path) -> None:
    """``epochfs cut --force`` on the paused full volume, with no epoch to hold to: it said "no
    sample is complete yet" beside ten cached samples; it now names the volume, and the samples."""
    cache = tmp_path / "cache"
    with open_store(cache, capacity=1 << 20) as store:
        for i in range(10):
            put(store, f"train/{i:03d}.bin", KIB4)
        _full_volume(store)

    def cut() -> subprocess.CompletedProcess[str]:
        return subprocess.run([*EPOCHFS, "cut", "--cache", str(cache), "--force"], capture_output=True,
                              text=True, timeout=60, check=False)

    refused = cut()
    assert refused.returncode == 1, refused
    assert refused.stderr.strip() == (
        "epochfs: cannot cut: the cache's volume is full (disk full): an epoch cut now would hold "
        "none of the 10 cached sample(s); it can be cut once room returns"), refused.stderr
    with Store(cache) as store:
        store.set_backpressure(None)  # the sampler's pause is over, the 1-byte budget stays
    refused = cut()
    assert refused.stderr.strip() == ("epochfs: cannot cut: an epoch cut now would hold none of the 10 "
                                      "cached sample(s)"), refused.stderr


def test_a_forced_cut_of_an_empty_cache_says_no_sample_is_complete(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with open_store(cache, capacity=1 << 20):
        pass
    refused = subprocess.run([*EPOCHFS, "cut", "--cache", str(cache), "--force"], capture_output=True,
                             text=True, timeout=60, check=False)
    said = "epochfs: cannot cut: no sample is complete yet"
    assert (refused.returncode, refused.stderr.strip()) == (1, said)
