"""Keys evicted after the store gave up waiting for a folder view's publisher are held back
(:mod:`epochfs.sidecar.store.heldback`): no candidate of the fetch order and dropped at admission,
not skipped, kept across a restart of the process, and released once the cache has no folder view
left to show an old epoch (its publisher lock removed) or a publisher holds the lock again.

The store's own API on a real index, the restart a real second process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from store_helpers import listed_store, put

from epochfs.sidecar.keys import sample_id
from epochfs.sidecar.store import Store, publisherlock
from epochfs.sidecar.store.records import Policy

KEYS = [f"train/{i:02d}.bin" for i in range(10)]

RESTARTED = """
import json, sys
from epochfs.sidecar.store import Store
with Store(sys.argv[1]) as store:
    store.retire()  # a new process waits for the absent publisher again: nothing is released
    print(json.dumps([c.key for _, c in store.candidates(after_rank=None, limit=100)]))
"""


def candidates(store: Store) -> set[str]:
    walk = {c.key for _, c in store.refill(cursor=None, offered_upto=0, owed_limit=0, walk_limit=100).walk}
    assert walk == {c.key for _, c in store.candidates(after_rank=None, limit=100)}
    return walk


def evict_without_publisher(store: Store, cache: Path) -> set[str]:
    """Cut an epoch of eight samples, let the publisher die, retire the epoch and evict four of
    its samples once the store has given up waiting; the keys evicted."""
    for key in KEYS[:8]:
        put(store, key)
    assert store.cut() == 0
    fd = publisherlock.hold(cache)
    assert fd is not None
    os.close(fd)  # the publisher dies; GONE_AFTER is 0 here: the store gives up at once
    now = time.time()
    assert store.retire(now=now) == [0]
    assert store.evict(400, now=now + 60) == 400
    return set(KEYS[:8]) - store.cached_among(KEYS)


def test_held_back_keys_wait_for_the_folder_view_to_be_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(publisherlock, "GONE_AFTER", 0.0)
    caplog.set_level("INFO", logger="epochfs.store")
    cache = tmp_path / "cache"
    store = listed_store(tmp_path, KEYS, Policy(capacity=1 << 20, keep_epochs=0, in_use_seconds=0,
                                                 retire_grace=1), 100)
    try:
        evicted = evict_without_publisher(store, cache)
        assert evicted == set(KEYS[:4]), evicted
        assert "holding back 4 evicted key(s)" in caplog.text
        # Not offered: only the keys never fetched are.
        assert candidates(store) == set(KEYS[8:])
        # A download of one that lands anyway is dropped, not admitted, and no skip is counted.
        skipped = store.stats().to_json().get("skipped_total")
        put(store, KEYS[0], fill=99)
        assert not store.cached_among([KEYS[0]])
        assert not (cache / "objects" / sample_id(KEYS[0])[:2] / sample_id(KEYS[0])).exists()
        assert store.stats().to_json().get("skipped_total") == skipped
        # A restarted process keeps the holds (they are in the index).
        out = subprocess.run([sys.executable, "-c", RESTARTED, str(cache)], capture_output=True,
                             text=True, check=True, timeout=60)
        assert set(json.loads(out.stdout)) == set(KEYS[8:]), out.stderr
        # The cache leaves the folder view: its lock removed, the next retirement look releases.
        assert publisherlock.forget(cache)
        store.retire()
        assert "released 4 held-back key(s)" in caplog.text
        assert candidates(store) == set(KEYS[:4]) | set(KEYS[8:])
        put(store, KEYS[0], fill=99)
        assert store.cached_among([KEYS[0]]) == {KEYS[0]}
    finally:
        store.close()


def test_a_publisher_back_releases_the_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(publisherlock, "GONE_AFTER", 0.0)
    cache = tmp_path / "cache"
    store = listed_store(tmp_path, KEYS, Policy(capacity=1 << 20, keep_epochs=0, in_use_seconds=0,
                                                 retire_grace=1), 100)
    try:
        evicted = evict_without_publisher(store, cache)
        assert candidates(store) == set(KEYS[8:])
        fd = publisherlock.hold(cache)  # back, its recovery done
        assert fd is not None
        try:
            store.retire()
            assert candidates(store) == evicted | set(KEYS[8:])
        finally:
            os.close(fd)
    finally:
        store.close()
