"""Where a listing's pages go: the one protocol the listers write to, and its two sinks.

The listers (:mod:`.lister`) read pages and hand them on in groups, each page with its part's new
resume point; the sink keeps both together, so that a listing stopped or failed resumes after the
last kept page of each part. The cache's catalog is one sink (:class:`CatalogSink`: the sampler's
listing, in the index); an ``epochfs index`` file is the other (:class:`IndexSink`: each part's
pages appended to a gzip file of its own in a temporary folder, which
:func:`~.indexfile.write_index` then joins in key order or shuffles). One set of listers and one
planner for both, so the index gets what the planner gives the catalog: a span split as it is
learnt, a flat bucket (one span) listed on every thread (with a pool of one thread a span, as
the index had, it was listed on one whatever ``--list-threads`` said).
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import json
import os
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from epochfs.sidecar.remote import RemoteObject
from epochfs.sidecar.store import Store, classes
from epochfs.sidecar.store.listings import ListingState, PageRows, Part

COMPRESS_LEVEL = 6
"""gzip level of the index's temporary members (as the index's own)."""


def object_record(obj: RemoteObject) -> bytes:
    """One record line of an index: the key (``kb``, base64, when it is not UTF-8), size, version."""
    doc: dict[str, Any] = {"s": obj.size, "v": obj.version}
    if isinstance(obj.key, bytes):
        doc = {"kb": base64.b64encode(obj.key).decode("ascii"), **doc}
    else:
        doc = {"k": obj.key, **doc}
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass") + b"\n"


@dataclass(frozen=True)
class ListedPage:
    """A page as the listers hand it to their sink: its catalog rows with its part's new resume
    point (``rows.part``; ``rows.cut_from``, the part it was split off), and the objects as the
    source listed them (a sink that takes no rows, an index file, writes these)."""

    rows: PageRows
    objects: list[RemoteObject]


class ListingSink(Protocol):
    """Where a :class:`~.lister.Lister`'s pages go, with what it needs to resume a listing begun: the
    generation and its parts (each with its resume point), kept as each group of pages commits."""

    catalog: bool
    """True: pages come as catalog rows (this node's shard, kept by the globs, unsafe keys and
    file/folder clashes skipped: :class:`~.filter.PageFilter`); False: ``rows`` holds only the
    parts, the objects are every key as listed (an index file's readers filter them)."""

    def state(self) -> ListingState:
        """The running (or last) listing: its generation, its source and its parts as committed."""
        ...

    def begin(self, parts: list[Part], source: str) -> int:
        """A new listing generation over ``parts``; returns its generation."""
        ...

    def commit_pages(self, gen: int, pages: list[ListedPage], *, progress: str) -> list[int]:
        """Keep ``pages`` with their parts' resume points, together (a restart resumes after
        the last committed page of each part); ``progress``: what the planner knows (JSON).
        Returns the keys each page added that were not there before."""
        ...

    def finish(self, gen: int) -> tuple[int, int]:
        """The listing went to the end: returns (keys held, keys dropped as gone)."""
        ...

    def record_folders(self, folders: list[str]) -> None:
        """The folders the discovery found where it cut ranges (only the ranges' first are parts)."""
        ...

    def split_points(self) -> list[str]:
        """Folder starts (``a/b/``) the planner may split a range at, so that a range of folders
        is read from several of its folders at once, not from its first (none: no such help)."""
        ...


class CatalogSink:
    """The cache's catalog as a :class:`ListingSink`: its :class:`~epochfs.sidecar.store.listings.
    Listings` (asked of the store at each call: a small view of its index, nothing kept here) and
    its class folders (``Store.record_class_folders``)."""

    catalog = True

    def __init__(self, store: Store) -> None:
        self.store = store

    def state(self) -> ListingState:
        return self.store.listings().state()

    def begin(self, parts: list[Part], source: str) -> int:
        return self.store.listings().begin(parts, source)

    def commit_pages(self, gen: int, pages: list[ListedPage], *, progress: str) -> list[int]:
        return self.store.listings().commit_pages(gen, [p.rows for p in pages], progress=progress)

    def finish(self, gen: int) -> tuple[int, int]:
        return self.store.listings().finish(gen)

    def record_folders(self, folders: list[str]) -> None:
        # Before the listing begins: a listing begun is resumed without its discovery, which
        # would never record them; sorted, the same on every node (store/classes.py).
        self.store.record_class_folders(folders)

    def split_points(self) -> list[str]:
        # What record_folders wrote (and the folders of any earlier epoch): read from the cache,
        # so the listing's own process, which never ran the discovery, has them too.
        return [f"{folder}/" for folder in classes.read(self.store.root).folders]


class IndexSink:
    """An ``epochfs index`` being listed, as a :class:`ListingSink`: every object as listed (no
    catalog rows), each part's pages appended, one gzip member a page, to ``<folder>/NNNNNN.gz``
    (a concatenation of members is one gzip stream; a file per part is opened for each page, not
    held open: a listing may have thousands of parts). The parts are kept in memory, so a listing
    run that failed (a throttled page) resumes in the same process from each part's last written
    page, and nothing is written twice."""

    catalog = False

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.count = 0
        """Records written."""
        self._lock = threading.Lock()
        self._generation = 0
        self._complete: int | None = None
        self._source: str | None = None
        self._parts: dict[int, Part] = {}
        """Every part as last committed (copies: the listers move theirs ahead of a commit)."""
        self._span_of: dict[int, int] = {}
        """Each part's span: the part it was split off from, back to one that began the listing."""
        self._open: dict[int, int] = {}
        """Parts not done, a span."""
        self._spans_done = 0

    def path(self, part: int) -> str:
        return os.path.join(self.folder, f"{part:06d}.gz")

    def state(self) -> ListingState:
        with self._lock:
            running = self._complete != self._generation
            parts = [dataclasses.replace(p) for _, p in sorted(self._parts.items())] if running else []
            return ListingState(self._generation, self._complete, self._source, parts)

    def begin(self, parts: list[Part], source: str) -> int:
        with self._lock:
            for n in self._parts:  # a fresh listing: nothing of an earlier one is kept
                if os.path.exists(self.path(n)):
                    os.unlink(self.path(n))
            self._generation += 1
            self._source = source
            self._parts, self._span_of, self._open = {}, {}, {}
            self._spans_done = self.count = 0
            for p in parts:
                self._keep(p, p.part)
            return self._generation

    def commit_pages(self, gen: int, pages: list[ListedPage], *, progress: str) -> list[int]:
        with self._lock:
            for page in pages:
                part, cut_from = page.rows.part, page.rows.cut_from
                if cut_from is not None:  # a split, kept with its first page (the other's new stop)
                    self._keep(cut_from, self._span_of[cut_from.part])
                if page.objects:
                    with open(self.path(part.part), "ab") as f:
                        f.write(gzip.compress(b"".join(object_record(o) for o in page.objects),
                                              compresslevel=COMPRESS_LEVEL))
                span = self._span_of.get(part.part)
                if span is None:  # a split's first page: the span of the part it was cut from
                    span = self._span_of[cut_from.part] if cut_from is not None else part.part
                self._keep(part, span)
                self.count += len(page.objects)
        return [len(p.objects) for p in pages]

    def _keep(self, part: Part, span: int) -> None:
        old = self._parts.get(part.part)
        self._parts[part.part] = dataclasses.replace(part)
        self._span_of[part.part] = span
        if old is None:
            self._open[span] = self._open.get(span, 0) + 1
        if part.done and (old is None or not old.done):
            self._open[span] -= 1
            if self._open[span] == 0:
                self._spans_done += 1

    def finish(self, gen: int) -> tuple[int, int]:
        with self._lock:
            self._complete = gen
            return self.count, 0

    def record_folders(self, folders: list[str]) -> None:
        """Nothing: class labels are a cache's; a sidecar reading the index finds its folders."""

    def split_points(self) -> list[str]:
        """None: an index's listing is written whole before anyone samples it."""
        return []

    def spans(self) -> tuple[int, int]:
        """Spans done (every part of theirs listed to its end), of the spans the listing began with."""
        with self._lock:
            return self._spans_done, len(self._open)

    def members(self) -> list[str]:
        """The parts' files in key order: the parts partition the key space, each its keys from
        its prefix or its start key on (whichever sorts later), so ordered by that, their
        concatenation is the listing in key order. Parts that listed no key have none."""
        with self._lock:
            order = sorted(self._parts.values(), key=lambda p: (max(p.prefix, p.start), p.part))
        return [path for p in order if os.path.exists(path := self.path(p.part))]


__all__ = ["CatalogSink", "IndexSink", "ListedPage", "ListingSink", "object_record"]
