"""The expected folder-mix distance of a sample drawn from a lopsided mix: how far an epoch fetched
from the keys listed so far is likely to be from the dataset's mix, beside a uniform random
sample's of the same size. The listing's skew (:mod:`.skew`) holds the fetch order's cap to the
sample sizes at which the first stays within :data:`TV_TARGET` times the second.

Pure functions of floats, no numpy: the listing's process computes them about once a second
(:data:`.planner.SKEW_EVERY`) over at most the top folders of the key space."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

TV_TARGET = 1.6
"""The expected TV distance of an epoch drawn from the listed mix, over a random sample's of the
same size, that the cap holds to: below the issue's 2x, as the bench compares each epoch with the
median of random draws and an epoch is one draw (its distance spreads around its mean by some
tenths of it at tens of samples)."""

NORMAL_FROM = 9.0
"""A binomial count's variance from which its mean absolute deviation is taken from its normal
limit (a standard deviation of 3 or more: within a few per cent); below, summed exactly."""

PRECISION = 1.1
"""How close (a factor) :func:`largest_fair_sample` brackets the largest fair sample size."""

TAIL_SDS = 12.0
"""Standard deviations past a count's mean after which the exact sum stops (the rest weighs less
than 1e-30)."""


def sample_tv(drawn: Sequence[float], target: Sequence[float], n: int,
              weights: Sequence[int] | None = None) -> float:
    """The expected total-variation distance between the folder mix of ``n`` keys drawn from
    folders of shares ``drawn`` and the mix ``target``: half the sum over folders of E|X/n - t|,
    X ~ Binomial(n, q) (the multinomial's marginals; the sum of their mean deviations is the
    mean of the sum). ``drawn`` equal to ``target`` gives a random sample's distance.
    ``weights``: how many folders each (drawn, target) pair stands for (:func:`grouped`)."""
    if n <= 0:
        return 1.0
    each = weights if weights is not None else [1] * len(drawn)
    return 0.5 * sum(w * _mean_abs(n, q, t) for q, t, w in zip(drawn, target, each, strict=True)) / n


def grouped(pairs: Sequence[tuple[float, float]]) -> tuple[list[float], list[float], list[int]]:
    """Shares ``(drawn, target)`` of folders given as counts (keys listed, keys in all), as the
    shares of each distinct pair and how many folders have it: the many small folders of a Zipf
    key space, listed whole, are a few distinct pairs (3,000 folders of 600k keys: some hundreds),
    and each evaluation is a pass over the pairs."""
    drawn_total = sum(k for k, _ in pairs)
    target_total = sum(n for _, n in pairs)
    counts: dict[tuple[float, float], int] = {}
    for pair in pairs:
        counts[pair] = counts.get(pair, 0) + 1
    return ([k / drawn_total for k, _ in counts], [n / target_total for _, n in counts],
            list(counts.values()))


def _mean_abs(n: int, q: float, t: float) -> float:
    """E|X - n t|, X ~ Binomial(n, q)."""
    a = n * t
    if q <= 0.0:
        return a
    if q >= 1.0:
        return abs(n - a)
    if q > 0.5:  # n - X ~ Binomial(n, 1 - q): the sum below stays short
        q, a = 1.0 - q, n - a
    mean = n * q
    var = mean * (1.0 - q)
    if var >= NORMAL_FROM:
        sd = math.sqrt(var)
        d = mean - a
        folded = sd * math.sqrt(2.0 / math.pi) * math.exp(-d * d / (2.0 * var))
        return folded + d * math.erf(d / (sd * math.sqrt(2.0)))
    # E|X - a| = (E X - a) + 2 E[(a - X)+], the second a sum over the counts below a, which
    # past TAIL_SDS standard deviations above the mean weigh nothing.
    top = min(math.floor(a), n, int(mean + TAIL_SDS * math.sqrt(var) + 30))
    log_p = n * math.log1p(-q)
    step = math.log(q) - math.log1p(-q)
    below = 0.0
    for x in range(top + 1):
        below += math.exp(log_p) * (a - x)
        log_p += math.log(n - x) - math.log(x + 1) + step if x < n else 0.0
    return (mean - a) + 2.0 * below


def largest_fair_sample(drawn: Sequence[float], target: Sequence[float], *, upto: int,
                        ratio: float = TV_TARGET, weights: Sequence[int] | None = None) -> int:
    """The largest sample size up to ``upto`` at which keys drawn from ``drawn`` are expected
    within ``ratio`` times a random sample's folder-mix distance from ``target`` (0: not even
    one key). The ratio grows with n (a random sample's distance falls as 1/sqrt(n), the listed
    mix's stays at its own distance), so a bisection over log n finds it in about a dozen
    evaluations, each a pass over the folders. Found within :data:`PRECISION` (the cap it sets
    need not be closer than that)."""
    def fair(n: int) -> bool:
        random_tv = sample_tv(target, target, n, weights)
        return random_tv <= 0.0 or sample_tv(drawn, target, n, weights) <= ratio * random_tv

    return largest_true(fair, upto)


def largest_true(fair: Callable[[int], bool], upto: int) -> int:
    """The largest n up to ``upto`` with ``fair(n)``, found within :data:`PRECISION` by bisection
    over log n, ``fair`` true up to some n and false past it (0: not even at 1)."""
    if upto < 1 or not fair(1):
        return 0
    if fair(upto):
        return upto
    lo, hi = 1, upto  # fair(lo), not fair(hi)
    while hi - lo > 1 and hi > lo * PRECISION:
        mid = max(lo + 1, int(math.sqrt(lo * hi)))
        if fair(mid):
            lo = mid
        else:
            hi = mid
    return lo


__all__ = ["TV_TARGET", "grouped", "largest_fair_sample", "largest_true", "sample_tv"]
