"""Epoch 0's progress and ``epochfs cut``'s refusal count what the epoch would hold, not the cache.

Before: ``--capacity 400000 --min-samples 350`` with an epoch budget of 300 samples showed "epoch 0:
350/350 samples cached (100%); WARNING: --min-samples 350 is more than the 300 samples an epoch
holds" and ``epochfs cut`` said "400 sample(s) complete, condition not met": both counted every
cached sample, while the cut condition (docs/sampler.md) counts the newest within the epoch budget.
Here ``--capacity 64Ki`` holds 16 samples of 4 KiB and an epoch (75%) 12: with ``--min-samples 14``
status showed "14/14 (100%)" and the cut named 16. A real store, samples admitted as the sampler
admits them, the real ``epochfs status`` and ``epochfs cut`` commands.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from fuse_helpers import open_store
from sampler_helpers import EPOCHFS
from store_helpers import put

ENV = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
KIB4 = 4096
CAPACITY = 64 * 1024  # 16 samples; the epoch budget (75%) holds 12
MIN_SAMPLES = 14


def _epochfs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EPOCHFS, *args], capture_output=True, text=True, timeout=120, env=ENV)


def _epoch0_line(cache: Path) -> str:
    shown = _epochfs("status", "--cache", str(cache))
    assert shown.returncode == 0, shown.stderr
    [line] = [x for x in shown.stdout.splitlines() if x.startswith("  (no epoch cut yet: ")]
    return line.removeprefix("  (no epoch cut yet: ").removesuffix(")")


def _full_cache(cache: Path, *, full: bool) -> None:
    """16 samples cached, the epoch budget holding the newest 12; ``full``: the sampler's
    backpressure reason for a full cache with nothing evictable."""
    with open_store(cache, capacity=CAPACITY, min_samples=MIN_SAMPLES) as store:
        for i in range(16):
            put(store, f"train/{i:03d}.bin", KIB4)
        if full:
            store.set_backpressure("cache full")


def test_progress_and_cut_count_the_budget_while_the_cache_fills(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _full_cache(cache, full=False)
    first = json.loads(_epochfs("status", "--cache", str(cache), "--json").stdout)["first_epoch"]
    assert (first["samples"], first["target"], first["cached"]) == (12, MIN_SAMPLES, 16), first
    note = ("16 cached, of which an epoch holds the newest 12: those within the epoch budget of "
            "48.0 KiB (--capacity less --headroom)")
    assert _epoch0_line(cache) == f"epoch 0: 12/14 samples cached (86%); {note}"
    cut = _epochfs("cut", "--cache", str(cache))
    assert cut.returncode == 1, cut.stderr
    assert cut.stderr.strip() == (f"epochfs: cannot cut yet: epoch 0 would hold 12 of the 14 sample(s) "
                                  f"its condition needs; {note} (use --force to cut what is there)")


def test_progress_and_cut_count_the_budget_when_the_cache_is_full(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _full_cache(cache, full=True)
    warning = (f"--min-samples {MIN_SAMPLES} is more than the 12 samples an epoch holds: --capacity "
               "64.0 KiB less --headroom 25% leaves 48.0 KiB for an epoch, and the cache is full with "
               "nothing evictable: epoch 0 is never cut; lower --min-samples or raise --capacity")
    assert _epoch0_line(cache) == f"epoch 0: 12/14 samples cached (86%); WARNING: {warning}"
    cut = _epochfs("cut", "--cache", str(cache))
    assert cut.returncode == 1, cut.stderr
    assert cut.stderr.strip() == (f"epochfs: cannot cut yet: epoch 0 would hold 12 of the 14 sample(s) "
                                  f"its condition needs: {warning} (use --force to cut what is there)")


def test_a_later_cut_names_the_budget(tmp_path: Path) -> None:
    """After a forced epoch 0 (12 samples), the next epoch is short for the same reason."""
    cache = tmp_path / "cache"
    _full_cache(cache, full=True)
    forced = _epochfs("cut", "--cache", str(cache), "--force")
    assert forced.returncode == 0 and forced.stdout.strip() == "0", forced.stderr
    cut = _epochfs("cut", "--cache", str(cache))
    assert cut.returncode == 1, cut.stderr
    assert cut.stderr.strip() == (
        "epochfs: cannot cut yet: 16 sample(s) complete, but an epoch holds the newest within the "
        "epoch budget of 48.0 KiB (--capacity less --headroom), fewer than --min-samples 14 "
        "(use --force to cut what is there)"), cut.stderr
