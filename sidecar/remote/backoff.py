"""Full-jitter backoff and the question "is this the store throttling?", one home for every caller.

Whoever waits before asking a store again (the downloader's retries, a throttled key put back,
a throttled discovery page or index header read again, a failed listing run, ``epochfs index``'s
spans) draws the pause the same way, AWS's "full jitter": ``uniform(0, bound)``, the bound
doubling from a first value up to a longest one. The jitter is what spreads a fleet: nodes
throttled at the same instant would otherwise ask again at the same instant (docs/scale.md, the
fleet model). The callers differ only in their bounds and in what makes the bound grow or start
over, which they keep: :func:`jitter_bound` for the n-th pause of a count (attempts, a key's
throttled answers), :class:`Backoff` for a bound carried from pause to pause, :func:`doubled`
for a caller that decides itself when to double (the listing thread's :func:`pause_bound
<epochfs.sidecar.listing.background.pause_bound>`).

:func:`is_throttled` answers for any exception, typed or a client library's own: the listing and
the index reader get errors some libraries leave untyped (a ``RemoteError`` around botocore's
``SlowDown``). The downloader decides from its one classifier
(:func:`epochfs.sidecar.download.failure_kind`) instead, without the libraries' rules: every
remote types the failures of its reads where they arise, and those rules import aiohttp and the
Azure SDK, which a sampler on S3 never loads.
"""

from __future__ import annotations

import random

from epochfs.sidecar.remote.errors import library_kind, translate

_LONGEST_EXPONENT = 1000
"""``2.0 ** n`` for n up to here is a finite float: a bound that overflows is infinite, then
capped, never an OverflowError, whatever the count."""


def doubled(bound: float, longest: float) -> float:
    """The bound after ``bound``: twice it, at most ``longest``."""
    return min(longest, bound * 2)


def jitter_bound(first: float, longest: float, n: int) -> float:
    """The bound of the ``n``-th pause (0 for the first): ``first * 2**n``, at most ``longest``."""
    return min(longest, first * 2.0 ** min(max(n, 0), _LONGEST_EXPONENT))


def full_jitter(bound: float, rng: random.Random | None = None) -> float:
    """A pause drawn uniformly from ``[0, bound]`` (``rng``: the module's generator when None)."""
    return (rng or random).uniform(0, bound)


class Backoff:
    """A full-jitter bound carried from pause to pause: ``first``, then doubled after each pause
    up to ``longest``."""

    def __init__(self, first: float, longest: float) -> None:
        if not 0 <= first <= longest:
            raise ValueError("need 0 <= first <= longest")
        self.first = first
        self.longest = longest
        self.bound = first
        """The bound of the next pause."""

    def pause(self, rng: random.Random | None = None) -> tuple[float, float]:
        """The next pause and the bound it was drawn under; the bound then doubles."""
        bound = self.bound
        self.bound = doubled(bound, self.longest)
        return full_jitter(bound, rng), bound


def is_throttled(exc: BaseException) -> bool:
    """Whether ``exc`` (a :class:`~epochfs.sidecar.remote.RemoteError` wrapping a request, or the
    request's own error) is the store throttling: a typed
    :class:`~epochfs.sidecar.remote.Throttled` in its chain, or an error of a client library
    that stands for one (:func:`~epochfs.sidecar.remote.errors.library_kind`)."""
    failure = translate(exc, library_kind)  # walks the causes: the first typed one decides
    return failure is not None and failure.throttled


__all__ = ["Backoff", "doubled", "full_jitter", "is_throttled", "jitter_bound"]
