"""Parallel listers that write the catalog page by page while the sampler already fetches from it.

The spans of a :class:`~epochfs.sidecar.listing.sources.Source` wait in one queue; each of
``threads`` listers takes a span, lists ONE page of it, commits the page's rows together with the
span's resume point (:meth:`~epochfs.sidecar.store.catalog.Listings.commit_page`), and puts the span
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
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from epochfs.sidecar.listing.filter import CatalogReport, ClashFinder, PageFilter
from epochfs.sidecar.listing.sources import Page, Source, Span
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.catalog import Part

log = logging.getLogger("epochfs.catalog")

INDEX_SHARE = 0.5
"""While the sampler fetches, the most of the time the listers' page commits hold the index: after
a commit that held it ``t`` seconds no lister commits for ``t * (1 / INDEX_SHARE - 1)`` more, so the
sampler's threads find it free at least as long as a commit held it. When the sampler is not
fetching (the cache full, schedule mode waiting for the complete listing, nothing to fetch) the
listers commit back to back."""


@dataclass
class _Turn:
    part: Part
    pages: Iterator[Page] | None = None
    finder: ClashFinder | None = None


class Lister:
    """Lists ``source`` into ``store``'s catalog with ``threads`` listers (see the module doc)."""

    def __init__(self, store: Store, source: Source, *, seed: int, shard_index: int = 0,
                 shard_count: int = 1, object_limit: int = 2**62, threads: int = 4,
                 stop: threading.Event | None = None, progress_every: int = 100_000,
                 on_page: Callable[[CatalogReport], None] | None = None,
                 yield_to: Callable[[], bool] | None = None) -> None:
        if threads < 1 or progress_every < 1:
            raise ValueError("threads and progress_every must be positive")
        self.store = store
        self.source = source
        self.seed = seed
        self.shard_index = shard_index
        self.shard_count = shard_count
        self.object_limit = object_limit
        self.threads = threads
        self.stop = stop or threading.Event()
        self.progress_every = progress_every
        self.on_page = on_page
        self.yield_to = yield_to
        """True while the sampler fetches (``epochfs sample`` sets it): the listers then leave
        the index free between their commits (``INDEX_SHARE``)."""
        self._commit = threading.Lock()
        self._free_at = 0.0
        """No lister commits before this ``time.monotonic()`` (the sampler's turn)."""
        self.committed = 0
        """Pages committed by this lister since it was made (the listing thread's pause reads it)."""

    def needed(self) -> bool:
        """True when no complete listing exists, one is running, or the source changed."""
        state = self.store.listings().state()
        return state.complete is None or bool(state.parts) or state.source != self.source.name

    def prepare(self, *, fresh: bool = False) -> tuple[int, list[Part], set[str]]:
        """The listing to run: the running one (same source, not ``fresh``) or a new generation
        over the source's spans (found here: a remote that cannot be listed fails here)."""
        listings = self.store.listings()
        state = listings.state()
        if state.parts and state.source == self.source.name and not fresh:
            parts = state.parts
            gen = state.generation
            log.info("resuming listing %d: %d of %d span(s) to go", gen,
                     sum(not p.done for p in parts), len(parts))
        else:
            spans = self.source.spans()
            parts = [Part(i, s.prefix, s.start, s.stop) for i, s in enumerate(spans)]
            gen = listings.begin(parts, self.source.name)
            log.info("listing %d: %d span(s), %d lister thread(s)", gen, len(parts),
                     min(self.threads, len(parts)))
        return gen, parts, {p.start for p in parts if p.start}

    def run(self, *, fresh: bool = False,
            prepared: tuple[int, list[Part], set[str]] | None = None) -> CatalogReport:
        """List to the end (or until stopped); ``report.complete`` says which."""
        gen, parts, boundaries = prepared or self.prepare(fresh=fresh)
        report = CatalogReport()
        started = time.monotonic()
        filt = PageFilter(report, seed=self.seed, shard_index=self.shard_index,
                          shard_count=self.shard_count, object_limit=self.object_limit,
                          boundaries=boundaries)
        # queue.Queue, not SimpleQueue: workers poll with a timed get (to see a stop), and with
        # several consumers CPython 3.11's SimpleQueue.get(timeout=...) can wait with no timeout
        # (woken for an item another worker took, past its deadline): after the last span a
        # worker then never ended and the listing was never recorded complete.
        turns: queue.Queue[_Turn] = queue.Queue()
        todo = [p for p in parts if not p.done]
        for p in todo:
            turns.put(_Turn(p, finder=ClashFinder() if self.source.sorted_listing else None))
        left = [len(todo)]
        errors: list[BaseException] = []
        lock = threading.Lock()
        next_progress = [self.progress_every]

        def worker() -> None:
            while not self.stop.is_set() and not errors:
                with lock:
                    if left[0] == 0:
                        return
                try:
                    turn = turns.get(timeout=0.05)
                except queue.Empty:
                    continue
                try:
                    done = self._turn(gen, turn, filt)
                except BaseException as e:
                    errors.append(e)
                    return
                with lock:
                    report.pages += 1
                    if done:
                        left[0] -= 1
                    if report.listed >= next_progress[0]:
                        next_progress[0] += self.progress_every
                        elapsed = time.monotonic() - started
                        log.info("listing: %d object(s) so far (%.0f/s), %d cataloged, %d of %d span(s) "
                                 "done", report.listed, report.listed / max(elapsed, 1e-9), report.added,
                                 len(todo) - left[0], len(todo))
                if not done:
                    turns.put(turn)
                if self.on_page is not None:
                    self.on_page(report)

        threads = [threading.Thread(target=worker, name=f"lister-{i}", daemon=True)
                   for i in range(min(self.threads, max(1, len(todo))))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        report.seconds = time.monotonic() - started
        if left[0] == 0:
            report.total, report.dropped = self.store.listings().finish(gen)
            report.complete = True
        log.info("%s; %d in the catalog", report, report.total)
        return report

    def _turn(self, gen: int, turn: _Turn, filt: PageFilter) -> bool:
        """One page of one span, committed with its resume point; True when the span is done."""
        part = turn.part
        if turn.pages is None:
            turn.pages = self.source.pages(Span(part.prefix, part.start, part.stop), part.after)
        page = next(turn.pages, None)
        if page is None:
            page = Page([], part.after, True)
        out = filt.page(page.objects, turn.finder)
        part.after, part.done = page.after, page.done
        # One lister writes at a time: the listers then contend with the sampler's writers (the
        # admitter, cuts) as one thread, not as many; several listers barging on the index's lock
        # starved admissions for the whole listing (measured on 2 cores, 100k keys in 100 class
        # folders: first sample at 28 s with 8 listers, 4.5-9 s with this; 3 s with 4 listers).
        with self._commit:
            while (left := self._free_at - time.monotonic()) > 0 and not self.stop.wait(left):
                pass  # the sampler's turn at the index (no other lister commits meanwhile)
            began = time.monotonic()
            new = self.store.listings().commit_page(gen, part, out.rows, skips=out.skips,
                                                    clashes=out.clashes)
            self.committed += 1
            if self.yield_to is not None and self.yield_to():
                self._free_at = began + (time.monotonic() - began) / INDEX_SHARE
        time.sleep(0)  # let a waiting writer of the sampler take the index's lock first
        with filt._lock:
            filt.report.new += new
        if page.done and turn.finder is not None and not turn.finder.sorted:
            log.warning("the listing of span %d was not sorted: file/folder name clashes were not "
                        "checked", part.part)
        return page.done


__all__ = ["INDEX_SHARE", "Lister"]
