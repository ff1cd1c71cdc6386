"""A sample waiting for its repair in place is not lost to a run of transient faults.

The 600 s soak (stop 38, seed 7): a sample the scrub took out for a flipped byte met eight HTTP
500s in a row on its repair; the download gave up, the sampler skipped the key, and the sweep of
unfetchable repairs (:func:`~epochfs.sidecar.store.integrity.lose_unfetchable`) marked it lost, so
every read of that listed file answered EIO until its epoch retired. A run of 5xx, resets or
truncated bodies says nothing about the object: the repair is fetched again after a pause, and
only an answer about the object (missing, changed, denied) loses it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from common import wait_until
from inprocess import objects_of, sampling, settings_for
from integrity_helpers import damage

from epochfs.sidecar.remote import NotFound, Unavailable
from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.store import Store, object_name
from epochfs.sidecar.store.integrity import objects_after


def _take_out_one(store: Store, key: str) -> Path:
    obj = next(o for o in objects_after(store._ix, 0, 100) if o.key == key)
    path = store.objects_dir / object_name(obj.sid)
    damage(path, "flip")
    store.take_out([(obj, "digest mismatch")], quarantine=False)
    return path


@contextmanager
def _four_cached(tmp_path: Path) -> Iterator[tuple[Store, MemoryRemote, dict[str, bytes]]]:
    """The sampler over four objects, two attempts an object, no scrub, once all four are cached."""
    objects = objects_of(4)
    remote = MemoryRemote(objects)
    settings = settings_for(tmp_path / "cache", "--retries", "2", "--scrub-rate", "0")
    with sampling(tmp_path / "cache", remote, settings) as (store, _sampler):
        wait_until(lambda: store.stats().samples == 4, what="every object cached")
        yield store, remote, objects


def test_a_repair_that_meets_more_faults_than_its_attempts_is_fetched_again(tmp_path: Path) -> None:
    with _four_cached(tmp_path) as (store, remote, objects):
        key = "train/0002.bin"
        # Five failures against two attempts a round: the first round gives up on it.
        remote.fail(key, *(Unavailable(f"{key}: HTTP 500 InternalError") for _ in range(5)))
        path = _take_out_one(store, key)
        wait_until(lambda: store.stats().repaired_total == 1, timeout=60, what="the repair landed")
        stats = store.stats()
        assert (stats.lost, stats.repairing) == (0, 0), "repaired, not lost"
        assert path.read_bytes() == objects[key], "the right bytes in place"


@pytest.mark.long
def test_a_repair_whose_object_is_gone_is_still_lost(tmp_path: Path) -> None:
    """The other side: an answer about the object (404) loses the sample, as before."""
    with _four_cached(tmp_path) as (store, remote, _objects):
        key = "train/0001.bin"
        remote.fail(key, *(NotFound(f"{key}: HTTP 404 NoSuchKey") for _ in range(5)))
        _take_out_one(store, key)
        wait_until(lambda: store.stats().lost == 1, timeout=60, what="the sample marked lost")
        assert store.stats().repaired_total == 0
