"""``--min-samples`` counts what the epoch would hold, not what the cache holds, and a minimum the
epoch budget cannot hold is said where epoch 0's wait shows.

Before: ``--capacity 64Ki`` holds 16 samples of 4 KiB and an epoch (75%) 12. With ``--min-samples
14`` epoch 0 was cut with 12 samples, fewer than the minimum asked (the condition counted every
cached sample); with ``--min-samples 17`` the full cache waited for a cut that could never come and
nothing but "16/17 samples cached" said so. A real store, samples admitted as the sampler admits
them, the backpressure reason the sampler records."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from fuse_helpers import open_store
from store_helpers import put

from epochfs.sidecar.status import first_epoch_line

KIB4 = 4096
CAPACITY = 64 * 1024  # 16 samples; the epoch budget (75%) holds 12


@pytest.mark.parametrize("min_samples", [14, 17])
def test_an_epoch_is_never_cut_below_min_samples_and_a_budget_too_small_says_so(
        tmp_path: Path, min_samples: int) -> None:
    with open_store(tmp_path / "cache", capacity=CAPACITY, min_samples=min_samples) as store:
        for i in range(16):
            put(store, f"train/{i:03d}.bin", KIB4)
        assert store.cut() is None, "epoch 0 would hold 12 samples, fewer than --min-samples"
        assert store.cut_ready(0) is False
        assert "warning" not in (store.stats().first_epoch or {}), "not full yet: nothing to say"
        store.set_backpressure("cache full")  # the sampler: full, nothing evictable before a cut
        first = store.stats().first_epoch or {}
        warning = (f"--min-samples {min_samples} is more than the 12 samples an epoch holds: --capacity "
                   "64.0 KiB less --headroom 25% leaves 48.0 KiB for an epoch, and the cache is full "
                   "with nothing evictable: epoch 0 is never cut; lower --min-samples or raise --capacity")
        assert first.get("warning") == warning
        assert first_epoch_line({"first_epoch": first}) == (
            f"epoch 0: 12/{min_samples} samples cached ({100 * 12 / min_samples:.0f}%); WARNING: {warning}")
        assert store.cut(force=True) == 0, "--force still cuts what is there"
        assert store.stats().epochs[0]["samples"] == 12


def test_a_minimum_the_epoch_holds_is_cut_at_once(tmp_path: Path) -> None:
    with open_store(tmp_path / "cache", capacity=CAPACITY, min_samples=12) as store:
        for i in range(11):
            put(store, f"train/{i:03d}.bin", KIB4)
        assert store.cut() is None
        for i in range(11, 16):
            put(store, f"train/{i:03d}.bin", KIB4)
        store.set_backpressure("cache full")
        assert "warning" not in (store.stats().first_epoch or {})
        assert store.cut() == 0
        assert store.stats().epochs[0]["samples"] == 12


def test_the_never_cut_warning_is_logged_once_when_threads_look_at_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The sampler's admitter and its loop both serve cut requests, and each then looks whether
    the first cut can never come: two looks in one second each logged the warning (the sidecar's
    log held it twice, 1 ms apart)."""
    with open_store(tmp_path / "cache", capacity=CAPACITY, min_samples=17) as store:
        for i in range(16):
            put(store, f"train/{i:03d}.bin", KIB4)
        store.set_backpressure("cache full")
        start = threading.Barrier(8)

        def look() -> None:
            start.wait()
            store.process_cut_requests()

        with caplog.at_level(logging.WARNING, logger="epochfs.store"):
            threads = [threading.Thread(target=look) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        said = [r for r in caplog.records if "epoch 0: --min-samples 17" in r.getMessage()]
        assert len(said) == 1, [r.getMessage() for r in said]
