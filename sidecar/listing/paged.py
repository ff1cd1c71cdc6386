"""The parallel source: a remote that lists a page at a time under a prefix after a start key
(S3's ``ListObjectsV2``, :meth:`~epochfs.sidecar.remote.s3.S3Remote.list_page`), its key space
cut into spans that listers walk in parallel (:mod:`.sources` says what a source is; this is the
one whose spans are found with the delimiter, apart from the serial stream and the choice
between them).

A remote that fits in one page is that page (one request); otherwise the folders are
found with the delimiter (descending through a single top folder such as ``train/``), and the
key space is cut into ranges at folder boundaries, at most ``max_spans`` of them, so that every
class folder lists at once instead of one after the other; when the level holds only folders,
and no more than ``max_spans``, each folder is a span listed under its own prefix (no range, so
no page past its end). A resume point is the last key. The discovery's pages are not read
twice: a first page of files only (no key in a folder) is where the delimiter's look starts
after, and when the listing is one span over the whole remote (a flat bucket) that page and the
delimiter's pages of files only after it (the same keys a listing reads) are kept
(:class:`~.keptpage.KeptPage`) and answer the span's pages they cover without a request (in the
listing process too: :attr:`PagedSource.first_page`); where they reached the end, they are the
listing. Finding the folders comes before the listing thread (whose pause answers a throttled
page of the listing), so a throttled page of it is read again in place after a full-jitter pause
(``DISCOVERY_RETRY``, :func:`~epochfs.sidecar.listing.retry.while_throttled`) until the sampler
stops; the pages read before it are kept.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from epochfs.sidecar.listing.keptpage import KeptPage
from epochfs.sidecar.listing.retry import while_throttled
from epochfs.sidecar.listing.span import Page, Span
from epochfs.sidecar.remote import PagedRemote, RemoteObject
from epochfs.sidecar.remote.base import ListedPage, PageWalk

log = logging.getLogger("epochfs.catalog")

DISCOVERY_PAGES = 10
"""Delimiter pages read to find folders (10k folders); later folders share the last span."""
MAX_FOLDER_SPANS = 1024
"""Folders listed each under its own prefix at most (ImageNet's 1,000 classes among them); with
more, the key space is cut into this many ranges at folder boundaries, which the planner splits as
it learns them (:mod:`.planner`: a page can start after any key), so one page lists tens of small
folders. A span a folder is what lets the planner find each folder's size (its gallop) and list
folders in proportion to their sizes: at 1M keys in 1,000 folders of Zipf sizes, as 256 ranges of
about four folders (each estimated alike, whatever its size) the listed keys were still 0.53 from
the dataset's folder mix at 40 s, as a span a folder 0.19-0.23 (docs/performance.md, "Fairness",
"Gallop pages"). Not more: with a span for each of 5,000 folders of 20 keys the listing was
5,000 list requests, and the epochs cut in the first 12 s covered 0.48-0.85x the folders a
random sample covers; as ranges, 0.92-0.99x."""
DESCEND = 4
"""Levels of single folders descended through (``data/train/``) before the key space is cut."""
EXPAND_UNDER = 64
"""Fewer folders than this at the level found: each is looked into, and one that holds only
folders is replaced by them (level by level, up to DESCEND levels), so that the class folders
inside ``train/`` beside ``arrays/``, or the videos of ten class folders, are spans of their
own: the listing's first round reads a page of each and its planner covers each in proportion,
where one span over ``train/`` read its classes in whatever order its splits fell (the
fairness benchmark's ``mixed``: one class 80% listed while two had a page)."""
EXPAND_LISTS = 64
"""Folders looked into at most (one small LIST page each, more for a folder of many folders)."""
LOOK_THREADS = 8
"""Folders looked into at once (each look is a LIST request's round trip)."""
PROBE_KEYS = 100
"""Keys and folders asked in the first page of a look into a folder (a folder of files shows
it at once, without a full page of them)."""
DISCOVERY_RETRY = (0.5, 30.0)
"""First and longest bound of the full-jitter pause before a throttled page that finds the
folders is read again (as the ``--index`` header's, :data:`.indexfile.HEADER_RETRY`)."""


class _Look(NamedTuple):
    """What the delimiter's pages under a prefix showed (:meth:`PagedSource._folders`)."""

    folders: list[str]
    others: bool
    """Anything else there: files beside the folders, or more than the pages showed."""
    files: list[RemoteObject]
    """The files the pages listed, in key order: where they showed no folder, every key after
    the start they were asked from."""
    ended: bool
    """The pages reached the end of the listing."""


def _within(span: Span, listed: ListedPage) -> tuple[list[RemoteObject], bool]:
    """A page's keys before ``span``'s stop, and whether the span ends with it (nothing follows,
    or the page reached the stop)."""
    objects, done = listed[0], not listed.truncated
    if span.stop is None:
        return objects, done
    kept = [o for o in objects if str(o.key) < span.stop]
    return kept, done or len(kept) < len(objects)


class PagedSource:
    """Parallel listing of a remote that lists a page at a time (S3)."""

    name = "list"
    sorted_listing = True
    shuffled = False

    def __init__(self, remote: PagedRemote, *, max_spans: int = MAX_FOLDER_SPANS,
                 stop: threading.Event | None = None, rng: random.Random | None = None) -> None:
        """``stop``: a throttled page while finding the folders is read again until it is set
        (None: not retried, the error raised)."""
        self.remote = remote
        self.max_spans = max(1, max_spans)
        self.stop = stop
        self.rng = rng or random.Random()
        self._kept: KeptPage | None = None
        """The discovery's first pages of the one span over the whole remote, its first keys
        (``whole``: all of them), answering the planner's pages they cover (:meth:`read_page`)."""
        self.folders: list[str] = []
        """Every folder :meth:`spans` found at the level it cut into ranges (more than
        ``max_spans``): the ranges name only their first, and the class labels must name all,
        the same on every node (:meth:`.Lister.prepare` records them)."""

    def _walk(self) -> PageWalk:
        """A walk over this remote's pages, named by its URL in the errors it raises."""
        return PageWalk(self.remote.url)

    def _discover(self, prefix: str, *, token: str | None = None, delimiter: bool = False,
                  max_keys: int = 1000,
                  start_after: str = "") -> ListedPage:
        """One page that finds the spans, read again while the store throttles it."""
        return while_throttled(
            lambda: self.remote.list_page(prefix, token=token, delimiter=delimiter, max_keys=max_keys,
                                          start_after=start_after),
            stop=self.stop, rng=self.rng, bounds=DISCOVERY_RETRY, log=log,
            what=f"finding the folders under {prefix or 'the root'!r}")

    def _folders(self, prefix: str, *, first_keys: int = 1000, stop_on_files: bool = False,
                 after: str = "") -> _Look:
        """The folders directly under ``prefix`` (at most DISCOVERY_PAGES pages of them) and
        whether anything else is there: files beside them, or more than those pages showed.
        ``first_keys``: what the first page asks; ``stop_on_files``: no page after one with files;
        ``after``: the keys up to it are files already seen (the listing starts after them)."""
        folders: list[str] = []
        files: list[RemoteObject] = []
        others = bool(after)
        token: str | None = None
        more = False
        walk = self._walk()
        for page in range(DISCOVERY_PAGES):
            listed = self._discover(prefix, token=token, delimiter=True,
                                    max_keys=first_keys if page == 0 else 1000,
                                    start_after=after if page == 0 else "")
            objects, prefixes, token = listed
            folders += prefixes
            files += objects
            others = others or any(o.key != prefix for o in objects)
            # Truncated with no token: no way on with the delimiter (a start after a folder name
            # lists that folder again), so what is left counts as unseen, as past the last page.
            more = listed.truncated
            if not more or token is None or (others and stop_on_files):
                break
            walk.next(listed, "")  # the same token twice: an error, not the same folders again
        return _Look(folders, others or more, files, not more)

    def spans(self) -> list[Span]:
        self.folders = []
        self._kept = None
        # A remote that fits in one page is listed by that page alone (one request, no split).
        listed = self._discover("")
        objects = listed[0]
        if not listed.truncated:
            self.keep_first_page(objects, True)
            return [Span("", "", None)]
        # A first page of files only (no key in a folder) is what the delimiter's first page
        # would show again: the folders are looked for after it, one request fewer.
        flat = str(objects[-1].key) if objects and all(
            isinstance(o.key, str) and o.key and "/" not in o.key for o in objects) else ""
        prefix = ""
        folders: list[str] = []
        for _ in range(DESCEND):
            look = self._folders(prefix, after=flat if not prefix else "")
            folders, files = look.folders, look.others
            if len(folders) == 1 and not files:
                prefix = folders[0]
                continue
            break
        if len(folders) < 2:
            if not prefix and flat and not folders:
                # Pages of files only: the delimiter's pages listed every key after the first
                # page, as the listing would, up to the end where they reached it (a flat bucket
                # of up to 11 pages is cataloged by the discovery alone).
                self.keep_first_page(objects + look.files, look.ended)
            elif not prefix:
                # One span over the whole remote: its first page is the one read above, handed
                # out as the listing's first page (the catalog's first keys without a request).
                self.keep_first_page(objects, False)
            return [Span(prefix, "", None)]
        if not files and len(folders) <= self.max_spans:
            # Nothing but these folders: each is listed under its own prefix, so the store ends a
            # folder's last page at the folder's end (a range would ask one more page whenever a
            # folder's keys fill whole pages: it cannot know the next key is past its stop).
            return [Span(folder, "", None) for folder in self._expand(folders)]
        self.folders = list(folders)
        step = -(-len(folders) // self.max_spans)
        starts = ["", *folders[step::step]]
        # A range lists the keys after its start (StartAfter): the one before it keeps the start
        # itself, a folder's marker, up to its stop, as the planner's cuts at a folder do.
        return [Span(prefix, start, starts[i + 1] + "\x00" if i + 1 < len(starts) else None)
                for i, start in enumerate(starts)]

    def _subfolders(self, prefix: str) -> list[str] | None:
        """The folders that ``prefix`` holds, when it holds nothing else and no more than
        DISCOVERY_PAGES pages of them (else None)."""
        look = self._folders(prefix, first_keys=PROBE_KEYS, stop_on_files=True)
        return look.folders if look.folders and not look.others else None

    def _expand(self, folders: list[str]) -> list[str]:
        """``folders`` with those that hold only folders replaced by them, a whole level at a
        time while there are fewer than :data:`EXPAND_UNDER`; in key order. A level is looked
        into whole or not at all: classes looked into beside classes that are not would list
        as many more first pages as they hold folders (the fairness benchmark's ``nested``, four
        classes of ten looked into: those four were 80% listed while the others were 10%)."""
        spans, frontier, looked = list(folders), list(folders), 0
        for _ in range(DESCEND):
            if len(spans) >= EXPAND_UNDER or looked + len(frontier) > EXPAND_LISTS:
                break
            looked += len(frontier)
            with ThreadPoolExecutor(LOOK_THREADS, thread_name_prefix="discovery") as pool:
                inside = dict(zip(frontier, pool.map(self._subfolders, frontier), strict=True))
            deeper = [sub for subs in inside.values() if subs for sub in subs]
            replaced = sum(1 for subs in inside.values() if subs)
            if not deeper or len(spans) - replaced + len(deeper) > self.max_spans:
                break
            spans = [sub for folder in spans for sub in (inside.get(folder) or [folder])]
            frontier = deeper
        if len(spans) > len(folders):
            log.info("listing %d folders found inside %d", len(spans), len(folders))
        return spans

    @property
    def fits_one_page(self) -> bool:
        """The discovery's pages held the whole remote (:meth:`spans`): the listing is their
        keys, nothing else to list (asked before the listing runs)."""
        return self._kept is not None and self._kept.whole

    @property
    def first_page(self) -> tuple[list[RemoteObject], bool] | None:
        """The discovery's first pages of the one span over the whole remote (their keys, in
        order), to hand to the listing process, and whether they are the whole remote; None:
        there are none."""
        return None if self._kept is None else (self._kept.objects, self._kept.whole)

    def forget_first_page(self) -> None:
        """Ask the remote for every page from now on (a listing resumed after a failure: the kept
        page was read when the listing began)."""
        self._kept = None

    def keep_first_page(self, objects: list[RemoteObject], done: bool) -> None:
        """Hand out ``objects`` as the first page of the span over the whole remote (``done``:
        all of it): the page another source's :meth:`spans` read (:attr:`first_page`), given to
        the listing process, which then does not ask for it again."""
        self._kept = KeptPage(objects, whole=done)

    def _take_first_page(self, span: Span, after: str) -> Page | None:
        """The kept first page, when ``span`` is the whole remote read from its beginning."""
        kept, self._kept = self._kept, None
        if kept is None or after or span != Span("", "", None):
            return None
        if not kept.objects and not kept.whole:
            return None  # an empty first page that says more follows: read the span from its start
        return Page(kept.objects, str(kept.objects[-1].key) if kept.objects else "", kept.whole)

    def pages(self, span: Span, after: str) -> Iterator[Page]:
        first = self._take_first_page(span, after)
        if first is not None:
            yield first
            if first.done:
                return
            after = first.after
        walk = self._walk()
        token: str | None = None
        start_after = max(after, span.start)
        while True:
            listed = self.remote.list_page(span.prefix, start_after=start_after, token=token)
            kept, done = _within(span, listed)
            if kept:
                after = str(kept[-1].key)
            if kept or done:
                yield Page(kept, after, done)
            if done:
                return
            step = walk.next(listed, max(after, span.start))
            if step is None:
                return
            token, start_after = step


    def read_page(self, span: Span, after: str, max_keys: int) -> Page:
        """One page of at most ``max_keys`` keys of ``span`` after ``after`` (or its start): a
        page can start after any string, so the listing may split a span and read its parts in
        any order (:mod:`.planner`)."""
        # The discovery's first page answers what it covers, no more of it than the planner asks:
        # its first pages are small so that every part of the key space has keys early; a whole
        # first page (the start's 1,000 keys of a flat bucket) made the first decile lopsided and
        # the epochs 2.2-3.3x a random sample's TV where 1.4-1.8x before (600k flat keys). A page
        # that was the whole remote is handed out whole: every key, lopsided nowhere.
        memo = self._kept
        known = memo.page(span.prefix, span.start, span.stop, after, max_keys) if memo else None
        if known is not None:
            return Page(*known)
        if span.stop is not None and after and after + "\x00" >= span.stop:
            return Page([], after, True)  # the last page ended at the stop: nothing is left
        start = max(after, span.start)
        listed = self.remote.list_page(span.prefix, start_after=start, max_keys=max_keys)
        walk = self._walk()
        while True:
            kept, done = _within(span, listed)
            if kept or done:
                return Page(kept, str(kept[-1].key) if kept else after, done)
            # An empty page that says more follows (S3 behind a long run of delete markers): a
            # page by StartAfter would ask the same again for ever; its token goes on (bounded:
            # PageWalk raises on no token, a token again, too many empty pages).
            step = walk.next(listed, start)
            assert step is not None and step[0] is not None  # PageWalk raises on an empty page without one
            listed = self.remote.list_page(span.prefix, token=step[0], max_keys=max_keys)


__all__ = ["PagedSource"]
