"""Parallel listers that write the catalog page by page while the sampler already fetches from it.

The spans of a :class:`~epochfs.sidecar.listing.sources.Source` wait in one queue; each of
``threads`` listers takes a span, lists ONE page of it, commits the page's rows together with the
span's resume point (:meth:`~epochfs.sidecar.store.listings.Listings.commit_page`), and puts the span
back at the end of the queue. So every span advances at the same page rate whatever the number of
threads: with one span per class folder, the catalog holds the first keys of every class after
the first round of pages, and the sampler, which draws in rank order from what is listed, fetches
from every class from its first second on.

A listing is a generation: rows it sees carry it, and when it reaches the end the rows it did not
see (keys deleted from the remote) are dropped. A listing interrupted by a stop or a crash resumes
from each span's committed resume point at the next start (:meth:`Lister.run`); at most the pages
in flight when it stopped (one per thread) are listed twice.

``epochfs sample`` gives the listers a Store of their own (a second connection to the index, with
its own lock): the sampler's reads (the fetch order's candidates, the cache's bytes, the stats) run
beside a page commit (WAL), where with one connection and one lock per process they waited for it.
Writers still take turns: the sampler's admitter and a page commit serialize on the index's write
lock. While the sampler fetches (``yield_to``), the listers hold the index at most ``INDEX_SHARE``
of the time: a page's commit holds the write lock for a thousand rows' inserts, and committing back
to back, four listers held it ~85% of the time and the sampler fetched a tenth of what it fetches
once the listing is done (docs/listing.md, "The listing and the fetches on one CPU").

Where the pages go is a :class:`~.sinks.ListingSink`: the cache's catalog (:class:`~.sinks.
CatalogSink`, the sampler's listing) or an index file (:class:`~.sinks.IndexSink`, ``epochfs
index``), so both list with the same listers and planner: a flat bucket, one span, lists on every
thread either way.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from epochfs.sidecar.listing.clashes import CatalogClashes, ClashFinder, Edges
from epochfs.sidecar.listing.filter import CatalogReport, PageFilter, rows_left_out
from epochfs.sidecar.listing.paged import PagedSource
from epochfs.sidecar.listing.pending import PendingPage
from epochfs.sidecar.listing.planner import FULL_PAGE, Planner, Segment
from epochfs.sidecar.listing.refused import Refusals
from epochfs.sidecar.listing.sinks import CatalogSink, ListedPage, ListingSink
from epochfs.sidecar.listing.skiplog import SkippedKeys
from epochfs.sidecar.listing.sources import Source
from epochfs.sidecar.listing.span import Page
from epochfs.sidecar.remote import RemoteError
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.listings import PageRows, Part
from epochfs.sidecar.store.stats import LIMIT_MARK
from epochfs.torchclient.globs import KeyFilter

log = logging.getLogger("epochfs.catalog")

INDEX_SHARE = 0.5
"""While the sampler fetches, the most of the time the listers' page commits hold the index: after
a commit that held it ``t`` seconds no lister commits for ``t * (1 / INDEX_SHARE - 1)`` more, so the
sampler's threads find it free at least as long as a commit held it. When the sampler is not
fetching (the cache full, schedule mode waiting for the complete listing, nothing to fetch) the
listers commit back to back."""

FIRST_ROUND_LISTERS = 16
"""Listers while the first round's first pages are read (a 100-key page of every span), where
there are more spans than ``threads``: small pages that round trips, not the CPU, bound; over
2,000 folders four listers took 8-9 s, and the epochs cut meanwhile held a sample or two drawn
from what the round had reached. The extra listers read nothing else and end once every span's
first page is taken; not for ``full_pages`` (``epochfs index``: no epochs to make fair, and
``--list-threads`` its only bound on the request rate)."""


NO_LIMIT = 2**62
"""The object limit of a lister given none."""


def _split_limit(name: str) -> tuple[str, int | None]:
    """(the name without its object limit, the limit or None)."""
    base, mark, rest = name.rpartition(LIMIT_MARK)
    if mark and rest.endswith("]") and rest[:-1].isdigit():
        return base, int(rest[:-1])
    return name, None


class Lister:
    """Lists ``source`` into ``store``'s catalog with ``threads`` listers (see the module doc);
    ``store`` may be any other :class:`~.sinks.ListingSink` (an index file).

    ``include``/``exclude``: the ``--include``/``--exclude`` globs (comma-separated strings or
    sequences of patterns; :mod:`epochfs.torchclient.globs`): keys they leave out are never
    cataloged. The patterns are recorded with the listing's source (:attr:`listing_name`), so a
    start with other patterns lists afresh, as one with another ``--index`` does.

    ``full_pages``: every page asks :data:`~.planner.FULL_PAGE` keys, for a sink that wants the
    whole listing soonest in the fewest requests (an index file) rather than a fair sample of
    keys early (the planner's small first and gallop pages, for the sampler's first epochs)."""

    def __init__(self, store: Store | ListingSink, source: Source, *, seed: int, shard_index: int = 0,
                 shard_count: int = 1, object_limit: int = NO_LIMIT, threads: int = 4,
                 stop: threading.Event | None = None, progress_every: int = 100_000,
                 on_page: Callable[[CatalogReport], None] | None = None,
                 yield_to: Callable[[], bool] | None = None,
                 include: str | Sequence[str] | None = None,
                 exclude: str | Sequence[str] | None = None, full_pages: bool = False) -> None:
        if threads < 1 or progress_every < 1:
            raise ValueError("threads and progress_every must be positive")
        self.sink: ListingSink = CatalogSink(store) if isinstance(store, Store) else store
        self.full_pages = full_pages
        self.source = source
        self.keys = KeyFilter(include, exclude)
        self.seed = seed
        self.shard_index = shard_index
        self.shard_count = shard_count
        self.object_limit = object_limit
        self.threads = threads
        self.stop = stop or threading.Event()
        self.progress_every = progress_every
        self.on_page = on_page
        self.yield_to = yield_to
        """True while the sampler fetches (``epochfs sample`` passes it): the listers then leave
        the index free between their commits (``INDEX_SHARE``)."""
        self._commit = threading.Lock()
        self._waiting: list[PendingPage] = []
        """Pages read and not committed yet (:meth:`_commit_waiting`)."""
        self._waiting_lock = threading.Lock()
        self._free_at = 0.0
        """No lister commits before this ``time.monotonic()`` (the sampler's turn)."""
        self.committed = 0
        """Pages committed by this lister since it was made (the listing thread's pause reads it)."""
        self.planner: Planner | None = None
        """The running listing's planner (what is listed next; its estimate for status)."""
        self._began = 0.0
        self.refusals = Refusals(passes_over=self.sink.catalog)
        """Spans the remote refuses for good, passed over (:mod:`.refused`)."""
        self._tally = threading.Lock()
        """Guards the report's counts of a sink that takes no rows (no PageFilter counts them)."""
        self.skipped = SkippedKeys()
        """The keys its runs skipped: each logged once, not at every relist (:mod:`.skiplog`)."""

    @property
    def store(self) -> Store:
        """The cache this lister catalogs into (the listing thread reads its relist requests)."""
        if not isinstance(self.sink, CatalogSink):
            raise AttributeError("this lister writes no catalog: it has no store")
        return self.sink.store

    @property
    def listing_name(self) -> str:
        """What the cache records as the listing's source (:attr:`Source.name`, followed by the
        include/exclude patterns when there are any, and by the object limit when there is one):
        a change starts a new listing, whose end drops the rows it did not see (keys another
        filter had taken); a limit lower than the recorded one is no change (:meth:`covered_by`)."""
        name, limit = self._named_for()
        return name if limit is None else f"{name}{LIMIT_MARK}{limit}]"

    def _named_for(self) -> tuple[str, int | None]:
        """(the source with its include/exclude patterns, the object limit or None)."""
        keys = self.keys.describe()
        name = f"{self.source.name} {keys}" if keys else self.source.name
        return name, (self.object_limit if self.object_limit < NO_LIMIT else None)

    def covered_by(self, recorded: str | None) -> bool:
        """Whether the listing recorded as ``recorded`` holds every key this one would: the same
        source and patterns, and an object limit at least this one's. A higher limit now (a
        larger ``--capacity`` or ``--max-object-size``, as a refusal of objects over the limit
        asks) lists afresh: the objects the old limit left out were never cataloged. A name
        recorded without a limit covers only a lister without one: a cache listed before limits
        were recorded lists afresh once, as its limit is unknown (its catalog is used meanwhile)."""
        if recorded is None:
            return False
        base, limit = _split_limit(recorded)
        mine, my_limit = self._named_for()
        if base != mine:
            return False
        return my_limit is None if limit is None else (my_limit is not None and limit >= my_limit)

    def needed(self) -> bool:
        """True when no complete listing exists, one is running, or the source (the include/
        exclude patterns, a higher object limit) changed."""
        state = self.sink.state()
        return state.complete is None or bool(state.parts) or not self.covered_by(state.source)

    def prepare(self, *, fresh: bool = False) -> tuple[int, list[Part], bool]:
        """The listing to run: the running one (same source, not ``fresh``) or a new generation
        over the source's spans (found here: a remote that cannot be listed fails here), and
        whether it is the cache's first (no listing has completed yet)."""
        state = self.sink.state()
        name = self.listing_name
        if state.parts and self.covered_by(state.source) and not fresh:
            parts = state.parts
            gen = state.generation
            if isinstance(self.source, PagedSource):
                # Resumed (after a failed run, or from the index): the rest is asked of the remote,
                # not answered from a first page read when the listing began, however long ago.
                self.source.forget_first_page()
            log.info("resuming listing %d: %d of %d span(s) to go", gen,
                     sum(not p.done for p in parts), len(parts))
        else:
            spans = self.source.spans()
            parts = [Part(i, s.prefix, s.start, s.stop) for i, s in enumerate(spans)]
            if state.source is not None and not self.covered_by(state.source):
                log.info("the listing's source, --include/--exclude or object limit changed (%s, "
                         "was %s): listing afresh", name, state.source)
            if isinstance(self.source, PagedSource) and self.source.folders:
                # Folders listed as ranges: the parts name only each range's first, so the class
                # labels get every folder found before any epoch (:meth:`.ListingSink.record_folders`).
                self.sink.record_folders(self.source.folders)
            gen = self.sink.begin(parts, name)
            first = self._first_page_listers(len(parts))
            log.info("listing %d: %d span(s), %d lister thread(s)%s%s", gen, len(parts),
                     self.threads if isinstance(self.source, PagedSource) else min(self.threads, len(parts)),
                     f" ({first} for the spans' first pages)" if first > self.threads else "",
                     f"; keys kept: {self._keys_line()}" if self.keys else "")
        first = state.complete is None
        self.refusals.begin(gen, len(parts), first=first)
        return gen, parts, first

    def run(self, *, fresh: bool = False,
            prepared: tuple[int, list[Part], bool] | None = None) -> CatalogReport:
        """List to the end (or until stopped); ``report.complete`` says which."""
        gen, parts, first = prepared or self.prepare(fresh=fresh)
        if prepared is not None:  # by another lister (a listing process's parent): not begun here
            self.refusals.begin(gen, len(parts), first=first)
        report = CatalogReport()
        started = time.monotonic()
        filt = PageFilter(report, seed=self.seed, shard_index=self.shard_index,
                          shard_count=self.shard_count, object_limit=self.object_limit, keys=self.keys,
                          announce=self.skipped.listing(first=first), catalog=CatalogClashes.resumed(
                              self.store.listings(), gen) if isinstance(self.sink, CatalogSink) else None)
        paged = isinstance(self.source, PagedSource)
        planner = self.planner = Planner(parts, splittable=paged,
                                         streams_in_key_order=not self.source.shuffled,
                                         folders=self.sink.split_points() if paged else ())
        self._began = round(time.time(), 3)
        streams: dict[int, Iterator[Page]] = {}
        """A serial source's page stream of each part (one span, read in order)."""
        finders: dict[int, ClashFinder] = {}
        errors: list[BaseException] = []
        lock = threading.Lock()
        wake = threading.Condition(lock)
        next_progress = [self.progress_every]

        def worker(first_only: bool = False) -> None:
            while not self.stop.is_set() and not errors:
                seg = planner.take(first_only=first_only)
                if seg is None:
                    if first_only or planner.open_segments == 0:
                        return
                    self._commit_waiting(gen, planner, filt, wait=True)  # pages of busy segments
                    with wake:  # every open segment is being read: wait for one to come back
                        wake.wait(0.05)
                    continue
                try:
                    self._turn(gen, seg, filt, planner, streams, finders)
                except BaseException as e:
                    # The segment stays busy: its part may have moved past pages that were never
                    # committed. The run ends; the next starts from what the index holds.
                    errors.append(e)
                    return
                with wake:
                    wake.notify_all()
                    report.pages += 1
                    if report.listed >= next_progress[0]:
                        next_progress[0] += self.progress_every
                        elapsed = time.monotonic() - started
                        known = planner.progress()
                        log.info("listing: %d object(s) so far (%.0f/s), %d cataloged, about %d "
                                 "in all; %d of %d span(s) reached", report.listed,
                                 report.listed / max(elapsed, 1e-9), report.added, known["estimated"],
                                 known["spans_reached"], known["spans"])
                if self.on_page is not None:
                    self.on_page(report)

        # A paged source's spans split as the planner learns them, so a single span (a flat
        # bucket) keeps every lister busy soon; with one lister a span, a flat bucket listed on
        # one thread whatever --list-threads said (measured: 1,500 keys in 6 s beside the sampler).
        count = self.threads if planner.splittable else min(self.threads, planner.open_segments)
        threads = [threading.Thread(target=worker, name=f"lister-{i}", daemon=True)
                   for i in range(max(1, count))]
        extra = self._first_page_listers(planner.open_segments) - count
        threads += [threading.Thread(target=worker, args=(True,), name=f"lister-first-{i}",
                                     daemon=True) for i in range(max(0, extra))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        report.seconds = time.monotonic() - started
        if planner.open_segments == 0:
            # Read before the end drops them: rows of keys the globs leave out now, not "gone".
            left_out = rows_left_out(self.store.listings(), self.keys, gen) if (
                self.keys and isinstance(self.sink, CatalogSink)) else 0
            report.total, report.dropped = self.sink.finish(gen)
            report.dropped_left_out = min(left_out, report.dropped)
            report.complete = True
            self.skipped.completed()
        if self.sink.catalog:
            log.info("%s; %d in the catalog", report, report.total)
        else:
            log.info("listed %d object(s) in %.1fs (%d page(s))%s", report.listed, report.seconds,
                     report.pages, "" if report.complete else ", not complete")
        return report

    def _first_page_listers(self, spans: int) -> int:
        """Listers for the spans' first pages (:data:`FIRST_ROUND_LISTERS`): a paged source's,
        not for full pages; 0: none beyond ``threads``."""
        if not isinstance(self.source, PagedSource) or self.full_pages:
            return 0
        return min(FIRST_ROUND_LISTERS, spans)

    def _keys_line(self) -> str:
        inc = ", ".join(self.keys.include) or "every key"
        return inc + (f", less {', '.join(self.keys.exclude)}" if self.keys.exclude else "")

    def _turn(self, gen: int, seg: Segment, filt: PageFilter, planner: Planner,
              streams: dict[int, Iterator[Page]], finders: dict[int, ClashFinder]) -> None:
        """One page of one segment, committed with its resume point (a segment the planner just
        split off another: with the other's new stop)."""
        part = seg.part
        page = self.refusals.read(self.source, part, FULL_PAGE if self.full_pages else seg.page, streams)
        if not page.done and page.after == part.after:
            # Committed, it would be asked again from the same point, for ever.
            raise RemoteError(f"cannot list {part.prefix or 'the root'!r} after {part.after!r}: "
                              "a page that is not the last did not move the listing on")
        cut_from = seg.parent.part if seg.parent else None
        finder = finders.get(part.part)
        edges = Edges()  # a stretch's clash edges (:mod:`.clashes`): none without a finder
        if self.sink.catalog:
            if finder is None and self.source.sorted_listing:  # a stretch in key order from here
                finder = finders[part.part] = ClashFinder()
            out = filt.page(page.objects, finder)
            rows = PageRows(part, out.rows, out.skips + page.skips, out.clashes, cut_from, out.excluded)
            edges = out.edges
        else:  # every object as listed: the sink's readers filter (an index file)
            rows = PageRows(part, [], 0, [], cut_from)
            with self._tally:
                filt.report.listed += len(page.objects)
                filt.report.in_shard += len(page.objects)
                filt.report.added += len(page.objects)
        part.after, part.done = page.after, page.done
        done = PendingPage(seg, [str(o.key) for o in page.objects], ListedPage(rows, page.objects),
                           rows.excluded, edges)
        if page.done and finder is not None and not finder.sorted:
            log.warning("the listing of span %d was not sorted: file/folder name clashes were not "
                        "checked", part.part)
        with self._waiting_lock:
            self._waiting.append(done)
        self._commit_waiting(gen, planner, filt, wait=False)
        time.sleep(0)  # let a waiting writer of the sampler take the index's lock first

    def _commit_waiting(self, gen: int, planner: Planner, filt: PageFilter, *, wait: bool) -> None:
        """Commit the pages waiting, in one transaction (group commit), unless another lister is
        committing (``wait``: wait for it): that one takes them too before it lets go.

        One lister writes at a time: the listers then contend with the sampler's writers (the
        admitter, cuts) as one thread, not as many; several listers barging on the index's lock
        starved admissions for the whole listing (measured on 2 cores, 100k keys in 100 class
        folders: first sample at 28 s with 8 listers, 4.5-9 s with this; 3 s with 4 listers).
        The others read their next pages meanwhile. A commit costs its wait for the index (and
        the sampler's turn after it) whatever its size, and the planner's pages are often small:
        beside a sampler fetching 4 KiB objects, a commit a page listed 100k keys in 100 folders
        at 17 pages a second (26,800 keys in 12 s; with group commits 75,500)."""
        while True:
            if not self._commit.acquire(blocking=wait):
                return
            try:
                while True:
                    with self._waiting_lock:
                        batch, self._waiting = self._waiting, []
                    if not batch:
                        break
                    self._commit_batch(gen, batch, planner, filt)
            finally:
                self._commit.release()
            with self._waiting_lock:
                if not self._waiting:
                    return
            wait = False  # a page came in as this lister let go: commit it unless another does

    def _commit_batch(self, gen: int, batch: list[PendingPage], planner: Planner, filt: PageFilter) -> None:
        while (left := self._free_at - time.monotonic()) > 0 and not self.stop.wait(left):
            pass  # the sampler's turn at the index (no other lister commits meanwhile)
        began = time.monotonic()
        kept = [(d.seg, len(d.keys) - d.left_out) for d in batch]  # the keys the globs keep
        progress = {**planner.progress(kept), "began": self._began, **self.refusals.progress()}
        if across := filt.across([d.edges for d in batch]):  # across stretches: marked after every row
            batch[-1].add_clashes(across)
        news = self.sink.commit_pages(gen, [d.page for d in batch],
                                      progress=json.dumps(progress, separators=(",", ":")))
        self.committed += len(batch)
        if self.yield_to is not None and self.yield_to():
            self._free_at = began + (time.monotonic() - began) / INDEX_SHARE
        for d in batch:
            planner.record(d.seg, d.keys, d.left_out)
        filt.count_new(sum(news))


__all__ = ["INDEX_SHARE", "Lister"]
