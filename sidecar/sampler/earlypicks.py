"""Keys drawn by their folder's estimated share while the listing runs ("early picks").

The fetch order walks the rank order of the keys listed so far (:mod:`.order`), so a folder is
drawn by its keys *listed*, not by its size: 2,000 folders of Zipf 2.0 sizes, 61% of the keys in
one, had 0.6% of that folder listed when epoch 0 was cut, and epoch 0's one sample missed it in
27 of 28 sampling orders (a random key misses it 39% of the time). The listing reports the
largest folders whose size it knows and whose keys are listed behind it (``weights``, at most
32: :func:`~epochfs.sidecar.listing.estimates.weighed_spans`). The rank order is a uniform random
order, so the lowest rank among a folder's listed share ``c`` is about ``1 / c`` times as far up
the order as the lowest rank over the whole folder: a listed key's rank times ``c`` (relative to
the listed share of everything else) behaves as a rank over the whole folder. A paced refill
with nothing owed merges the walk's rows with the weighed folders' lowest-ranked listed keys in
that scaled order, under the pace, the fair cap and
:data:`~epochfs.sidecar.sampler.order.LISTING_REFILL` together: the keys of a weighed folder
that come so before the walk's next are fetched early (:meth:`EarlyPicks._draw`); and a folder
short of its estimated share of the samples by more than a random sample's spread gets its
lowest-ranked listed keys in place of owed keys (:meth:`EarlyPicks._top_up`). Only folders listed
well behind everything else are weighed (:data:`LAG`), and only while the cache holds under
:data:`EARLY_BELOW` samples.

They are fetched early, nothing else: the cursor does not move for them and the walk comes to
them later (cached by then: passed over), at most :data:`EARLY_PICKS` a run, none once the
listing has ended. So, once the listing is complete, what the walk fetched converges to the
order of the whole catalog, and the early keys, fetched while the listing ran, are among the
first evicted once the cache is full (docs/sampler.md). A folder whose size is over-estimated is
over-drawn by as much, within those bounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Mapping
from typing import Any

from epochfs.sidecar.store import Candidate, Store

EARLY_PICKS = 1024
"""Keys a sampler run fetches early at most: the converged order's excess, bounded."""
TOP = 2**63
"""Ranks are signed 64-bit: a rank's point in [0, 1) is ``(rank + TOP) / 2 TOP``."""


def _point(rank: int) -> float:
    return (rank + TOP) / (2 * TOP)


LAG = 0.5
"""How far behind the rest a folder's listing must be for it to be drawn by its size: its listed
share of its estimate (over the rest's, ``c``) under this. Folders listed alike are drawn by the
keys listed (the walk's draw is theirs already), and the largest estimates of equal folders are
the over-estimated ones: drawn by them, 100 equal folders' epoch of 3,528 samples was 2.49x a
random sample's folder-mix distance. The scale goes from ``c`` (drawn by its size) at ``LAG / 2``
and below to 1 (drawn by its keys listed) at ``LAG`` continuously (:func:`_scale`): with a step
at ``LAG``, two equal folders listed at 49% and 51% of the rest's rate were drawn 2:1."""


def _scale(c: float) -> float:
    """The scale of a folder's ranks whose listed share is ``c`` times the rest's (:data:`LAG`)."""
    low = LAG / 2
    if c <= low:
        return c
    if c >= LAG:
        return 1.0
    return low + (1.0 - low) * (c - low) / (LAG - low)


def _number(value: object) -> int:
    """A count of the listing's record as an int (0 where it is not one)."""
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return 0


def _under(prefix: str) -> tuple[str, str]:
    """The keys of the folder ``prefix`` as a range [lo, hi)."""
    return prefix, prefix + "\U0010ffff"


def _weights(known: Mapping[str, Any]) -> list[tuple[str, float, int, float]]:
    """(prefix, scale, keys listed, share of the samples) of each weighed folder listed behind
    the rest: the scale :func:`_scale` of its listed share over the listed share of the folders
    not weighed, the share its estimated size's, as far as the scale draws by it. Entries that do
    not parse are left."""
    entries = known.get("weights")
    estimated, listed_all = _number(known.get("estimated")), _number(known.get("listed"))
    parsed = []
    for w in entries if isinstance(entries, list) else []:
        try:
            prefix, listed, total = str(w[0]), int(w[1]), int(w[2])
        except (TypeError, ValueError, IndexError, KeyError, OverflowError):
            continue
        if prefix and 0 < listed < total < estimated and listed < listed_all:
            parsed.append((prefix, listed, total))
    # Against the folders not weighed: several large folders may lag alike (2,000 folders of Zipf
    # 2.0 sizes had epoch 0 in the largest in 3 of 6 orders with each folder against everything
    # else, 6 of 6 against the folders not weighed with a step at LAG); where nothing else is
    # listed, each against the other weighed ones.
    rest_listed = listed_all - sum(w[1] for w in parsed)
    rest_total = estimated - sum(w[2] for w in parsed)
    out = []
    for prefix, listed, total in parsed:
        if rest_listed > 0 and rest_total > 0:
            rest = min(1.0, rest_listed / rest_total)
        else:
            rest = min(1.0, (listed_all - listed) / (estimated - total))
        c = listed / total / rest
        scale = _scale(c)
        if scale < 1.0:
            out.append((prefix, scale, listed, total * c / scale / estimated))
    return out


EARLY_BELOW = 2_000
"""Samples cached from which nothing more is drawn early: the early epochs (tens to hundreds of
samples) are those a lopsided listing skews, and past a few thousand samples a random sample's
folder mix is so near the dataset's that a folder's estimate, not its size, is what early keys
would follow (100 equal folders: an epoch of 3,528 samples at 2.49x a random sample's distance;
nested folders, one of 6,001 at 2.11x). Counting a folder's samples for a top-up reads as many
index entries as it holds, few below this."""


class EarlyPicks:
    """The early keys of one sampler run: those drawn, waiting to be handed out, and those handed."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._waiting: list[tuple[int, Candidate]] = []
        """Drawn and not handed out yet, the lowest scaled rank last (popped)."""
        self.keys: set[str] = set()
        """Keys handed out early in this run (at most :data:`EARLY_PICKS`): the order passes them
        over where they come up again as owed, once cached (:meth:`.FetchOrder.next`)."""

    @property
    def room(self) -> int:
        """Keys that may still be drawn early in this run (those waiting count)."""
        return EARLY_PICKS - len(self.keys) - len(self._waiting)

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def refill(self, rows: list[tuple[int, Candidate]], *, pace: int | None, left: int | None, limit: int,
               owed: int, known: Mapping[str, Any], out: Mapping[str, object], busy: Callable[[str], bool],
               inflight: int) -> list[tuple[int, Candidate]]:
        """A paced refill's early keys, and the walk's ``rows`` left after them: the scaled draw
        (:meth:`_draw`) where the cap holds (``left``, None: no cap) and no key is ``owed``, then
        the top-up (:meth:`_top_up`); ``limit``: the refill's walk rows at most, ``pace``: the
        highest rank the walk may reach (None: any), ``known``: the listing's ``listing_known``,
        ``out``: keys handed out whose downloads may not have ended. Nothing while no folder is
        weighed, no room is left in the run or the cache holds :data:`EARLY_BELOW` samples (one
        read of the store, none where no folder is weighed)."""
        weights = _weights(known)
        if not weights or self.room <= 0:
            return rows
        cached, counts = self.store.cached_under([_under(p) for p, *_ in weights], below=EARLY_BELOW)
        if cached >= EARLY_BELOW:
            return rows
        catalog = _number(known.get("listed"))
        if left is not None and not owed:
            rows = self._draw(rows, weights, pace=TOP - 1 if pace is None else pace, left=limit,
                              catalog=catalog, out=out, busy=busy)
        return self._top_up(rows, weights, counts, cached=cached, budget=limit, catalog=catalog, out=out,
                            busy=busy, inflight=inflight, owed=owed if left is None else min(left, owed),
                            cap=left)

    def drop(self) -> None:
        """Forget the keys waiting: the listing has ended, and a key fetched early is fetched
        while it runs (once it is complete the walk's order is the whole catalog's)."""
        self._waiting.clear()

    def pop(self, busy: Callable[[str], bool], out: Container[str]) -> tuple[int, Candidate] | None:
        """The next early key that is not busy, handed out (``out``) or cached, counted as handed
        out (None: none waits). A key drawn may be owed too (listed below the cursor): the order
        may hand it out as owed first."""
        while self._waiting:
            rank, cand = self._waiting.pop()
            if not busy(cand.key) and cand.key not in out and not self.store.cached_among([cand.key]):
                self.keys.add(cand.key)
                return rank, cand
        return None

    def _draw(self, rows: list[tuple[int, Candidate]], weighed: list[tuple[str, float, int, float]], *,
              pace: int, left: int, catalog: int, out: Container[str],
              busy: Callable[[str], bool]) -> list[tuple[int, Candidate]]:
        """Merge the walk's ``rows`` (rank order, under ``pace``) with the weighed folders' keys
        by scaled rank (the module doc), ``left`` in all at most: keep the early keys that come
        before the walk's next (handed out first, :meth:`pop`) and return the walk's rows that
        are left, a prefix of ``rows`` (each walk row counts at the highest scaled rank of the
        rows up to it: the cursor never passes a row it did not offer)."""
        weights = [(p, c, listed) for p, c, listed, _ in weighed]
        room = min(left, self.room)
        if room <= 0:
            return rows

        def share(key: str) -> float:
            return next((c for p, c, _ in weights if key.startswith(p)), 1.0)

        bar = _point(pace)
        drawn: list[tuple[float, int, int, int, Candidate]] = []
        high = 0.0
        for i, (rank, cand) in enumerate(rows):
            high = max(high, _point(rank) * share(cand.key))
            drawn.append((high, 0, i, rank, cand))
        walk_keys = {cand.key for _, cand in [*rows, *self._waiting]}
        for prefix, c, listed in weights:
            below = min(TOP - 1, int(bar / c * 2 * TOP) - TOP)  # scaled under the bar
            # Read by the index that passes fewer rows: the folder's listed keys, or the order's
            # below ``below`` (a folder of 300k listed keys took 170 ms a look by its keys).
            by_key = listed < catalog * min(1.0, bar / c)
            for rank, cand in self.store.folder_lowest(*_under(prefix), below=below, limit=room + 4,
                                                       by_key=by_key):
                if cand.key in out or cand.key in walk_keys or cand.key in self.keys or busy(cand.key):
                    continue
                drawn.append((_point(rank) * c, 1, 0, rank, cand))
        drawn.sort(key=lambda d: d[:3])
        early: list[tuple[int, Candidate]] = []
        walk = 0
        for scaled, kind, i, rank, cand in drawn:
            if len(early) + walk >= left or scaled > bar:
                break
            if kind == 0:
                walk = i + 1
            elif len(early) < room:
                early.append((rank, cand))
        if early:
            cached = self.store.cached_among([cand.key for _, cand in early])
            self._waiting.extend(reversed([e for e in early if e[1].key not in cached]))
        return rows[:walk]

    def _top_up(self, rows: list[tuple[int, Candidate]], weighed: list[tuple[str, float, int, float]],
                counts: list[int], *, cached: int, budget: int, catalog: int, out: Mapping[str, object],
                busy: Callable[[str], bool], inflight: int, owed: int,
                cap: int | None) -> list[tuple[int, Candidate]]:
        """Keys of the weighed folders whose samples (cached, in flight, queued) fall short of
        their estimated share of the samples there will be once this refill is handed out
        (``counts``: each folder's samples cached, of ``cached`` in all; the
        walk's ``rows`` up to ``budget``, the ``owed`` keys the cap lets through) by a whole sample
        and by a random sample's spread (its count's standard deviation) or more: their
        lowest-ranked listed keys, drawn early before the walk's ``rows``
        (trimmed to the budget left) and the owed keys, which they displace under the cap (``cap``:
        the keys it lets through now, None: no cap). The scaled draw (:meth:`_draw`) takes a
        folder's keys only while nothing is owed, and what is owed is drawn by the keys listed:
        2,000 folders of Zipf 2.0 sizes, 61% of the keys in one, had 50-57% of epochs of 100-230
        samples in it, 2.1-2.4x a random sample's folder-mix distance. Within the spread, equal
        folders were stratified: their samples taken from the keys listed first (a folder's first
        pages), 1.31x a random sample's in-folder spread where it was 1.20x."""
        shares = [(p, share, listed) for p, _, listed, share in weighed]
        free = min(max(budget, cap or 0) - len(self._waiting), self.room)
        if free <= 0:
            return rows
        after = cached + inflight + max(budget, len(rows) + len(self._waiting) + owed)
        running = [k for k in out if busy(k)]
        waiting = {cand.key for _, cand in self._waiting}
        picks: list[tuple[int, Candidate]] = []
        for (prefix, share, listed), have in zip(shares, counts, strict=True):
            have += sum(k.startswith(prefix) for k in running)
            have += sum(c.key.startswith(prefix) for _, c in [*rows, *self._waiting, *picks])
            short = int(share * after) - have
            if short < max(1.0, math.sqrt(after * share * (1.0 - share))):
                continue  # within a random sample's spread: topped up, equal folders were stratified
            need = min(short, free - len(picks))
            # Read by the index that passes fewer rows: the folder's listed keys, or the order's
            # from its start (the samples cached, then a row of the folder in catalog / listed).
            by_key = listed < cached + (need + 8) * catalog / max(1, listed)
            for rank, cand in self.store.folder_lowest(*_under(prefix), below=TOP - 1, limit=need + 8,
                                                       by_key=by_key):
                if len(picks) >= free or need <= 0:
                    break
                if cand.key in out or cand.key in self.keys or cand.key in waiting or busy(cand.key):
                    continue
                picks.append((rank, cand))
                need -= 1
        if not picks:
            return rows
        taken = {cand.key for _, cand in picks}
        rows = [r for r in rows if r[1].key not in taken][:max(0, budget - len(self._waiting) - len(picks))]
        self._waiting[:0] = sorted(picks, key=lambda p: -p[0])  # popped from the end: lowest rank first
        return rows
