"""How fast the fetch order's walk may go while the first listing runs (:meth:`.order.FetchOrder._pace`).

Pure functions of what the listing knows (``listing_known``): the pace's rate (:data:`LEAD`, held
back while the listed keys are lopsided: :func:`spread_factor`) and the cap on samples handed out
(:func:`walk_cap`, :func:`skew_cap`), so the first keys listed do not make up the early epochs
(docs/sampler.md, "A fair sample while the listing runs"). The sampler imports nothing of the
listing at start-up: the listing's own copy of :data:`FAIR_SPREAD` is checked equal by a test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LEAD = 4.0
"""While a listing runs, the pass goes no further up the order than LEAD times the share of the
whole (estimated) dataset it has fetched, plus :data:`PACE_START` keys' worth: it fetches what
is listed at no more than LEAD times a fair sample's rate, instead of all of the first keys
listed. Once the listing has seen 1/LEAD of the dataset the pace no longer holds it back."""
PACE_START = 1000
"""Keys the pace allows before any is fetched (so epoch 0 has samples within seconds)."""
SKEW_HOLD = 0.3
"""The listing's skew (:meth:`~epochfs.sidecar.listing.planner.Planner.progress`: how far the mix of
the keys listed so far is from the dataset's, 0 to 1) at which the pace holds the walk to
:data:`SKEW_FLOOR` of its rate; at 0 the pace is :data:`LEAD` alone."""
SKEW_FLOOR = 0.05
FAIR_SPREAD = 1.8
"""How far from the dataset's folder mix a uniform random sample of n keys is, times sqrt(n): about
1.2 over ten equal folders, 0.9 over six unequal ones, 4 over a hundred. A sample drawn from keys
listed ``skew`` away from the dataset's mix is no nearer than ``skew``, so while the listing is
lopsided the walk takes at most ``(FAIR_SPREAD / skew) ** 2`` samples (:func:`skew_cap`): as
many as keep the epochs within about twice a random sample's distance. The skew is measured over
the planner's pieces (folders, parts of them), finer than any folder mix, so the cap errs on the
safe side; over many folders of known sizes it comes divided by a random sample's spread over
them in units of ten folders' (:func:`~epochfs.sidecar.listing.skew.random_spread`), as a random
sample over a thousand folders is ten times as far from their mix as one over ten."""

def spread_factor(skew: float) -> float:
    """The share of :data:`LEAD` the pace allows while the listed keys' mix is ``skew`` away from
    the dataset's. What is fetched stays in the epochs, so the samples fetched while the listing
    had read only the first keys of a flat bucket, or the small folders whole beside the first page
    of a large one, outweighed the later, fairer ones for the rest of the run (measured: the flat
    key space's first tenth listed a third before the rest was reached, and made half of epochs
    0-2); fetching slowly while the listing is lopsided and faster as it spreads keeps the epochs
    nearer what the listing will show."""
    return max(SKEW_FLOOR, 1.0 - skew / SKEW_HOLD)


def walk_cap(known: Mapping[str, Any]) -> int | None:
    """The samples the walk may have handed out while the listing runs (None: any): the samples
    an epoch drawn from the listed keys may hold (``fair_cap``, at least one: the planner's
    :func:`~epochfs.sidecar.listing.skew.epoch_cap`, its expected distance at the scales such an
    epoch resolves, known where the spans' sizes are), else the skew's cap (:func:`skew_cap`).
    While a span is not reached (:func:`unreached_share`) the listed keys count as off by all
    of them, the skew's floor (``skew_cap(1.0)``, 3 samples), whatever else is known: the
    planner's sizes leave such a span out, and it may hold most of the data."""
    unreached = unreached_share(known) > 0.0
    cap = skew_cap(1.0 if unreached else min(1.0, float(known.get("skew") or 0.0)))
    fair = known.get("fair_cap")
    if fair is None:
        return cap
    held = max(1, int(fair))
    return held if cap is None or not unreached else min(cap, held)


def skew_cap(skew: float) -> int | None:
    """The samples the walk may have handed out while the listing's keys are ``skew`` away from the
    dataset's mix (None: no cap). The pace's rate (:data:`LEAD`, :func:`spread_factor`) grows with
    what was fetched, so it lets a lopsided listing's keys through at a steady share for as long
    as the listing runs; what was fetched then stays in every later epoch. Measured with an
    offline model of the fetch order over a flat bucket of 100k keys whose listing was 0.3 from
    its deciles' mix at 2 s and 0.07 at 4 s: 429 samples at 4 s, 1.58x a random sample's TV, and
    the epochs 1.3-1.7x for the rest of the listing; with the cap 229, 1.15x, then 0.9-1.1x."""
    if skew <= 0.0:
        return None
    return int((FAIR_SPREAD / skew) ** 2)


def unreached_share(known: Mapping[str, Any]) -> float:
    """The share of the listing's spans no page has reached yet, once the first round's wait is
    over (at most :data:`FIRST_ROUND_WAIT` seconds; the fetch order holds the walk before it).
    Any share holds the walk at the skew's floor (:func:`walk_cap`): such a span's size is
    unknown, not the reached ones' average. One folder of 92% of the keys beside 300 folders of
    3 keys, its first page among the first round's last 19 of 301, let 813 samples through when
    each unreached span counted as the reached ones on average (the skew their share, 0.063),
    every one from the small folders: epochs of 138-1,133 samples 7-12.5x a random sample's
    folder-mix distance, 7-10.8x still once the listing was complete; held, within 1.7x
    (docs/sampler.md, "A fair sample while the listing runs", point 5)."""
    spans = int(known.get("spans") or 0)
    reached = int(known.get("spans_reached", spans))
    return max(0.0, 1.0 - reached / spans) if spans else 0.0
