"""``epochfs cut`` and ``epochfs status`` through the real console script, on a cache made by the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from store_helpers import put

from epochfs.sidecar.store import Policy, Store

EPOCHFS = [sys.executable, "-m", "epochfs.sidecar.cli"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EPOCHFS, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "EPOCHFS_CACHE": ""})


def make_cache(cache: Path, count: int, *, min_samples: int = 1) -> None:
    with Store(cache, create=True) as store:
        store.configure(Policy(capacity=10_000, min_samples=min_samples))
        for i in range(count):
            put(store, f"train/{i}.bin")


def test_cut_prints_the_epoch_and_status_lists_it(cache_dir: Path) -> None:
    make_cache(cache_dir, 3)
    first = run("cut", "--cache", str(cache_dir))
    assert (first.returncode, first.stdout.strip()) == (0, "0"), first.stderr
    again = run("cut", "--cache", str(cache_dir), "--epoch", "4")
    assert (again.returncode, again.stdout.strip()) == (0, "4"), again.stderr
    status = run("status", "--cache", str(cache_dir), "--json")
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    for key in ("cache_bytes", "capacity_bytes", "samples", "fetched_total", "evicted_total",
                "skipped_total", "backpressure", "epochs"):
        assert key in doc, key
    assert doc["samples"] == 3 and doc["cache_bytes"] == 300 and doc["backpressure"] is False
    assert [(e["epoch"], e["samples"], e["bytes"]) for e in doc["epochs"]] == [(0, 3, 300), (4, 3, 300)]
    human = run("status", "--cache", str(cache_dir))
    assert human.returncode == 0 and "300 B / 9.8 KiB" in human.stdout and "     4" in human.stdout


def test_cut_refuses_when_the_condition_does_not_hold(cache_dir: Path) -> None:
    make_cache(cache_dir, 1, min_samples=5)
    result = run("cut", "--cache", str(cache_dir))
    assert result.returncode == 1 and "cannot cut yet" in result.stderr
    forced = run("cut", "--cache", str(cache_dir), "--force")
    assert (forced.returncode, forced.stdout.strip()) == (0, "0"), "--force cuts what is there"


def test_force_still_needs_a_sample(cache_dir: Path) -> None:
    make_cache(cache_dir, 0)
    assert run("cut", "--cache", str(cache_dir), "--force").returncode == 1


def test_cut_below_the_newest_is_a_flag_error(cache_dir: Path) -> None:
    make_cache(cache_dir, 2)
    assert run("cut", "--cache", str(cache_dir), "--epoch", "3").returncode == 0
    low = run("cut", "--cache", str(cache_dir), "--epoch", "1")
    assert low.returncode == 2
    assert low.stderr.strip().startswith("epochfs cut: --epoch:") and len(low.stderr.splitlines()) == 1


def test_cut_refuses_a_far_jump_unless_far_and_a_number_past_the_limit(cache_dir: Path) -> None:
    """``epochfs cut --epoch 8589934592`` exited 0 and left an epoch the view could never show,
    every later epoch invisible (issue 20): now exit 2 naming the limit; a jump of more than
    1,000 epochs needs --far."""
    make_cache(cache_dir, 2)
    huge = run("cut", "--cache", str(cache_dir), "--epoch", "8589934592", "--far")
    assert huge.returncode == 2 and "largest epoch number 536,870,910" in huge.stderr, huge.stderr
    far = run("cut", "--cache", str(cache_dir), "--epoch", "5000")
    assert far.returncode == 2 and "--far" in far.stderr and len(far.stderr.splitlines()) == 1, far.stderr
    asked = run("cut", "--cache", str(cache_dir), "--epoch", "5000", "--far")
    assert (asked.returncode, asked.stdout.strip()) == (0, "5000"), asked.stderr


def test_status_of_a_missing_cache_or_mount_exits_2(tmp_path: Path) -> None:
    for args in (("--cache", str(tmp_path / "nope")), ("--mount", str(tmp_path))):
        result = run("status", *args)
        assert result.returncode == 2, result
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
