"""How often chance alone misses the fairness aims (benchmarks/_fairness_stats.py's random
misses), on cases whose answer is known by hand, and where ``epochfs bench fairness`` shows it: a
column per epoch, and each missed aim marked with its chance."""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from dataclasses import asdict

import numpy as np
import pytest

from epochfs.benchmarks._fairness_stats import (
    Fairness,
    in_folder_ks,
    random_baseline,
    random_ks,
    random_misses,
    random_mixes,
)
from epochfs.benchmarks._keyspaces import build
from epochfs.benchmarks.fairness import MISSES, Cut, markdown, row

TWO = [0, 1000, 2000]  # two equal folders
FOUR = [0, 1000, 2000, 3000, 4000]


def test_two_keys_of_two_equal_folders_miss_half_the_time() -> None:
    """Both keys land in the same folder with probability 999/1999: then they cover one folder
    (0.5x the median's two: under 0.9x) and the mix is all one folder (TV 0.5 against the median's
    0: over 2x); otherwise they cover both, with TV 0."""
    median = Fairness(2, covered=2.0, tv=0.0, ks=math.nan)
    misses = random_misses(2, TWO, median, trials=4000, seed=1)
    assert misses.trials == 4000
    assert misses.folders == pytest.approx(999 / 1999, abs=0.03)
    assert misses.tv == misses.folders  # the same draws miss both aims
    # Judged against a median of one folder (TV 0.5), no sample of two misses either aim.
    assert random_misses(2, TWO, Fairness(2, 1.0, 0.5, math.nan), trials=500) == \
        type(misses)(500, 0.0, 0.0)


def test_a_census_never_misses() -> None:
    """All the keys, drawn without replacement: every folder covered, the dataset's own mix."""
    census = random_baseline(4000, FOUR, draws=3)
    covered, tv = random_mixes(4000, FOUR, trials=50, rng=np.random.default_rng(0))
    assert (covered == 4).all() and (tv == 0).all()
    misses = random_misses(4000, FOUR, census, trials=50)
    assert (misses.tv, misses.folders) == (0.0, 0.0)


def test_random_mixes_are_seeded_and_follow_the_folder_sizes() -> None:
    a = random_mixes(100, [0, 100, 1000, 4000], trials=2000, rng=np.random.default_rng(3))
    b = random_mixes(100, [0, 100, 1000, 4000], trials=2000, rng=np.random.default_rng(3))
    assert all((x == y).all() for x, y in zip(a, b, strict=True))
    covered, tv = a
    # P(the 100-key folder of 4,000 is missed by 100 keys) = C(3900,100)/C(4000,100), about 0.08.
    assert (covered == 2).mean() == pytest.approx(0.08, abs=0.02)
    assert 0.02 < float(np.median(tv)) < 0.1
    with pytest.raises(ValueError):
        random_mixes(5000, FOUR, trials=1, rng=np.random.default_rng(0))


def test_random_ks_measures_each_trial_as_in_folder_ks_does() -> None:
    """All trials in one pass give each trial's own in-folder KS (the same draws, one at a time)."""
    got = random_ks(10, FOUR, trials=30, rng=np.random.default_rng(7))
    rng = np.random.default_rng(7)
    want = [in_folder_ks(rng.choice(4000, size=10, replace=False), FOUR) for _ in range(30)]
    assert got == pytest.approx(want)


def test_each_epoch_row_gives_the_chance_and_marks_its_misses() -> None:
    """An epoch of 400 keys from the first two of ten equal folders misses both aims by design; a
    random sample of 400 (40 a folder) covers all ten and has a TV near 0.06: it seldom misses."""
    space = build("equal", 2000, folders=10)
    _, bounds = space.strata("top")
    ns = argparse.Namespace(draws=20, seed=0, miss_trials=300, size=4096, list_latency=0.02, every=2.0,
                            strata="top", runs=1)
    r = row(space, bounds, Cut(epoch=0, at_s=2.0, listed=2000, positions=list(range(400))), ns)
    assert (r.covered, r.samples, r.miss_trials) == (2, 400, 300)
    assert r.covered_ratio < 0.9 and r.tv_ratio > 2
    assert r.random_miss_tv < 0.05 and r.random_miss_folders == 0.0
    fair = row(space, bounds, Cut(epoch=1, at_s=4.0, listed=2000, positions=list(range(0, 2000, 5))), ns)
    assert fair.covered == 10 and fair.tv == 0.0
    table = markdown([r, fair], ns, [], [space.shape.spec()]).splitlines()
    header = next(line for line in table if line.startswith("| shape |"))
    assert f"| KS ratio, same mix | {MISSES} | listed keys' TV |" in header
    assert "300 more random samples" in "\n".join(table)
    first, second = table[table.index(header) + 2:table.index(header) + 4]
    assert first.count("|") == second.count("|") == header.count("|")
    assert "| 0.20x (miss, chance 0%) |" in first
    assert f"| {r.tv_ratio:.2f}x (miss, chance {r.random_miss_tv:.0%}) |" in first
    assert f"| {r.random_miss_tv:.0%}, 0% |" in first
    assert "miss" not in second
    assert {"random_miss_tv", "random_miss_folders", "miss_trials"} <= asdict(r).keys()


@pytest.mark.parametrize("flag", ["0", "-3"])
def test_fairness_refuses_too_few_miss_trials(flag: str) -> None:
    done = subprocess.run([sys.executable, "-P", "-m", "epochfs.benchmarks.fairness", "--miss-trials", flag],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert "--draws and --miss-trials must be at least 1" in done.stderr
