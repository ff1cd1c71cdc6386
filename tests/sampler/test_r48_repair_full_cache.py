"""A sample waiting for its repair in place is repaired while the cache is full.

A full cache whose samples live epochs pin is the sampler's steady state. A repair fetches the
bytes of a sample the cache already counts and renames them over its damaged file: it needs no
new room. Reserving its full size like a new sample made it wait in backpressure ("cache full,
nothing evictable") for as long as the epochs held the cache, while the damaged bytes were served.
"""

from __future__ import annotations

from pathlib import Path

from common import wait_until
from inprocess import objects_of, sampling, settings_for

from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.store import Store, object_name
from epochfs.sidecar.store.integrity import objects_after


def _take_out(store: Store, key: str) -> Path:
    obj = next(o for o in objects_after(store._ix, 0, 1000) if o.key == key)
    path = store.objects_dir / object_name(obj.sid)
    path.chmod(0o644)
    with open(path, "r+b") as f:
        f.truncate(100)  # cut short, as a bad disk would
    store.take_out([(obj, f"size 100, recorded {obj.size}")], quarantine=False)
    return path


def test_a_repair_lands_while_epochs_pin_a_full_cache(tmp_path: Path) -> None:
    objects = objects_of(40, size=1024)
    remote = MemoryRemote(objects)
    settings = settings_for(tmp_path / "cache", "--capacity", "8Ki", "--scrub-rate", "0",
                            "--cut-interval", "0")
    with sampling(tmp_path / "cache", remote, settings) as (store, _sampler):
        wait_until(lambda: store.stats().samples == 8, what="the cache full")
        assert store.cut() == 0
        wait_until(lambda: store.stats().backpressure,
                   what="backpressure: epoch 0 pins every cached sample")
        member = sorted(f.path for f in store.epoch_files(0))[3]
        assert member in objects
        path = _take_out(store, member)
        wait_until(lambda: store.stats().repaired_total == 1, timeout=30, what="the repair landed")
        stats = store.stats()
        assert (stats.lost, stats.repairing) == (0, 0), "repaired, not lost"
        assert path.read_bytes() == objects[member], "the source's bytes in place"
        assert stats.cache_bytes == 8 * 1024, "the repair added no bytes to the cache's total"
        assert stats.cache_bytes + store.stats().inflight_bytes <= 8 * 1024
