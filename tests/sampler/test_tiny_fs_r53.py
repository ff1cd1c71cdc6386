"""A cache on a filesystem that can hold no sample pauses sampling, says so once, and resumes when
the volume grows; keys skipped as too large for the volume are not logged once per pass.

Before: every key was "more than the cache can ever hold on its filesystem" and skipped. On a
400 KiB tmpfs the index filled the volume, so the skips' writes were refused, every key came back
at the next pass, and the sampler went through its 300-key catalog 200 times in 4 s, logging
60,000 lines (12 MB). On a volume whose index still had room, every key was marked skipped for
good, as if the objects were at fault. Now the sampler pauses with the backpressure reason "disk
full: the cache's filesystem can hold no sample ...", in status and the gauges, logs it once,
measures the volume again each second and fetches once it has been made larger. Keys bigger than
a volume that holds others are still skipped and counted once each, and a relist that offers them
again adds a line a minute at most, not a line per key.

Real small tmpfs volumes (remounted larger under the running sampler), the sampler's loop
in-process over an in-memory remote, the real index and registry.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from common import wait_until
from inprocess import sampling, settings_for, small_volume
from prometheus_client import REGISTRY

from epochfs.sidecar.catalog import build_catalog
from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.store import Store

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")

HOLDS_NOTHING = "disk full: the cache's filesystem can hold no sample"
FS_SKIP = "is more than the cache can ever hold on its filesystem"


def _counted(owner: Any, name: str) -> list[int]:
    """Count the calls of ``owner``'s method ``name`` from now on (the real method runs)."""
    calls = [0]
    real: Callable[..., Any] = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    setattr(owner, name, counted)
    return calls


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("size", ["400k", "4m"])
def test_a_volume_that_holds_no_sample_pauses_sampling_until_it_grows(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, size: str) -> None:
    """``size``: the reviewer's 400 KiB tmpfs (the index fills it), and one whose index has room
    (both below the 8 MiB kept free for the index: the cache can hold 0 bytes)."""
    remote = MemoryRemote({f"d{i % 4}/f{i:03d}.bin": bytes([i]) * (1000 + 50 * i) for i in range(40)})
    caplog.set_level(logging.INFO, logger="epochfs.sampler")
    with small_volume(tmp_path / "vol", size) as vol:
        cache = vol / "cache"
        settings = settings_for(cache, "--capacity", "2Mi")
        with sampling(cache, remote, settings) as (store, sampler):
            offered = _counted(sampler.order, "next")
            polls = _counted(sampler, "_collect")
            reason = wait_until(lambda: (sampler.room.backpressure or "").startswith(HOLDS_NOTHING)
                                or _lines(caplog, FS_SKIP) > 100, what="a pause, or skips")
            assert _lines(caplog, FS_SKIP) == 0, "every key skipped as if it were at fault"
            assert reason
            offered_then = offered[0]
            # Ten more turns of the loop, each a poll's wait: the held key is not let go, the
            # catalog not walked.
            wait_until(lambda: polls[0] >= 10, what="ten turns of the loop")
            assert offered[0] - offered_then <= 1, f"{offered[0] - offered_then} keys offered while paused"
            stats = store.stats()
            assert stats.skipped_total == 0 and stats.samples == 0
            assert (stats.backpressure_reason or "").startswith(HOLDS_NOTHING), stats
            # The budget in force is what the volume allows (status, epochfs_cache_capacity_bytes).
            assert 1 <= stats.capacity_bytes < settings.capacity, stats
            assert REGISTRY.get_sample_value("epochfs_disk_full") == 1
            assert REGISTRY.get_sample_value("epochfs_backpressure") == 1
            pauses = [r for r in caplog.records if HOLDS_NOTHING in r.getMessage()]
            assert len(pauses) == 1 and pauses[0].levelno == logging.WARNING, pauses
            # The volume grows under the sampler (an expanded PVC): it fetches everything.
            subprocess.run(["mount", "-o", "remount,size=64m", str(vol)], check=True)
            wait_until(lambda: store.stats().samples == 40 and sampler.room.backpressure is None,
                       what="every key fetched once the volume grew")
            assert store.stats().backpressure_reason is None and store.stats().skipped_total == 0
            assert store.stats().capacity_bytes == settings.capacity
            assert REGISTRY.get_sample_value("epochfs_disk_full") == 0
    assert _lines(caplog, "backpressure cleared") == 1
    assert _lines(caplog, FS_SKIP) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) <= 3, warnings  # the pause; a refused write of the index at most


def test_keys_too_large_for_the_volume_are_skipped_once_each_and_not_logged_each_pass(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A 10 MiB volume holds 2 MiB of samples beside its 8 MiB margin: the 1 KiB keys are fetched,
    the five 3 MiB keys skipped and counted once each; relists offer them again."""
    small = {f"s/{i:03d}.bin": bytes([i]) * 1024 for i in range(30)}
    big = {f"b/{i}.bin": bytes([i]) * (3 << 20) for i in range(5)}
    remote = MemoryRemote(small | big)
    caplog.set_level(logging.INFO, logger="epochfs.sampler")
    with small_volume(tmp_path / "vol", "10m") as vol:
        cache = vol / "cache"
        settings = settings_for(cache, "--capacity", "8Mi")
        with sampling(cache, remote, settings) as (store, sampler):
            wait_until(lambda: store.stats().samples == 30 and store.stats().skipped_total == 5,
                       what="the small keys fetched, the big ones skipped")
            for _ in range(3):  # a relist gives each skipped key another try (each pass)
                with Store(cache) as other:
                    build_catalog(other, remote, seed=settings.seed, shard_index=0, shard_count=1,
                                  object_limit=settings.object_limit, fresh=True)
                    wait_until(lambda o=other: not o.candidates(after_rank=None, limit=10),
                               what="the big keys skipped again")
            stats = store.stats()
            assert sampler.room.backpressure is None
    assert stats.skipped_total == 5 and stats.samples == 30, stats
    assert _lines(caplog, HOLDS_NOTHING) == 0
    # 20 skips; the first said, the rest held back for a minute (counted in the next line).
    assert 1 <= _lines(caplog, FS_SKIP) <= 4, caplog.text[-3000:]


def test_a_key_too_large_for_a_cache_that_holds_samples_is_skipped_and_keys_after_it_fetched(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The volume holds samples already; a relist adds one key larger than it can ever hold and,
    later, small keys. The large key is skipped and the small ones fetched: sampling never pauses
    as if the volume held nothing (review R53a: it paused for good, the new keys never fetched)."""
    remote = MemoryRemote({f"s/{i:03d}.bin": bytes([i]) * 1024 for i in range(6)})
    caplog.set_level(logging.INFO, logger="epochfs.sampler")
    with small_volume(tmp_path / "vol", "12m") as vol:
        cache = vol / "cache"
        settings = settings_for(cache, "--capacity", "8Mi")

        def relist() -> None:
            with Store(cache) as other:
                build_catalog(other, remote, seed=settings.seed, shard_index=0, shard_count=1,
                              object_limit=settings.object_limit, fresh=True)

        with sampling(cache, remote, settings) as (store, sampler):
            wait_until(lambda: store.stats().samples == 6, what="the first keys fetched")
            remote.objects["big/huge.bin"] = b"\x01" * (6 << 20)  # over the 4 MiB the volume holds
            relist()
            wait_until(lambda: store.stats().skipped_total == 1, what="the large key skipped")
            for i in range(3):
                remote.objects[f"t/{i}.bin"] = bytes([i]) * 2048
            relist()
            wait_until(lambda: store.stats().samples == 9, what="the keys listed after it fetched")
            assert sampler.room.backpressure is None
    assert _lines(caplog, HOLDS_NOTHING) == 0
