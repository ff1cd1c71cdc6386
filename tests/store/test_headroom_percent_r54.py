"""A headroom is shown as the share it is, never rounded to one the flag refuses: ``--headroom
0.999`` was said as "headroom 100%" in the epoch-budget warning and the capacity refusal, while
``--headroom 1`` is refused ("must be in [0, 1)")."""

from __future__ import annotations

from pathlib import Path

from fuse_helpers import open_store
from store_helpers import put

from epochfs.sidecar.store.stats import percent


def test_percent_keeps_what_rounding_to_whole_percents_lost() -> None:
    assert percent(0.25) == "25%"
    assert percent(0.999) == "99.9%"
    assert percent(0.0) == "0%"
    assert percent(0.125) == "12.5%"


def test_the_epoch_budget_warning_says_the_headroom_given(tmp_path: Path) -> None:
    with open_store(tmp_path / "cache", capacity=64 * 1024, min_samples=3, headroom=0.9) as store:
        for i in range(16):
            put(store, f"train/{i:03d}.bin", 4096)
        store.set_backpressure("cache full")
        warning = (store.stats().first_epoch or {}).get("warning", "")
        assert "less --headroom 90% leaves" in warning, warning
    with open_store(tmp_path / "cache2", capacity=64 * 1024, min_samples=2, headroom=0.999) as store:
        for i in range(16):
            put(store, f"train/{i:03d}.bin", 4096)
        store.set_backpressure("cache full")
        warning = (store.stats().first_epoch or {}).get("warning", "")
        assert "less --headroom 99.9% leaves" in warning, warning
