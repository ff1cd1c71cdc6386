"""The fairness benchmark's metrics (benchmarks/_fairness_stats.py) on samples whose answers are
known: folders covered, the folder-mix total-variation distance, the in-folder KS distance, and
the random baselines they are compared with."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pytest

from epochfs.benchmarks._fairness_stats import (
    compare,
    folder_mix_tv,
    folders_covered,
    in_folder_ks,
    measure,
    random_baseline,
    ratio,
    same_mix_ks,
    strata_of,
)

FOUR = [0, 1000, 2000, 3000, 4000]  # four strata of 1,000 positions
SKEWED = [0, 100, 1000, 4000]  # 100, 900 and 3,000 positions


def test_strata_and_folders_covered() -> None:
    assert list(strata_of([0, 999, 1000, 3999], FOUR)) == [0, 0, 1, 3]
    assert folders_covered([0, 999, 1000, 3999], FOUR) == 3
    assert folders_covered([], FOUR) == 0
    with pytest.raises(ValueError):
        strata_of([4000], FOUR)
    with pytest.raises(ValueError):
        strata_of([0], [0, 10, 10, 20])  # an empty stratum


def test_folder_mix_tv() -> None:
    assert folder_mix_tv(range(4000), FOUR) == 0.0
    assert folder_mix_tv([0, 1000, 2000, 3000], FOUR) == 0.0  # one of each: the dataset's mix
    assert folder_mix_tv(range(100), FOUR) == pytest.approx(0.75)  # all in one of four equal folders
    # One key from each of three folders of 100, 900 and 3,000: 1/3 each against 0.025, 0.225, 0.75.
    assert folder_mix_tv([0, 100, 1000], SKEWED) == pytest.approx(0.5 * (0.3083 + 0.1083 + 0.4167), abs=1e-3)
    assert math.isnan(folder_mix_tv([], FOUR))


def test_in_folder_ks() -> None:
    # A whole folder: its keys' middles, as close to uniform as 1,000 slots allow.
    assert in_folder_ks(range(1000), FOUR) == pytest.approx(0.5 / 1000)
    # The first tenth of a folder (what listing it from its start gives): nearly 0.9.
    assert in_folder_ks(range(100), FOUR) == pytest.approx(0.9 + 0.5 / 1000)
    # One key in the middle of its folder: 0.5 (plus the half slot), wherever the folder is.
    assert in_folder_ks([1500], FOUR) == in_folder_ks([500], FOUR) == pytest.approx(0.5005)
    # Weighted by sample counts: 100 keys spread evenly in folder 0, the 100 first keys of folder 1.
    even = list(range(5, 1000, 10))  # 100 keys, one in the middle of each run of 10
    first = list(range(1000, 1100))
    ks_even, ks_first = in_folder_ks(even, FOUR), in_folder_ks(first, FOUR)
    assert ks_even < 0.02 and ks_first > 0.89
    assert in_folder_ks(even + first, FOUR) == pytest.approx((ks_even + ks_first) / 2)
    assert math.isnan(in_folder_ks([], FOUR))


def test_measure_refuses_repeated_positions() -> None:
    assert measure([1, 2, 3000], FOUR).samples == 3
    with pytest.raises(ValueError):
        measure([1, 1], FOUR)


def test_the_random_baseline_is_seeded_and_fair() -> None:
    a = random_baseline(400, FOUR, draws=20, seed=3)
    assert a == random_baseline(400, FOUR, draws=20, seed=3)
    assert a != random_baseline(400, FOUR, draws=20, seed=4)
    assert a.samples == 400 and a.covered == 4
    assert a.tv < 0.1 and a.ks < 0.2  # random samples of 400 (100 a folder): small distances
    census = random_baseline(4000, FOUR, draws=3)
    assert (census.covered, census.tv) == (4, 0.0) and census.ks == pytest.approx(0.5 / 1000)
    # Few keys over many folders cover about as many folders as keys.
    many = random_baseline(50, list(range(0, 100_001, 20)), draws=20)
    assert 45 <= many.covered <= 50


def test_compare_gives_ratios_to_random() -> None:
    first = compare(range(400), FOUR, draws=20)  # the first 400 keys: one folder, its first 40%
    assert first.strata == 4 and first.sample.samples == 400 and first.sample.covered == 1
    assert first.covered_ratio == pytest.approx(0.25)
    assert first.tv_ratio > 5 and first.ks_ratio > 5 and first.same_mix_ks_ratio > 5
    spread = compare(range(5, 4000, 10), FOUR, draws=20)  # every tenth key: more even than random
    assert spread.covered_ratio == 1.0 and spread.sample.tv == 0.0 and spread.tv_ratio == 0.0
    assert spread.ks_ratio < 0.5
    # The same mix: random samples with 40 keys in each of the first two folders.
    crowded = np.r_[np.arange(0, 1000, 25), np.arange(1000, 2000, 25)]
    baseline = same_mix_ks(crowded, FOUR, draws=20)
    assert 0.05 < baseline < 0.3 and compare(crowded, FOUR).same_mix_ks == baseline
    assert math.isnan(same_mix_ks([], FOUR))


def test_ratio() -> None:
    assert ratio(0.5, 0.25) == 2.0 and ratio(0.0, 0.0) == 1.0 and ratio(0.1, 0.0) == math.inf
    assert math.isnan(ratio(math.nan, 1.0))


def test_runs_are_summarized_by_their_median_and_range() -> None:
    """``--runs N``: per key space and epoch, the median of each figure and its range."""
    import dataclasses

    from epochfs.benchmarks.fairness import Row, markdown, summary

    base = Row(shape="equal", spec="equal:keys=10", keys=10, strata=2, epoch=0, at_s=2.0, listed=10,
               samples=4, covered=2, covered_random=2.0, covered_ratio=1.0, tv=0.1, tv_random=0.1,
               tv_ratio=1.0, ks=0.2, ks_random=0.2, ks_ratio=1.0, ks_same_mix=0.2, ks_same_mix_ratio=1.0)
    rows = [dataclasses.replace(base, run=i, tv_ratio=t, samples=n, at_s=a)
            for i, (t, n, a) in enumerate([(3.0, 10, 2.2), (1.0, 30, 2.0), (2.0, 20, 2.4)])]
    rows.append(dataclasses.replace(base, epoch=1, tv_ratio=1.5))
    [first, second] = summary(rows)
    assert (first["epoch"], first["runs"]) == (0, 3)
    assert first["TV ratio"] == "2.00 [1.00-3.00]" and first["samples"] == "20 [10-30]"
    assert first["cut at (s)"] == "2.2 [2.0-2.4]"
    assert (second["runs"], second["TV ratio"]) == (1, "1.50")
    ns = argparse.Namespace(size=4096, list_latency=0.02, every=2.0, strata="top", draws=20, runs=3)
    table = markdown(rows, ns, ["--runs", "3"], ["equal:keys=10"])
    assert "Over 3 runs of one sampling order (0: each run repeats its draw)" in table
    assert "| equal | 0 | 3 | 2.2 [2.0-2.4] |" in table
    assert table.count("| run |") == 1


def test_runs_of_several_sampling_orders_take_them_in_turn_and_say_so() -> None:
    """``--sampler-seed 7,11``: run r has order 7 or 11 in turn, the runs default to one per
    order, each row and the table say which, and the summary has the in-folder KS ratio beside
    the same-mix one."""
    import dataclasses

    from epochfs.benchmarks.fairness import Row, markdown, order_of, summary

    ns = argparse.Namespace(sampler_seed=[7, 11], runs=4, size=4096, list_latency=0.02, every=2.0,
                            strata="top", draws=20)
    assert [order_of(ns, run) for run in range(4)] == [7, 11, 7, 11]
    base = Row(shape="equal", spec="equal:keys=10", keys=10, strata=2, epoch=0, at_s=2.0, listed=10,
               samples=4, covered=2, covered_random=2.0, covered_ratio=1.0, tv=0.1, tv_random=0.1,
               tv_ratio=1.0, ks=0.2, ks_random=0.2, ks_ratio=1.0, ks_same_mix=0.2, ks_same_mix_ratio=1.0)
    rows = [dataclasses.replace(base, run=r, order=order_of(ns, r), ks_ratio=k)
            for r, k in enumerate([1.0, 3.0, 2.0, 1.5])]
    assert summary(rows)[0]["KS ratio"] == "1.75 [1.00-3.00]"
    table = markdown(rows, ns, ["--sampler-seed", "7,11"], ["equal:keys=10"])
    assert "Over 4 runs of sampling orders 7, 11 (the sidecar's --seed, one a run in turn)" in table
    assert "| 1 (order 11) |" in table and "| 2 (order 7) |" in table


@pytest.mark.parametrize(("args", "said"), [
    (["--sampler-seed", "7,x"], "sampling orders are integers, comma-separated"),
    (["--sampler-seed", "1,,2"], "sampling orders are integers, comma-separated"),
    (["--sampler-seed", "7,11,12", "--runs", "2"], "--runs 2: fewer runs than --sampler-seed's 3 orders"),
])
def test_sampling_orders_that_cannot_be_run_are_refused(args: list[str], said: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from epochfs.benchmarks.fairness import main

    with pytest.raises(SystemExit) as stopped:
        main(args)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and said in err, err


def test_the_listed_keys_at_each_cut_are_the_catalogs_rows_up_to_its_rowid(tmp_path: Path) -> None:
    """``listed_by`` follows the order rows were inserted (the listing's), not the keys' order nor
    a rank's: rows inserted in a shuffled order, cuts after the 10th and the 30th row."""
    import random
    import sqlite3

    from epochfs.benchmarks._keyspaces import build
    from epochfs.benchmarks.fairness import listed_by

    space = build("equal", 40, folders=4)
    keys = [space.key(i) for i in range(space.count)]
    random.Random(3).shuffle(keys)
    index = tmp_path / "index.sqlite"
    with sqlite3.connect(index) as db:
        db.execute("CREATE TABLE catalog (key TEXT PRIMARY KEY)")
        db.executemany("INSERT INTO catalog(key) VALUES (?)", [(k,) for k in [*keys, "not/in/the/space"]])
    first, later = listed_by(space, index, [10, 30])
    assert first == [space.position(k) for k in keys[:10]]
    assert later == [space.position(k) for k in keys[:30]] and first != sorted(first)
