"""The listing's skew held by the expected distance of an epoch drawn from the listed mix
(:mod:`epochfs.sidecar.listing.expected_tv`): over thousands of folders of Zipf sizes, a few large
folders listed behind their share are most of a small epoch's distance, which the skew's
large-sample spread did not see (600k keys in 3,000 folders of Zipf 1.45 sizes: 40-90 samples at
2.3x a random sample's TV)."""

from __future__ import annotations

import numpy as np
import pytest

from epochfs.sidecar.listing.expected_tv import TV_TARGET, largest_fair_sample, sample_tv
from epochfs.sidecar.listing.segments import Segment, SpanState
from epochfs.sidecar.listing.skew import _random_tv, fair_samples, listing_skew
from epochfs.sidecar.sampler.pace import skew_cap, walk_cap
from epochfs.sidecar.store.listings import Part


def _monte_carlo_tv(drawn: np.ndarray, target: np.ndarray, n: int, rng: np.random.Generator,
                    draws: int = 4000) -> float:
    counts = rng.multinomial(n, drawn, size=draws) / n
    return float(0.5 * np.abs(counts - target).sum(axis=1).mean())


def _zipf(folders: int, exponent: float) -> np.ndarray:
    p = 1.0 / np.arange(1, folders + 1) ** exponent
    return np.asarray(p / p.sum())


@pytest.mark.parametrize(("folders", "n"), [(3, 1), (10, 7), (200, 30), (200, 3000), (2000, 150)])
def test_sample_tv_is_the_mean_of_random_draws(folders: int, n: int) -> None:
    rng = np.random.default_rng(folders * 7919 + n)
    target = _zipf(folders, 1.3)
    drawn = rng.permutation(target)  # the same sizes, in other folders: far from the mix
    expected = sample_tv(list(drawn), list(target), n)
    assert expected == pytest.approx(_monte_carlo_tv(drawn, target, n, rng), rel=0.03)
    # Drawn from the target itself: de Moivre's closed form of a random sample's distance.
    assert sample_tv(list(target), list(target), n) == pytest.approx(_random_tv(list(target), n), rel=3e-3)


def test_the_largest_fair_sample_is_where_the_ratio_crosses_the_target() -> None:
    target = _zipf(500, 1.45)
    drawn = target.copy()
    drawn[:5] *= 0.2  # the five largest folders listed at a fifth of their share
    drawn /= drawn.sum()
    fair = largest_fair_sample(list(drawn), list(target), upto=1_000_000)
    assert 1 < fair < 1_000_000

    def ratio(n: int) -> float:
        return sample_tv(list(drawn), list(target), n) / sample_tv(list(target), list(target), n)

    assert ratio(fair) <= TV_TARGET < ratio(int(fair * 1.1) + 1)
    # Listed alike: any sample size is fair.
    assert largest_fair_sample(list(target), list(target), upto=50_000) == 50_000


def _spans(sizes: np.ndarray, listed: np.ndarray) -> list[SpanState]:
    spans = []
    for i, (size, got) in enumerate(zip(sizes.tolist(), listed.tolist(), strict=True)):
        prefix = f"f{i:05d}/"
        part = Part(i, prefix, "", None, after=f"{prefix}{got:06d}", done=got >= size)
        seg = Segment(part=part, span=i, listed=got)
        spans.append(SpanState(id=i, prefix=prefix, segments=[seg], listed=got, reached=True,
                               rest=float(size - got)))
    return spans


def _cap(spans: list[SpanState]) -> int | None:
    """The fetch order's cap on what the planner would say of these spans."""
    rest = {span.id: span.rest for span in spans}
    skew = listing_skew(spans, lambda span, seg: rest[span.id], ends_unknown=False)
    return walk_cap({"skew": skew, "fair_cap": fair_samples(spans, skew, ends_unknown=False)})


def test_thousands_of_zipf_folders_the_large_ones_listed_behind_hold_the_cap() -> None:
    """3,000 folders of Zipf 1.45 sizes (600k keys), every folder reached, the small ones listed
    whole and each of the large ones its first two pages (300 keys) with its size known: the cap
    the skew sets lets through only as many samples as stay within TV_TARGET of a random sample's
    distance, checked by drawing epochs of that size from the listed keys."""
    rng = np.random.default_rng(5)
    target = _zipf(3000, 1.45)
    sizes = np.maximum(1, np.round(target * 600_000)).astype(int)
    order = rng.permutation(3000)  # the large folders anywhere in key order
    sizes = sizes[order]
    listed = np.minimum(sizes, 300)
    spans = _spans(sizes, listed)
    cap = _cap(spans)
    assert cap is not None and cap >= 1
    whole = sizes / sizes.sum()
    drawn = listed / listed.sum()
    random_tv = _monte_carlo_tv(whole, whole, cap, rng)
    epoch_tv = _monte_carlo_tv(drawn, whole, cap, rng)
    assert epoch_tv <= 1.75 * random_tv, (cap, epoch_tv, random_tv)


def test_listed_alike_the_expected_distance_does_not_hold_the_cap() -> None:
    """Every folder listed at the same share of its size: the listed mix is the dataset's, so the
    expected distance of an epoch drawn from it is a random sample's and holds nothing."""
    target = _zipf(400, 1.2)
    sizes = np.maximum(10, np.round(target * 100_000)).astype(int)
    listed = np.maximum(1, sizes // 4)
    spans = _spans(sizes, listed)
    rest = {span.id: span.rest for span in spans}
    assert fair_samples(spans, listing_skew(spans, lambda span, seg: rest[span.id], ends_unknown=False),
                        ends_unknown=False) is None
    cap = _cap(spans)
    assert cap is None or cap > 1000


def test_a_listing_lopsided_past_the_skews_floor_holds_the_walk_below_three_samples() -> None:
    """1,500 folders of Zipf 1.8 sizes (400k keys, the largest holds half): the large folders'
    first pages listed, the small ones whole. Three samples drawn from that mix are far from the
    dataset's (three small folders, where a random sample of three holds the large one): the
    skew's cap stops at its floor of 3, the expected distance holds the walk below it."""
    rng = np.random.default_rng(11)
    sizes = np.maximum(1, np.round(_zipf(1500, 1.8) * 400_000)).astype(int)[rng.permutation(1500)]
    listed = np.minimum(sizes, 100)
    spans = _spans(sizes, listed)
    rest = {span.id: span.rest for span in spans}
    skew = listing_skew(spans, lambda span, seg: rest[span.id], ends_unknown=False)
    cap = _cap(spans)
    assert cap is not None and 1 <= cap < 3 <= (skew_cap(skew) or 0), (cap, skew)
    whole = sizes / sizes.sum()
    drawn = listed / listed.sum()
    assert _monte_carlo_tv(drawn, whole, cap, rng) <= 1.75 * _monte_carlo_tv(whole, whole, cap, rng)
    assert _monte_carlo_tv(drawn, whole, 3, rng) > TV_TARGET * _monte_carlo_tv(whole, whole, 3, rng)


def test_a_folder_outgrowing_the_typical_one_while_its_end_is_galloped_for_holds_one_sample() -> None:
    """A folder read into (its end not found) with more keys listed than the typical folder listed
    whole may hold any share: one sample, not the skew floor's three drawn from the small folders
    (1,500 folders of Zipf 1.8 sizes: 2.13x a random sample's TV at three); with every end found
    its size counts as any other's."""
    sizes = np.array([100_000] + [20] * 50)
    listed = np.array([300] + [20] * 50)
    spans = _spans(sizes, listed)
    rest = {span.id: span.rest for span in spans}
    skew = listing_skew(spans, lambda span, seg: rest[span.id], ends_unknown=True)
    fair = fair_samples(spans, skew, ends_unknown=True)
    assert skew == 1.0 and fair == 1
    assert walk_cap({"skew": skew, "fair_cap": fair}) == 1 < (skew_cap(skew) or 0)
    # Its end found: the sizes are known, the hold is the expected distance's.
    known = fair_samples(spans, listing_skew(spans, lambda span, seg: rest[span.id], ends_unknown=False),
                         ends_unknown=False)
    assert known is not None and known >= 1
