"""A key skipped again after a relist, unchanged, is not counted again.

``epochfs_remote_objects_total{result="skipped"}`` (``skipped_total``; ``epochfs status``'s "N
object(s) skipped") counts keys: the EpochfsSamplerStalled alert compares the catalog with the
cached samples plus the skipped keys. A relist gives every skipped key another try (it may have
been an outage, or a rewritten object), and the sampler skips it again when nothing changed.
Before: that counted it again, so with ``--relist-interval 5`` and every key refused (a cache
volume too small) a 300-key catalog reached 1800 skipped in 30 s, and once past the catalog's size
the alert could never fire. Now a skip is counted once per key, and again only when a listing
changed the object (new size or version: another object under the same key).

The real ``epochfs sample`` and ``epochfs relist`` over a ``file://`` folder, the cache on a tmpfs
too small for all but one object; the store's own listing code (``build_catalog``) for the changed object.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from common import wait_until
from inprocess import small_volume
from sampler_helpers import index_rows

from epochfs.sidecar.catalog import build_catalog
from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.index import Meta

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
ENV = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}


def _skipped_total(cache: Path) -> int:
    try:
        rows = index_rows(cache, "SELECT value FROM counters WHERE name='skipped_total'")
    except sqlite3.OperationalError as e:  # the index file made, its tables not yet
        if "no such table" not in str(e):
            raise
        return 0
    return int(rows[0][0]) if rows else 0


def _relisted_and_all_skipped_again(cache: Path, generation: int) -> bool:
    complete = index_rows(cache, "SELECT value FROM meta WHERE name=?", (Meta.LISTING_COMPLETE.value,))
    if not complete or int(complete[0][0]) < generation:
        return False
    return index_rows(cache, "SELECT COUNT(*) FROM catalog WHERE skipped = 0 "
                             "AND key NOT IN (SELECT key FROM samples)")[0][0] == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")
def test_keys_refused_again_after_a_relist_are_counted_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(12):  # 3 MiB each: more than the 2 MiB a 10 MiB volume holds beside its margin
        (data / f"{i:02d}.bin").write_bytes(os.urandom(3 << 20))
    (data / "small.bin").write_bytes(b"fits")  # (a volume that holds no key pauses, skips nothing)
    with small_volume(tmp_path / "vol", "10m") as vol:
        cache = vol / "cache"
        proc = subprocess.Popen([EPOCHFS, "sample", "--cache", str(cache), "--remote", data.as_uri(),
                                 "--capacity", "8Mi"], env=ENV, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            # Every key but one is more than the cache can hold on the volume.
            wait_until(lambda: ((cache / "index.sqlite").exists() and _skipped_total(cache) >= 12)
                       or proc.poll() is not None, timeout=60, what="every key refused")
            assert proc.poll() is None
            for generation in (2, 3):
                relist = subprocess.run([EPOCHFS, "relist", "--cache", str(cache)], env=ENV,
                                        capture_output=True, text=True, timeout=60)
                assert relist.returncode == 0, relist.stderr
                wait_until(lambda g=generation: _relisted_and_all_skipped_again(cache, g)
                           or proc.poll() is not None, timeout=60, what=f"relist {generation - 1} done")
                assert proc.poll() is None
                assert _skipped_total(cache) == 12, f"after relist {generation - 1}"
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-2000:]
        # Each relist tried every key; the lines of skips met again are said once a minute at most.
        assert 1 <= err.count("is more than the cache can ever hold") < 36, err[-2000:]


def test_a_key_skipped_again_is_counted_again_only_when_the_listing_changed_it(tmp_path: Path) -> None:
    objects = {"k/a.bin": b"1", "k/b.bin": b"22", "k/c.bin": b"333"}
    with Store(tmp_path / "cache", create=True) as store:

        def listing(remote: MemoryRemote, *, fresh: bool) -> None:
            build_catalog(store, remote, seed=0, shard_index=0, shard_count=1, object_limit=100,
                          fresh=fresh)

        def skip_all() -> tuple[int, int]:
            offered = [c.key for _, c in store.candidates(after_rank=None, limit=10)]
            assert sorted(offered) == sorted(objects), "a relist gives every skipped key another try"
            store.mark_skipped("k/a.bin")  # refused (too large)
            store.mark_skipped("k/b.bin", failed=True)  # its downloads kept failing
            store.mark_skipped("k/c.bin", failed=True)
            stats = store.stats()
            return stats.skipped_total, stats.failed_total

        listing(MemoryRemote(objects), fresh=False)
        assert skip_all() == (3, 2)
        listing(MemoryRemote(objects), fresh=True)
        assert skip_all() == (3, 2), "the same keys, unchanged: not counted again"
        # Rewritten under the same key (a new ETag): another object, whose skip counts.
        listing(MemoryRemote(objects | {"k/c.bin": b"444"}), fresh=True)
        assert skip_all() == (4, 3)
        listing(MemoryRemote(objects | {"k/c.bin": b"444"}), fresh=True)
        assert skip_all() == (4, 3)
