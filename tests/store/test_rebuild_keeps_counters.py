"""A rebuilt index keeps the store's counters and the supervisor's saved totals (countercarry.py).

Before: a damaged index rebuilt from the members files started every counter at 0: after six
cuts, evictions and hundreds of fetches, ``epochfs_cuts_total`` read 0 with live epochs, and
``remote_objects_total``, ``remote_bytes_total`` and ``evicted_samples_total`` restarted near 0
(Prometheus: a reset of every store counter at once); the supervisor's saved totals were gone too.
Now each counter is the damaged index's value where its ``counters`` table can still be read, and
at least what the restored epochs prove (their cuts, their samples' fetches) where it cannot.

Real SQLite files with real damage (garbage over pages of the samples table, or over the whole
header), the real reset and recovery the sampler runs at start.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

from fuse_helpers import admit, make_objects, open_store
from store_helpers import garble, restart_as_the_sampler

from epochfs.sidecar.store import INDEX_NAME, Meta, Store
from epochfs.sidecar.store.epochpins import RETIRE_GRACE
from epochfs.sidecar.store.meta import COUNTER_NAMES

TOTALS = json.dumps({"served_samples_total": 12345.0, "client_samples_total": 678.0})
RESTARTS = json.dumps({"fuse": 1.0, "sampler": 3.0})


def _filled(cache: Path) -> tuple[dict[str, int], list[int]]:
    """Six cuts (keep 1: the others retired), evictions, the supervisor's totals saved; the
    counters and the live epochs."""
    objects = make_objects(600, 500)
    keys = sorted(objects)
    with open_store(cache, keep_epochs=1, capacity=400 * 500, headroom=0.3) as store:
        for n in range(6):
            store.retire(now=time.time() - RETIRE_GRACE - 1)  # a grace ago: its samples may go now
            admit(store, {k: objects[k] for k in keys[n * 100:(n + 1) * 100]})
            assert store.cut() == n
        store.set_meta(Meta.SIDECAR_TOTALS, TOTALS)
        store.set_meta(Meta.SIDECAR_RESTARTS, RESTARTS)
        stats = store.stats()
        live = [e.epoch for e in store.epochs()]
    assert live and len(live) < 6
    before = {name: int(getattr(stats, name)) for name in COUNTER_NAMES}
    assert before["cuts_total"] == 6 and before["fetched_total"] == 600 and before["evicted_total"] > 0
    return before, live


def test_a_rebuilt_index_keeps_the_counters_of_the_damaged_one(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    before, live = _filled(cache)
    garble(cache, "samples")
    problem, _, _ = restart_as_the_sampler(cache)
    assert problem != "ok"
    assert list(cache.glob(f"{INDEX_NAME}.corrupt-*")), "the index was replaced"
    with Store(cache) as store:
        after = {name: int(getattr(store.stats(), name)) for name in COUNTER_NAMES}
        assert [e.epoch for e in store.epochs()] == live
        assert after == before
        assert store.meta(Meta.SIDECAR_TOTALS) == TOTALS
        assert store.meta(Meta.SIDECAR_RESTARTS) == RESTARTS


def test_counters_that_cannot_be_read_restart_at_what_the_restored_epochs_prove(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _, live = _filled(cache)
    with Store(cache) as store:  # everything in the index file, then garbage over its header
        store._ix.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(cache / INDEX_NAME, "r+b") as f:
        f.write(os.urandom(100))
    restart_as_the_sampler(cache)  # the open finds the damage: replaced before the check
    assert list(cache.glob(f"{INDEX_NAME}.corrupt-*")), "the index was replaced"
    with Store(cache) as store:
        stats = store.stats()
        assert [e.epoch for e in store.epochs()] == live
    assert stats.cuts_total == len(live), "the restored epochs were cut"
    assert (stats.fetched_total, stats.fetched_bytes_total) == (stats.samples, stats.cache_bytes)
    assert stats.samples >= 280


def test_a_rebuilt_index_keeps_the_endpoint_and_the_retire_grace(tmp_path: Path) -> None:
    """What the sampler checks at start (the store the cache was filled from) and the grace
    eviction waits out come back with the rebuilt index, as the remote and the seed do: rebuilt
    without them, a start at another endpoint was taken silently."""
    cache = tmp_path / "cache"
    with open_store(cache) as store:
        store.configure(dataclasses.replace(store.policy(), retire_grace=2.0))
        store.set_meta(Meta.SAMPLER_ENDPOINT, "http://127.0.0.1:9000")
        admit(store, make_objects(600, 500))  # pages enough for the damage
        assert store.cut() == 0
    garble(cache, "samples")
    problem, _, _ = restart_as_the_sampler(cache)
    assert problem != "ok"
    with Store(cache) as store:
        assert store.meta(Meta.SAMPLER_ENDPOINT) == "http://127.0.0.1:9000"
        assert store.policy().retire_grace == 2.0
