"""The pace over thousands of folders listed as ranges (issue 19, "the fair sample"): more folders
than the discovery gives spans (``MAX_FOLDER_SPANS``) are read as ranges of a few folders each, and
while a range has folders no page has reached, the listing's skew is not divided by a random
sample's spread (a folder not reached may hold 43% of the keys). A range whose first folders were
listed waited behind the large folders' pages (its next page goes by its listed share), so some
range always had a folder not reached: 600k keys in 2,500 folders of Zipf 1.3 sizes held the epochs
at 33-63 samples for 32 s, the skew's cap at 21-54, with the listed keys 0.18 from the folder mix.

Pure: the real :class:`~epochfs.sidecar.listing.planner.Planner` over an in-memory listing (the
harness of ``tests/range_folders_helpers.py``, shared with
``test_listing_planner_range_folders.py``), and the fetch order's cap
(:func:`~epochfs.sidecar.sampler.pace.skew_cap`) on what the planner says."""

from __future__ import annotations

import math
import random
from unittest import mock

import numpy as np
from range_folders_helpers import folder_ranges, folder_tv, read_batch, zipf_key_space

from epochfs.benchmarks._fairness_stats import random_baseline
from epochfs.sidecar.listing.planner import Planner
from epochfs.sidecar.sampler.pace import walk_cap

FOLDERS = 2500
KEYS = 200_000
SKEW = 1.3






@mock.patch("epochfs.sidecar.listing.planner.SKEW_EVERY", 0.0)
def test_thousands_of_folders_as_ranges_let_fair_epochs_grow() -> None:
    """From 45% of the keys listed on, the cap lets through at least 200 samples (209-1,301 here,
    the expected distance of an epoch drawn from the listed mix holding it at 209-338 until 60%
    are listed: :mod:`~epochfs.sidecar.listing.expected_tv`; 52-231 up to 80% listed before the
    ranges' sizes counted), and no more than keep a sample of the listed keys within 2x of a
    random sample's folder-mix distance."""
    keys, paths, size = zipf_key_space(folders=FOLDERS, keys=KEYS, skew=SKEW, seed=23)
    assert len(folder_ranges(paths)) < FOLDERS, "the folders are listed as ranges"
    planner = Planner(folder_ranges(paths), splittable=True, rng=random.Random(1), folders=paths)
    order = random.Random(2)
    bounds = np.cumsum([0, *(size[p] for p in paths)])
    listed: list[str] = []
    checks = iter(range(len(keys) * 9 // 20, len(keys) * 4 // 5, len(keys) // 20))
    upto: int | None = next(checks)
    caps = []
    while planner.open_segments and upto is not None:
        for page in read_batch(planner, keys, order):
            listed += page
        if len(listed) < upto:
            continue
        progress = planner.progress()
        cap = walk_cap(progress)
        caps.append((len(listed), cap))
        assert cap is None or cap >= 200, f"{len(listed)} listed: the cap holds the epochs at {cap}"
        n = min(cap or len(listed), 5000)
        # A sample of the listed keys is about as far from the mix as they are, plus a random
        # sample's own distance at its size (independent: their squares add).
        random_tv = random_baseline(n, bounds, draws=5).tv
        off = folder_tv(listed, paths, size)
        assert math.hypot(off, random_tv) <= 2.0 * random_tv, (len(listed), off, n, random_tv)
        upto = next(checks, None)
    assert len(caps) >= 6, caps


def test_the_spread_is_taken_at_the_samples_the_cap_lets_through() -> None:
    """Over 2,500 equal folders a random sample of 100 keys is 0.96 from their mix (it holds none
    of most folders), not the 2.0 a large sample's spread says; the planner's skew is divided by
    the spread at the cap's sample size, which the skew module takes from the fetch order's
    constant (a copy: the sampler imports nothing of the listing at start-up)."""
    from epochfs.sidecar.listing import skew
    from epochfs.sidecar.sampler import pace
    assert skew.FAIR_SPREAD == pace.FAIR_SPREAD
    shares = [1 / 2500] * 2500
    assert math.isclose(skew._random_tv(shares, 100), 0.961, abs_tol=0.002)
    assert math.isclose(skew._random_tv([0.1] * 10, 1000), 1.2 / math.sqrt(1000), rel_tol=0.01)


def test_the_random_distance_holds_at_any_sample_size() -> None:
    """A tiny listed skew asks the spread at any sample size: the exact binomial sum overflowed at
    1e20 (OverflowError in the listing); past a million it is the normal limit, continuous there."""
    from epochfs.sidecar.listing import skew
    shares = [0.3, 0.7]
    limit = 2 * math.sqrt(0.21 / (2 * math.pi))
    for n in (1e6, 1e9, 1e20, 1e300):
        assert math.isclose(skew._random_tv(shares, n) * math.sqrt(n), limit, rel_tol=0.002), n
    below, above = skew._random_tv(shares, skew.EXACT_UP_TO), skew._random_tv(shares, skew.EXACT_UP_TO + 1)
    assert math.isclose(below, above, rel_tol=0.002)
