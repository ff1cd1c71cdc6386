"""What of a listed page goes into the catalog: safe keys of this shard, kept by the include/exclude
globs, under the object limit.

Each key is checked (:mod:`epochfs.sidecar.keys`), hashed into its shard and its rank in the
sampling order (:mod:`epochfs.sidecar.keyorder`), and filtered by the object size limit. Hostile
keys and objects over the limit are counted (the store adds them to ``skipped_total`` once per
complete listing) and logged once each (the first ``LOG_LIMIT`` of each kind, then a summary; a
relist logs only the keys it did not skip before, :mod:`.skiplog`). When a listing is sorted by
key (S3), a key that is also a folder of other keys (``a/b`` beside ``a/b/c``) cannot be shown as
both a file and a folder: the file is skipped and counted the same way, however the spans and
the planner's splits cut the key space between the two (:mod:`.clashes`).
A clash-skipped key keeps its catalog row, marked not to be fetched as a new sample: the remote
still has it, so a relist does not count it "gone from the remote", and a sample of it the cache
already holds (an upload made its name a folder later) is repaired in place when damaged, not
marked lost.

Keys of this shard that ``--include``/``--exclude`` leave out (a :class:`~epochfs.torchclient.globs.
KeyFilter`, matched against the key relative to the remote root) are never cataloged, so never
fetched; they are counted as ``excluded`` (apart from the skips, which count problems: status
shows them as the listing's "left out by --include/--exclude", not as errors), and not logged one
by one (they are a choice, not a problem). Rows an earlier listing with other globs cataloged for
them are dropped at the end with the keys gone from the remote, and counted apart from those
(:attr:`CatalogReport.dropped_left_out`): the remote may still hold them all.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from epochfs.sidecar import keyorder
from epochfs.sidecar.keys import SafeKey, Skip, check_key, is_directory_marker
from epochfs.sidecar.listing.clashes import CatalogClashes, ClashBook, ClashFinder, Edges
from epochfs.sidecar.remote import RemoteObject
from epochfs.sidecar.remote.s3list import NOT_A_SIZE, SIZE_SKIPS
from epochfs.sidecar.store import CatalogRow
from epochfs.sidecar.store.listings import Listings
from epochfs.torchclient.globs import KeyFilter

log = logging.getLogger("epochfs.catalog")

BAD_SIZE = SIZE_SKIPS[NOT_A_SIZE]
"""The skip reason of a key whose listed size is none (``<Size>abc</Size>``, ``-5``); a size past
any object's has its own (:data:`~epochfs.sidecar.remote.s3list.SIZE_SKIPS`)."""
LOG_LIMIT = 100
"""Skipped keys logged one by one per kind before only the counts are reported."""


@dataclass
class CatalogReport:
    """What one listing found (this run of it: a resumed listing counts from the resume)."""

    listed: int = 0
    """Objects the remote listed (all shards)."""
    in_shard: int = 0
    """Listed objects that belong to this node's shard (valid keys only)."""
    added: int = 0
    """Objects written to the catalog."""
    new: int = 0
    """Keys the catalog did not count before: new to it, or a file/folder name clash no more,
    less the keys found to clash (their rows stay, not counted: catalog.SHOWN)."""
    dropped: int = 0
    """Rows the complete listing's end dropped: keys it did not see any more (deleted from the
    remote) and, of those, ``dropped_left_out``."""
    dropped_left_out: int = 0
    """Of ``dropped``: rows of keys ``--include``/``--exclude`` leave out now (a narrower choice
    than the last listing's). The remote may still hold every one of them: logged apart, not as
    "gone from the remote" (20 objects in the bucket, a narrower include said "10 gone")."""
    hostile: int = 0
    excluded: int = 0
    """Keys of this shard left out by ``--include``/``--exclude`` (never cataloged nor fetched)."""
    too_large: int = 0
    clashes: int = 0
    markers: int = 0
    largest_refused: int = 0
    smallest_refused: int = 0
    pages: int = 0
    seconds: float = 0.0
    complete: bool = False
    total: int = 0
    """Keys in the catalog at the end."""
    reasons: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        parts = [
            f"catalog: {self.listed} object(s) listed in {self.seconds:.1f}s ({self.pages} page(s))",
            f"{self.in_shard} in this shard",
            f"{self.added} cataloged",
        ]
        if self.new != self.added:
            parts.append(f"{self.new} new")
        left_out = min(self.dropped_left_out, self.dropped)
        if self.dropped > left_out:
            parts.append(f"{self.dropped - left_out} gone from the remote dropped")
        if left_out:
            parts.append(f"{left_out} dropped: left out by --include/--exclude now")
        if self.hostile:
            why = ", ".join(f"{k}: {v}" for k, v in sorted(self.reasons.items()))
            parts.append(f"{self.hostile} unsafe key(s) skipped ({why})")
        if self.excluded:
            parts.append(f"{self.excluded} left out by --include/--exclude")
        if self.too_large:
            parts.append(f"{self.too_large} over the object limit skipped")
        if self.clashes:
            parts.append(f"{self.clashes} file/folder name clash(es) skipped")
        if self.markers:
            parts.append(f"{self.markers} folder marker(s) ignored")
        if not self.complete:
            parts.append("not complete")
        return ", ".join(parts)


@dataclass
class Filtered:
    rows: list[CatalogRow]
    skips: int
    """Skips to count: hostile keys, objects over the limit."""
    clashes: list[str]
    """Keys of this page or earlier ones found to be folders too: their rows are written (the
    remote has them: not "gone", and a cached sample of one is repaired in place) and marked
    clash-skipped (:data:`~epochfs.sidecar.store.catalog.SKIPPED_CLASH`, never fetched anew),
    counted as skips when marked."""
    excluded: int = 0
    """Keys of this shard left out by the include/exclude globs (a choice, not a skip)."""
    edges: Edges = field(default_factory=Edges)
    """What the page's finder cannot settle alone (:mod:`.clashes`): :meth:`PageFilter.across`
    settles it as the page commits."""


MORE = {"hostile": "unsafe keys", "too_large": "objects over the object limit",
        "clash": "file/folder name clashes"}
"""What the line that ends a kind's one-by-one log names (:data:`LOG_LIMIT`)."""


class PageFilter:
    """Turns listed pages into catalog rows; one per listing, shared by its lister threads (the
    report under a lock), with one :class:`ClashFinder` per stretch the listers read in key order
    and a :class:`~.clashes.ClashBook` for the clashes across them. ``keys``: the include/exclude
    globs (None or an empty filter: every key). ``announce``: whether a skipped key is logged one
    by one (:class:`~.skiplog.SkippedKeys`: once each, not at every relist; None: every key, up to
    :data:`LOG_LIMIT` of each kind). ``catalog``: the rows an earlier run of the listing committed,
    for the clashes across them (None: this run is the listing's first). A clash across spans is
    found from the keys listed on both sides, not from where the spans start."""

    def __init__(self, report: CatalogReport, *, seed: int, shard_index: int, shard_count: int,
                 object_limit: int, keys: KeyFilter | None = None,
                 announce: Callable[[object], bool] | None = None,
                 catalog: CatalogClashes | None = None) -> None:
        self.report = report
        self.keys = keys if keys else None
        self.seed = seed
        self.shard_index = shard_index
        self.shard_count = shard_count
        self.object_limit = object_limit
        self.announce = announce
        self.catalog = catalog
        self.book = ClashBook()
        self._logged: dict[str, int] = {}
        self._lock = threading.Lock()

    def page(self, objects: list[RemoteObject], finder: ClashFinder | None) -> Filtered:
        rows: list[CatalogRow] = []
        clashes: list[str] = []
        skips = excluded = markers = in_shard = 0
        for obj in objects:
            if is_directory_marker(obj.key):
                markers += 1
                continue
            checked = check_key(obj.key)
            if not isinstance(checked, SafeKey):
                skips += 1
                self._hostile(checked)
                continue
            key = checked.key
            if obj.size < 0:  # a listing's size that is none (s3list.NOT_A_SIZE, OVER_ANY_OBJECT)
                skips += 1
                self._hostile(Skip(key, SIZE_SKIPS.get(obj.size, BAD_SIZE)))
                continue
            cataloged = keyorder.in_shard(key, self.shard_index, self.shard_count)
            if cataloged:
                in_shard += 1
                if self.keys is not None and not self.keys.keep(key):
                    cataloged = False
                    excluded += 1
                elif obj.size > self.object_limit:
                    cataloged = False
                    skips += 1
                    self._too_large(key, obj.size)
            if finder is not None:
                for clash in finder.see(key, cataloged):
                    if self.book.claim(clash):  # not found across stretches already
                        self._clash(clash)
                        clashes.append(clash)  # its row, in this page or an earlier one, is marked
            if cataloged:
                rows.append(CatalogRow(key=key, sid=checked.sid, size=obj.size, version=obj.version,
                                       rank=keyorder.rank(self.seed, key)))
        with self._lock:  # once a page: a lock a key cost more than the rest of the filter
            report = self.report
            report.listed += len(objects)
            report.markers += markers
            report.in_shard += in_shard
            report.excluded += excluded
            report.added += len(rows) - len(clashes)
        return Filtered(rows, skips, clashes, excluded, finder.edges() if finder is not None else Edges())

    def across(self, edges: list[Edges]) -> list[str]:
        """The clashes across stretches that pages about to commit complete (their ``edges``),
        logged and counted; the commit marks them after its rows are written. One committer at
        a time (:meth:`.ClashBook.settle`)."""
        if not any(e.files or e.folders for e in edges):
            return []
        found = self.book.settle(edges, self.catalog)
        for key in found:
            self._clash(key)
        with self._lock:
            self.report.added -= len(found)  # counted as added with their pages
        return found

    def count_new(self, n: int) -> None:
        """Count ``n`` keys the index did not hold before (what a committed page added), under the
        report's lock: the listers commit pages from several threads."""
        with self._lock:
            self.report.new += n

    def _logs(self, kind: str, key: object) -> bool:
        """Whether ``key``'s skip is logged one by one: ``announce`` lets it (a key not logged
        before) and fewer than :data:`LOG_LIMIT` of its kind were logged by this listing; the
        first past the limit logs that only counts follow."""
        if self.announce is not None and not self.announce(key):
            return False
        with self._lock:
            n = self._logged[kind] = self._logged.get(kind, 0) + 1
        if n == LOG_LIMIT + 1:
            log.warning("more %s: only their count is reported from now on", MORE[kind])
        return n <= LOG_LIMIT

    def _hostile(self, skip: Skip) -> None:
        with self._lock:
            report = self.report
            report.hostile += 1
            report.reasons[skip.reason] = report.reasons.get(skip.reason, 0) + 1
        if self._logs("hostile", skip.key):
            log.warning("skipping key %r: %s", skip.key, skip.reason)

    def _too_large(self, key: str, size: int) -> None:
        with self._lock:
            report = self.report
            report.too_large += 1
            report.largest_refused = max(report.largest_refused, size)
            report.smallest_refused = size if report.too_large == 1 else min(report.smallest_refused, size)
        if self._logs("too_large", key):
            log.warning("skipping %r: %d bytes is over the object limit %d", key, size, self.object_limit)

    def _clash(self, key: str) -> None:
        with self._lock:
            self.report.clashes += 1
        if self._logs("clash", key):
            log.warning("skipping key %r: it is also a folder of other keys", key)


LEFT_OUT_BATCH = 5000
"""Catalog rows read at a time by :func:`rows_left_out`."""


def rows_left_out(listings: Listings, keys: KeyFilter, gen: int) -> int:
    """Catalog rows the end of listing ``gen`` is about to drop (not seen by it) whose keys
    ``keys`` (its ``--include``/``--exclude``) leave out: counted apart from the keys gone from
    the remote, for a narrower include logged every key it left out as "gone", the bucket
    holding them all. Called before :meth:`~epochfs.sidecar.store.listings.Listings.finish`
    drops them; read in batches of rowids, so no read is held for the whole catalog."""
    left_out = last = 0
    while True:
        rows = listings.ix.query("SELECT rowid, key FROM catalog WHERE rowid > ? AND seen < ? "
                                 "ORDER BY rowid LIMIT ?", (last, gen, LEFT_OUT_BATCH))
        left_out += sum(not keys.keep(str(key)) for _, key in rows)
        if len(rows) < LEFT_OUT_BATCH:
            return left_out
        last = int(rows[-1][0])


__all__ = ["LEFT_OUT_BATCH", "LOG_LIMIT", "MORE", "CatalogReport", "Filtered", "PageFilter",
           "rows_left_out"]
