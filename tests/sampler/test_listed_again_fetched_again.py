"""What a listing left out or a fetch gave up on comes back when the listing is made again.

- A key skipped because its downloads kept failing (gone for a while: an outage, an object being
  rewritten) is fetched again once a relist sees it. Before: the relist updated the row and kept its
  skip, so the key stayed out of every epoch for the life of the cache (81 of 300 in a reviewer's run).
- A larger ``--capacity`` (what the refusal "every object of this shard is larger than the object
  limit" asks for) catalogs the objects the smaller one left out. Before: the complete catalog of 0
  keys was reused and the sampler fetched nothing.

The real ``epochfs sample``, ``index`` and ``relist`` commands over ``file://`` folders.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from common import wait_until

from epochfs.sidecar.store import INDEX_NAME, Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
ENV = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}


def _stats(cache: Path) -> tuple[int, int]:
    """(samples cached, keys skipped)."""
    if not (cache / INDEX_NAME).exists():
        return 0, 0
    with Store(cache) as store:
        stats = store.stats()
        return stats.samples, stats.skipped_total


def _start(cache: Path, remote: str, *more: str) -> subprocess.Popen[str]:
    return subprocess.Popen([EPOCHFS, "sample", "--cache", str(cache), "--remote", remote,
                             "--retries", "1", *more],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _sample_until(cache: Path, data: Path, samples: int, *flags: str) -> str:
    """`epochfs sample` until the cache holds ``samples``, then stopped: its stderr."""
    proc = _start(cache, data.as_uri(), *flags)
    try:
        wait_until(lambda: _stats(cache)[0] == samples or proc.poll() is not None, timeout=60,
                   what=f"{samples} samples")
        assert proc.poll() is None
    finally:
        err = _stop(proc)
    return err


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    return err


def test_a_key_skipped_once_is_fetched_again_after_a_relist(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(10):
        (data / f"{i:02d}.bin").write_bytes(os.urandom(1000 + i))
    index = tmp_path / "index.jsonl"
    subprocess.run([EPOCHFS, "index", data.as_uri(), "--out", str(index)], env=ENV, check=True,
                   capture_output=True, timeout=60)
    away = tmp_path / "away"
    away.mkdir()
    for i in range(3):  # gone for a while after the listing
        shutil.move(data / f"{i:02d}.bin", away / f"{i:02d}.bin")
    cache = tmp_path / "cache"
    proc = _start(cache, data.as_uri(), "--index", str(index))
    try:
        wait_until(lambda: _stats(cache) == (7, 3) or proc.poll() is not None, timeout=60,
                   what="7 samples, the 3 missing keys skipped")
        assert proc.poll() is None and _stats(cache) == (7, 3)
        for path in away.iterdir():
            shutil.move(path, data / path.name)
        relist = subprocess.run([EPOCHFS, "relist", "--cache", str(cache)], env=ENV,
                                capture_output=True, text=True, timeout=60)
        assert relist.returncode == 0, relist.stderr
        wait_until(lambda: _stats(cache)[0] == 10 or proc.poll() is not None, timeout=60,
                   what="the 3 keys fetched after the relist")
        assert proc.poll() is None
    finally:
        _stop(proc)


def test_a_larger_capacity_catalogs_the_objects_the_smaller_one_left_out(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        (data / f"big{i}.bin").write_bytes(os.urandom(300_000))
    for i in range(4):
        (data / f"small{i}.bin").write_bytes(os.urandom(2_000))
    cache = tmp_path / "cache"
    _sample_until(cache, data, 4, "--capacity", "100Ki")  # the small objects alone
    assert "object limit changed" in _sample_until(cache, data, 7, "--capacity", "10Mi")


@pytest.mark.long
def test_a_lower_capacity_evicts_down_to_it_with_nothing_left_to_fetch(tmp_path: Path) -> None:
    """Before: room was made only for a download, so a cache started again with a lower
    ``--capacity`` and every key cached kept all of it, epochs cut or not (882.8 KiB / 100.0 KiB
    in a reviewer's run)."""
    data = tmp_path / "data"
    data.mkdir()
    for i in range(10):
        (data / f"{i}.bin").write_bytes(os.urandom(50_000))
    cache = tmp_path / "cache"
    proc = _start(cache, data.as_uri(), "--capacity", "10Mi")
    try:
        wait_until(lambda: _stats(cache)[0] == 10 or proc.poll() is not None, timeout=60, what="every sample")
        assert proc.poll() is None
    finally:
        _stop(proc)

    def cached_bytes() -> int:
        with Store(cache) as store:
            return store.stats().cache_bytes

    # Epochs cut every second: samples above the newest cut are the next epoch's and stay; a cut
    # to the lower budget leaves the rest outside every live epoch once the older ones retire.
    proc = _start(cache, data.as_uri(), "--capacity", "200Ki", "--cut-interval", "1")
    try:
        wait_until(lambda: cached_bytes() <= 200 * 1024 or proc.poll() is not None, timeout=60,
                   what="the cache evicted down to the lower capacity")
        assert proc.poll() is None
    finally:
        _stop(proc)
    assert 0 < _stats(cache)[0] <= 4
    with Store(cache) as store:
        assert store.stats().evicted_total >= 6

