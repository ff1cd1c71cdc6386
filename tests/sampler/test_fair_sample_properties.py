"""The fair sample's guarantees (docs/sampler.md, "A fair sample while the listing runs") over
random key spaces listed by the REAL listers while the sampler's fetch order draws from them:

1. **catch-up**: once a key is in the catalog, the pass hands out at most the candidates it had
   queued (:data:`~epochfs.sidecar.sampler.order.LISTING_REFILL`) further up the order before it:
   a key listed below the cursor is owed, never left for a later pass;
2. **the converged order**: once the listing is complete and the fetches catch up (within the
   candidates queued then), the first K keys fetched are the K lowest-ranked of the seed's order
   of the complete catalog (computed here from the keys), for every K, whatever order and speed
   the pages came in;
   both with the keys fetched early aside (at most ``EARLY_PICKS`` a run, all while the listing
   runs: :mod:`~epochfs.sidecar.sampler.earlypicks`), which folders of a few keys never have at
   the default ``WEIGHT_MIN``; the last test lowers it so they do;
3. **shards**: the shards' catalogs, and what each fetches, are disjoint and cover the dataset.

Key spaces (hypothesis): flat, equal or skewed class folders, nested sub-folders, many small
folders (listed as ranges of folders), mixed top folders, odd names. The in-memory paged remote is
listed by :class:`~epochfs.sidecar.listing.Lister` (planner, threads, commits) into a real
:class:`~epochfs.sidecar.store.Store`, from which :class:`~epochfs.sidecar.sampler.order.FetchOrder`
draws. The test holds every page request of the listers and lets them through one at a time, in a
random order, between random numbers of fetches (a page held for many fetches is a slow one); each
step waits for the page let through to be committed (a condition the listers signal), never on a
clock. A fetch is an admission (``store_helpers.put``); the cache holds every key, so a cache of
capacity K is "the first K keys fetched" (with fewer, the room's eviction decides what stays).
"""

from __future__ import annotations

import random
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_helpers import put

from epochfs.sidecar import keyorder
from epochfs.sidecar.listing import Lister, PagedSource
from epochfs.sidecar.listing.sinks import CatalogSink, ListedPage
from epochfs.sidecar.listing.span import Page, Span
from epochfs.sidecar.remote.base import ListedPage as RemotePage
from epochfs.sidecar.remote.testing import PagedMemoryRemote
from epochfs.sidecar.sampler.earlypicks import EARLY_PICKS
from epochfs.sidecar.sampler.order import LISTING_REFILL, FetchOrder
from epochfs.sidecar.store import Policy, Store

WAIT_LIMIT = 120.0
"""Seconds a step waits for the listers before the test fails (a hang, not a timing)."""
MAX_KEYS = 240
"""Keys of a key space at most: each fetch is an admission, and the file must stay fast."""
SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None
"""Caches on tmpfs where there is one: each admission fsyncs."""

NAMES = ["{i:06d}.bin", "img_{i}.png", "{h}.npy", "frame-{i:04d}.jpg", "x{i}", "ünï-{i:03d}",
         "s p a c e {i}.txt", "#{i}?=.dat", "%{i:x}+~!.bin", "A{i}", "{i}", "-{i}.-"]
"""File names, odd ones included (spaces, ``#``, ``?``, ``%``, non-ASCII, names that sort
before ``/``)."""


@st.composite
def key_spaces(draw: st.DrawFn) -> list[str]:
    """A random key space of one of the shapes the issue names."""
    shape = draw(st.sampled_from(["flat", "equal", "skewed", "nested", "many", "mixed"]))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    name = draw(st.sampled_from(NAMES))
    top = draw(st.sampled_from(["", "train/", "data set/ü/"]))
    keys: set[str] = set()

    def files(folder: str, n: int) -> None:
        for i in rng.sample(range(n * 20 + 1), n):
            keys.add(top + folder + name.format(i=i, h=f"{rng.getrandbits(40):010x}"))

    if shape == "flat":
        files("", rng.randint(1, MAX_KEYS))
    elif shape == "equal":
        size = rng.randint(1, 25)
        for f in range(rng.randint(2, 12)):
            files(f"class-{f}/", size)
    elif shape == "skewed":  # a few huge, many tiny, the big ones anywhere in key order
        for f in range(rng.randint(3, 24)):
            files(f"c{f:03d}/", min(150, max(1, int(rng.paretovariate(1.1) * 2))))
    elif shape == "nested":
        for f in range(rng.randint(2, 6)):
            for v in range(rng.randint(1, 5)):
                files(f"c{f}/v{v:02d}/", rng.randint(1, 12))
    elif shape == "many":
        for f in range(rng.randint(20, 120)):
            files(f"n{f:04d}/", rng.randint(1, 3))
    else:  # mixed top folders of very different sizes, a file beside them
        files("arrays/", rng.randint(1, 80))
        for f in range(rng.randint(1, 5)):
            files(f"train/k{f}/", rng.randint(1, 30))
        keys.add(top + "README.md")
    if draw(st.booleans()):  # folders whose names sort around '/' and odd characters
        keys.update(top + k for k in ("a-b/1", "a/b", "a.b/c d", "a b/#?", "Z/%20", "~/x"))
    out = sorted(keys)
    return sorted(rng.sample(out, MAX_KEYS)) if len(out) > MAX_KEYS else out


@dataclass
class _Ticket:
    """A page request a lister made, held until the test lets it through (then read)."""

    released: bool = False
    read: bool = False


@dataclass
class _Pacer:
    """The test's hand on the listers: which page arrives next, and when it is in the catalog."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    pending: list[_Ticket] = field(default_factory=list)
    mine: dict[int, _Ticket] = field(default_factory=dict)  # each lister thread's page
    gating: bool = False
    open_all: bool = False
    read: int = 0
    committed: int = 0
    ended: bool = False

    def arrive(self) -> None:
        """A lister asks for a page: it waits until the test lets it through."""
        with self.cond:
            if not self.gating or self.open_all:
                return
            ticket = _Ticket()
            self.pending.append(ticket)
            self.mine[threading.get_ident()] = ticket
            self.cond.notify_all()
            self.cond.wait_for(lambda: ticket.released or self.open_all)

    def page_read(self) -> None:
        with self.cond:
            self.read += 1
            ticket = self.mine.pop(threading.get_ident(), None)
            if ticket is not None:
                ticket.read = True
            self.cond.notify_all()

    def pages_committed(self, n: int) -> None:
        with self.cond:
            self.committed += n
            self.cond.notify_all()

    def wait(self, predicate: Callable[[], object], what: str) -> None:
        """Wait (holding ``cond``) until ``predicate`` holds; a hang fails the test instead."""
        assert self.cond.wait_for(predicate, WAIT_LIMIT), f"the listers did not {what}"


class _PacedRemote(PagedMemoryRemote):
    """The in-memory paged remote whose pages wait for the test (discovery's do not)."""

    def __init__(self, objects: dict[str, bytes], *, page: int, pacer: _Pacer) -> None:
        super().__init__(objects, page=page)
        self.pacer = pacer

    def list_page(self, prefix: str, *, start_after: str = "", token: str | None = None,
                  delimiter: bool = False, max_keys: int = 1000) -> RemotePage:
        self.pacer.arrive()
        return super().list_page(prefix, start_after=start_after, token=token, delimiter=delimiter,
                                 max_keys=max_keys)


class _CountedSource(PagedSource):
    """The real paged source; counts the pages it hands to the listers."""

    def __init__(self, remote: _PacedRemote, *, max_spans: int, pacer: _Pacer) -> None:
        super().__init__(remote, max_spans=max_spans)
        self.pacer = pacer

    def read_page(self, span: Span, after: str, max_keys: int) -> Page:
        page = super().read_page(span, after, max_keys)
        self.pacer.page_read()
        return page


class _CountedSink(CatalogSink):
    """The real catalog sink; says when pages are committed."""

    def __init__(self, store: Store, pacer: _Pacer) -> None:
        super().__init__(store)
        self.pacer = pacer

    def commit_pages(self, gen: int, pages: list[ListedPage], *, progress: str) -> list[int]:
        news = super().commit_pages(gen, pages, progress=progress)
        self.pacer.pages_committed(len(pages))
        return news


@dataclass
class Trace:
    """What one run listed and fetched: the complete catalog (key -> rank), the keys in the order
    they were handed out, where each step began in that list (the last step: the drain once the
    listing is complete), the step at whose start each key was first in the catalog, and the
    passes the order began after the first, and the keys it fetched early (drawn by their
    folder's size while the listing ran: :mod:`~epochfs.sidecar.sampler.earlypicks`)."""

    ranks: dict[str, int]
    handed: list[str]
    starts: list[int]
    visible: dict[str, int]
    passes: int
    early: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Run:
    """How one listing runs: the sampling seed, shard, the remote's page, listers, spans and the
    schedule of pages and fetches."""

    seed: int
    schedule: int
    page: int
    threads: int
    max_spans: int
    burst: int
    shard: tuple[int, int] = (0, 1)


RUNS = st.builds(Run, seed=st.integers(0, 2**31), schedule=st.integers(0, 2**32 - 1),
                 page=st.integers(3, 40), threads=st.integers(1, 4), max_spans=st.sampled_from([3, 8, 1024]),
                 burst=st.integers(0, 24))


class _Fetcher:
    """The sampler's side: a fetch order over the cache, each key it hands out admitted."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.listing = True
        """The listing thread's ``running``, as ``epochfs sample`` passes it to the order."""
        self.order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False,
                                inflight=lambda: 0, listing=lambda: self.listing)
        self.trace = Trace({}, [], [], {}, 0)
        self._seen_row = 0

    def step(self) -> None:
        """A new step: note the keys committed since the last."""
        self.trace.starts.append(len(self.trace.handed))
        for rowid, key in self.store._ix.query("SELECT rowid, key FROM catalog WHERE rowid > ?",
                                               (self._seen_row,)):
            self.trace.visible.setdefault(str(key), len(self.trace.starts) - 1)
            self._seen_row = max(self._seen_row, int(rowid))

    def fetch(self, n: int | None) -> None:
        """Up to ``n`` fetches (None: until the order has nothing to hand out)."""
        while n is None or n > 0:
            cand = self.order.next()
            if cand is None:
                return
            put(self.store, cand.key, 10)
            self.trace.handed.append(cand.key)
            n = None if n is None else n - 1


def _listed_and_fetched(keys: list[str], run: Run) -> Trace:
    """List ``keys`` with the real listers while a fetch order draws from the catalog (see the
    module doc), then drain the order once the listing is complete."""
    rng = random.Random(run.schedule)
    pacer = _Pacer()
    remote = _PacedRemote(dict.fromkeys(keys, b"x"), page=run.page, pacer=pacer)
    # Time here is the steps, not the clock: the order asks a catalog found empty again at once
    # (not after LISTING_WAIT/EXHAUSTED_WAIT seconds: keys arrive when the test lets a page
    # through), the planner's skew is computed at every commit (not once a second: the whole
    # listing takes less), and the first round of pages is always waited for (not for at most
    # FIRST_ROUND_WAIT seconds, which a slow machine would pass in the middle of a run).
    with (tempfile.TemporaryDirectory(dir=SCRATCH) as tmp,
          mock.patch("epochfs.sidecar.sampler.order.LISTING_WAIT", 0.0),
          mock.patch("epochfs.sidecar.sampler.order.EXHAUSTED_WAIT", 0.0),
          mock.patch("epochfs.sidecar.listing.planner.SKEW_EVERY", 0.0),
          mock.patch("epochfs.sidecar.sampler.order.FIRST_ROUND_WAIT", float("inf")),
          Store(Path(tmp) / "cache", create=True) as store):
        store.configure(Policy(capacity=1 << 30, keep_epochs=2, min_samples=1, in_use_seconds=60.0))
        stop = threading.Event()
        with Store(store.root) as listers_store:  # the listers' own, as in ``epochfs sample``
            lister = Lister(_CountedSink(listers_store, pacer),
                            _CountedSource(remote, max_spans=run.max_spans, pacer=pacer),
                            seed=run.seed, shard_index=run.shard[0], shard_count=run.shard[1],
                            threads=run.threads, stop=stop)
            prepared = lister.prepare()  # the discovery, not held
            outcome: dict[str, object] = {}

            def list_all() -> None:
                try:
                    outcome["report"] = lister.run(prepared=prepared)
                except BaseException as e:  # shown by the test, after the join
                    outcome["error"] = e
                finally:
                    with pacer.cond:
                        pacer.ended = True
                        pacer.cond.notify_all()

            fetcher = _Fetcher(store)
            pacer.gating = True
            thread = threading.Thread(target=list_all, name="test-lister", daemon=True)
            thread.start()
            try:
                while _next_page(pacer, rng):
                    fetcher.step()
                    fetcher.fetch(rng.randint(0, run.burst))
            finally:
                with pacer.cond:
                    pacer.open_all = True
                    pacer.cond.notify_all()
                if "report" not in outcome:
                    stop.set()
                thread.join(WAIT_LIMIT)
        assert "error" not in outcome, outcome["error"]
        assert getattr(outcome["report"], "complete", False), "the listing did not complete"
        fetcher.listing = False
        fetcher.step()  # the listing is complete: drain the order
        fetcher.fetch(None)
        fetcher.trace.ranks = {str(k): int(r) for k, r in store._ix.query("SELECT key, rank FROM catalog")}
        fetcher.trace.passes = fetcher.order.passes
        fetcher.trace.early = set(fetcher.order.early.keys)
    return fetcher.trace


def _next_page(pacer: _Pacer, rng: random.Random) -> bool:
    """Let one of the pages the listers wait for through, chosen at random, and wait for it to be
    committed; or, three steps in ten, none (fetches while every page is slow). False once the
    listing has ended."""
    with pacer.cond:
        pacer.wait(lambda: pacer.pending or pacer.ended, "ask for a page")
        if pacer.ended:
            return False
        if rng.random() < 0.7:
            ticket = pacer.pending.pop(rng.randrange(len(pacer.pending)))
            ticket.released = True
            pacer.cond.notify_all()
            pacer.wait(lambda: (ticket.read and pacer.committed >= pacer.read) or pacer.ended,
                       "commit the page let through")
    return True


def _check_catch_up(trace: Trace) -> None:
    """Property 1, at every step: a key seen in the catalog is handed out before the pass hands
    out more than the candidates it had queued then (at most LISTING_REFILL) further up the order
    than both the key and the cursor (the highest rank handed out): a key listed below the cursor
    is owed, one listed inside the queued candidates' ranks comes at the next refill, as owed;
    none is left for a later pass."""
    ranks, position = trace.ranks, {k: i for i, k in enumerate(trace.handed)}
    assert len(position) == len(trace.handed), "a key was handed out twice in one pass"
    assert trace.passes == 0, "a key listed late waited for a second pass"
    assert set(trace.handed) == set(ranks), "the pass did not fetch the whole catalog"
    assert len(trace.early) <= EARLY_PICKS
    assert all(position[k] < trace.starts[-1] for k in trace.early), "a key fetched early after the listing"
    cursors = []
    top = -(2**63) - 1
    for k in trace.handed:
        cursors.append(top)  # the cursor before hand-out i
        top = max(top, ranks[k])
    cursors.append(top)
    for key, s in trace.visible.items():
        start = trace.starts[s]
        bar = max(cursors[start], ranks[key])
        above = [k for k in trace.handed[start:position[key]] if ranks[k] > bar and k not in trace.early]
        assert len(above) <= LISTING_REFILL, (
            f"{key!r} was in the catalog at step {s} ({'below' if ranks[key] < cursors[start] else 'above'}"
            f" the cursor) but {len(above)} keys further up the order were handed out before it "
            f"(first: {above[:3]})")


def _walked(trace: Trace) -> Trace:
    """``trace`` without the keys fetched early: the walk's own fetches."""
    if not trace.early:
        return trace
    kept = [i for i, k in enumerate(trace.handed) if k not in trace.early]
    starts = [sum(1 for i in kept if i < s) for s in trace.starts]
    return Trace({k: r for k, r in trace.ranks.items() if k not in trace.early},
                 [trace.handed[i] for i in kept], starts, trace.visible, trace.passes)


def _caught_up(trace: Trace, ordered: list[str]) -> int:
    """Property 2: the catch-up point, from the listing's end on: the count of keys handed out
    from which every count is exactly the lowest-ranked keys of the complete catalog."""
    end = trace.starts[-1]
    got: set[str] = set(trace.handed)
    m = len(trace.handed)
    while m > end:
        got.discard(trace.handed[m - 1])
        if got != set(ordered[:m - 1]):
            break
        m -= 1
    return m


def _check_converged(trace: Trace, keys: list[str], run: Run) -> int:
    """Property 2: the catalog's ranks are the seed's order of the keys (computed here); once
    the listing is complete the fetches catch up, within the keys owed then and the candidates
    queued, and from there the first K keys fetched are the K lowest-ranked, for every K: the
    keys fetched early aside (they are extra, fetched first, so the first evicted)."""
    expected = {k: keyorder.rank(run.seed, k) for k in keys if keyorder.in_shard(k, *run.shard)}
    assert trace.ranks == expected, "the catalog is not the shard's keys with the seed's ranks"
    trace = _walked(trace)
    ordered = sorted(trace.ranks, key=lambda k: (expected[k], k))
    end = trace.starts[-1]
    cursor = max((expected[k] for k in trace.handed[:end]), default=-(2**63) - 1)
    # The candidates queued when the listing ended are at most LISTING_REFILL keys above its
    # cursor; past them every key below is owed and comes first.
    queued = [expected[k] for k in trace.handed[end:] if expected[k] > cursor][:LISTING_REFILL]
    bound = sum(1 for k in ordered if expected[k] <= max([cursor, *queued]))
    m = _caught_up(trace, ordered)
    assert m <= bound, (
        f"{m - end} keys fetched after the listing's end before the cache was a prefix of the "
        f"order, past the {len(queued)} queued above its cursor and the keys below them")
    assert trace.handed[m:] == ordered[m:], "past the catch-up the fetches left the seed's order"
    return m


SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(keys=key_spaces(), run=RUNS)
def test_a_key_listed_late_is_owed_and_fetched_before_the_pass_goes_further(keys: list[str],
                                                                            run: Run) -> None:
    trace = _listed_and_fetched(keys, run)
    _check_catch_up(trace)
    _check_converged(trace, keys, run)


@SETTINGS
@given(keys=key_spaces(), run=RUNS, other=st.integers(0, 2**32 - 1), capacity=st.integers(0, MAX_KEYS))
def test_the_cache_converges_to_the_seeds_order_whatever_the_pages_order_and_speed(
        keys: list[str], run: Run, other: int, capacity: int) -> None:
    first = _listed_and_fetched(keys, run)
    again = _listed_and_fetched(keys, Run(run.seed, other, run.page, run.threads, run.max_spans,
                                          max(1, run.burst // 2)))
    m = max(_check_converged(first, keys, run), _check_converged(again, keys, run))
    first, again = _walked(first), _walked(again)
    # A cache of capacity K, K past both catch-ups: the walk's fetches, the early keys aside.
    for trace in (first, again):
        ordered = sorted(trace.ranks, key=lambda k: (trace.ranks[k], k))
        k = max(m, min(capacity, len(ordered)))
        assert set(trace.handed[:k]) == set(ordered[:k])


@SETTINGS
@given(keys=key_spaces(), run=RUNS)
@mock.patch("epochfs.sidecar.listing.estimates.WEIGHT_MIN", 4)
def test_keys_fetched_early_leave_the_catch_up_and_the_converged_order_to_the_walk(
        keys: list[str], run: Run) -> None:
    """Folders of four keys or more drawn by their size while the listing runs (the default is
    1,000): the walk still catches up and converges, the keys fetched early aside."""
    trace = _listed_and_fetched(keys, run)
    _check_catch_up(trace)
    _check_converged(trace, keys, run)


@mock.patch("epochfs.sidecar.listing.estimates.WEIGHT_MIN", 4)
def test_a_large_folder_listed_behind_its_size_has_keys_fetched_early_and_the_walk_converges() -> None:
    """One folder of 150 keys beside 30 of three (the random key spaces above may have none whose
    size is known while it is listed behind it): keys of it are fetched early, and the walk still
    catches up and converges."""
    keys = [f"big/{i:04d}.bin" for i in range(150)] + [f"s{j:02d}/{i}.x" for j in range(30) for i in range(3)]
    for schedule in range(3):
        run = Run(seed=3, schedule=schedule, page=10, threads=1, max_spans=1024, burst=3)
        trace = _listed_and_fetched(keys, run)
        assert trace.early and all(k.startswith("big/") for k in trace.early), trace.early
        _check_catch_up(trace)
        _check_converged(trace, keys, run)


@pytest.mark.long
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=key_spaces(), run=RUNS, count=st.integers(2, 4))
def test_shards_are_disjoint_and_cover_the_dataset(keys: list[str], run: Run, count: int) -> None:
    fetched: list[set[str]] = []
    for index in range(count):
        shard = Run(run.seed, run.schedule + index, run.page, run.threads, run.max_spans, run.burst,
                    (index, count))
        trace = _listed_and_fetched(keys, shard)
        _check_catch_up(trace)
        _check_converged(trace, keys, shard)
        fetched.append(set(trace.handed))
    assert sum(map(len, fetched)) == len(set().union(*fetched)), "two shards fetched one key"
    assert set().union(*fetched) == set(keys)
