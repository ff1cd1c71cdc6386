"""Where a listing reads keys from, cut into spans that listers walk in parallel, page by page.

A source says how to split the key space (:meth:`Source.spans`) and yields one span's pages from a
resume point (:meth:`Source.pages`); each page carries the resume point after it, which the lister
commits with the page's rows, so a restart resumes where the last committed page ended
(:class:`~.span.Span`, :class:`~.span.Page`).

- :class:`~.paged.PagedSource`, a remote that lists a page at a time under a prefix after a start
  key (S3's ``ListObjectsV2``): its folders found with the delimiter, the key space cut into
  ranges at folder boundaries or a span a folder, the discovery's first pages kept to answer the
  listing's (:mod:`.paged` says how).
- :class:`SerialSource`, any other remote (``file://``, ``http(s)://`` index files, ``gs://``,
  ``az://``): one span over ``list()``; a resume point is the last key committed where the walk
  has a known order, else the objects consumed with a digest of them (:mod:`.resume`: never a bare
  count, which meant other keys once files were added or deleted before it). A remote that walks
  a bucket folder by folder (``gs://``, ``az://``) has its listing's first request read when the
  spans are found, one request (:func:`first_request`), so a refusal comes at the start, as a
  paged remote's does.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from itertools import chain, islice
from typing import Protocol

from epochfs.sidecar.listing.firstrequest import first_request
from epochfs.sidecar.listing.paged import DISCOVERY_RETRY, MAX_FOLDER_SPANS, PagedSource
from epochfs.sidecar.listing.resume import (
    Order,
    Prefix,
    changed,
    counted_point,
    key_bytes,
    key_point,
    object_item,
    point_key,
)
from epochfs.sidecar.listing.span import Page, Span
from epochfs.sidecar.redact import redact
from epochfs.sidecar.remote import PassOver, Remote, RemoteObject

PAGE = 1000
"""Objects per page of a source read as one stream: a listing stream, an index file, an S3
Inventory data file (a paged remote's pages are its own: 1,000 on S3)."""


class Source(Protocol):
    name: str
    """What the listing reads (``list``, or an index URL): a change starts a new listing."""
    sorted_listing: bool
    """Each span's pages are in UTF-8 byte order of keys (file/folder clashes can be found)."""
    shuffled: bool
    """Each span's records come in a random order, so what is read of one so far is a uniform
    sample of it (an ``epochfs index`` written shuffled); False: the first records read are its
    first keys, or in an order nobody promised random (the planner counts them as lopsided until
    the span is read to its end: :class:`~.planner.Planner`'s ``streams_in_key_order``)."""

    def spans(self) -> list[Span]: ...

    def pages(self, span: Span, after: str) -> Iterator[Page]: ...


class SerialSource:
    """One listing stream (``file://``, ``http(s)://``, ``gs://``, ``az://``): one span, pages of
    PAGE."""

    name = "list"

    def __init__(self, remote: Remote, *, page: int = PAGE, stop: threading.Event | None = None,
                 rng: random.Random | None = None) -> None:
        """``stop``: a throttled first request (:meth:`spans`) is read again until it is set (None:
        not retried, the error raised)."""
        self.remote = remote
        self.sorted_listing = remote.sorted_listing
        self.shuffled = False  # a walk of folders, a listing: in key order, or in no promised order
        self.page = max(1, page)
        self.stop = stop
        self.rng = rng or random.Random()

    def spans(self) -> list[Span]:
        """The one span, after the listing's first request where the remote walks a bucket
        (``gs://``, ``az://``: :func:`first_request`), so a store that refuses the listing fails
        here, at the start, as a paged remote's first page does."""
        first_request(self.remote, stop=self.stop, rng=self.rng, bounds=DISCOVERY_RETRY)
        return [Span("", "", None)]

    def pages(self, span: Span, after: str, *, pass_over: PassOver | None = None) -> Iterator[Page]:
        """The stream's pages after ``after``: after its last committed key where the walk has a
        known order (:meth:`.Remote.walk_order`), else after the objects consumed when they are
        the very ones committed (:class:`.resume.Prefix`; another stream now: the run fails and
        the next lists afresh). ``pass_over``: what the remote's walk asks about a folder it may
        not read (:meth:`.Remote.walk`); None: such a folder fails the listing."""
        objects = self.remote.list() if pass_over is None else self.remote.walk(pass_over)
        order = self.remote.walk_order()
        if order is not None:
            yield from self._after_key(order, after, objects)
        else:
            yield from self._counted(after, objects)

    def _after_key(self, order: Order, after: str, objects: Iterator[RemoteObject]) -> Iterator[Page]:
        """The walk read past the keys up to the resume point's, in its order: keys deleted or
        added before it since do not move it (a count did, dropping existing keys as gone)."""
        it = iter(objects)
        last = point_key(after)
        point = ""  # "" or an earlier version's count: read from the start
        if last is not None:
            point, bound = after, order(last)
            for obj in it:
                if order(key_bytes(obj.key)) > bound:
                    it = chain([obj], it)
                    break
        while True:
            batch = list(islice(it, self.page))
            if batch:
                point = key_point(batch[-1].key)
            done = len(batch) < self.page
            yield Page(batch, point, done)
            if done:
                return

    def _counted(self, after: str, objects: Iterator[RemoteObject]) -> Iterator[Page]:
        """A stream in no promised order: its first objects skipped only when they are those the
        listing committed (their number and digest); an earlier version's count: from the start."""
        it = iter(objects)
        read = Prefix()
        skip, digest = counted_point(after) or (0, "")
        if skip:
            for obj in islice(it, skip):
                read.add(object_item(obj))
            if read.count != skip or read.digest != digest:
                raise changed(self, f"the listing of {redact(self.remote.url)}", read, skip)
        while True:
            batch = list(islice(it, self.page))
            for obj in batch:
                read.add(object_item(obj))
            done = len(batch) < self.page
            yield Page(batch, read.point(), done)
            if done:
                return


def source_for(remote: Remote, *, max_spans: int = MAX_FOLDER_SPANS, page: int = PAGE,
               stop: threading.Event | None = None) -> Source:
    """The parallel source when the remote lists in pages, else the serial one (``page``
    objects a page). ``stop``: the parallel source's discovery, or the serial source's first
    request, is read again while throttled until it is set."""
    paged = remote.paged()
    if paged is not None:
        return PagedSource(paged, max_spans=max_spans, stop=stop)
    return SerialSource(remote, page=page, stop=stop)


__all__ = ["SerialSource", "Source", "source_for"]
