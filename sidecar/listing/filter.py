"""What of a listed page goes into the catalog: safe keys of this shard, kept by the include/exclude
globs, under the object limit.

Each key is checked (:mod:`epochfs.sidecar.keys`), hashed into its shard and its rank in the
sampling order (:mod:`epochfs.sidecar.keyorder`), and filtered by the object size limit. Hostile
keys and objects over the limit are counted (the store adds them to ``skipped_total`` once per
complete listing) and logged once each (the first ``LOG_LIMIT`` of each kind, then a summary).
When a span lists in byte order (S3), a key that is also a folder of other keys (``a/b`` beside
``a/b/c``) cannot be shown as both a file and a folder: the file is skipped and counted the same
way. Across spans, a file whose name is a span boundary folder (``cat`` beside ``cat/``) is too.
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
from dataclasses import dataclass, field

from epochfs.sidecar import keyorder
from epochfs.sidecar.keys import SafeKey, Skip, check_key, is_directory_marker
from epochfs.sidecar.remote import RemoteObject
from epochfs.sidecar.store import CatalogRow
from epochfs.sidecar.store.listings import Listings
from epochfs.torchclient.globs import KeyFilter

log = logging.getLogger("epochfs.catalog")

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


class ClashFinder:
    """Finds keys that are also folders of later keys, in a listing sorted by UTF-8 bytes.

    Keeps a stack of recent keys whose folder range ``[key + "/", key + "0")`` is still ahead;
    the ranges are nested, so a stack suffices and stays as short as the deepest nesting. Only
    keys this node cataloged are reported (another shard's file is another node's business).
    """

    def __init__(self) -> None:
        self._stack: list[tuple[str, bool]] = []
        self._last: str | None = None
        self.sorted = True

    def see(self, key: str, cataloged: bool) -> list[str]:
        """Feed the next key; returns earlier cataloged keys now known to be folders (to skip)."""
        if self._last is not None and key < self._last:
            self.sorted = False
        self._last = key
        if not self.sorted:
            return []
        clashes = []
        while self._stack and key >= self._stack[-1][0] + "0":
            self._stack.pop()
        for i in range(len(self._stack) - 1, -1, -1):
            f, was_cataloged = self._stack[i]
            if key.startswith(f + "/"):
                if was_cataloged:
                    clashes.append(f)
                del self._stack[i]
        self._stack.append((key, cataloged))
        return clashes


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


class PageFilter:
    """Turns listed pages into catalog rows; one per listing, shared by its lister threads (the
    report under a lock), with one :class:`ClashFinder` per span. ``keys``: the include/exclude
    globs (None or an empty filter: every key)."""

    def __init__(self, report: CatalogReport, *, seed: int, shard_index: int, shard_count: int,
                 object_limit: int, boundaries: set[str], keys: KeyFilter | None = None) -> None:
        self.report = report
        self.keys = keys if keys else None
        self.seed = seed
        self.shard_index = shard_index
        self.shard_count = shard_count
        self.object_limit = object_limit
        self.boundaries = boundaries
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
            boundary = cataloged and key + "/" in self.boundaries
            if boundary:
                self._clash(key)
            if finder is not None:
                for clash in finder.see(key, cataloged and not boundary):
                    self._clash(clash)
                    clashes.append(clash)  # its row, in this page or an earlier one, is marked
            if cataloged:
                rows.append(CatalogRow(key=key, sid=checked.sid, size=obj.size, version=obj.version,
                                       rank=keyorder.rank(self.seed, key)))
                if boundary:
                    clashes.append(key)
        with self._lock:  # once a page: a lock a key cost more than the rest of the filter
            report = self.report
            report.listed += len(objects)
            report.markers += markers
            report.in_shard += in_shard
            report.excluded += excluded
            report.added += len(rows) - len(clashes)
        return Filtered(rows, skips, clashes, excluded)

    def count_new(self, n: int) -> None:
        """Count ``n`` keys the index did not hold before (what a committed page added), under the
        report's lock: the listers commit pages from several threads."""
        with self._lock:
            self.report.new += n

    def _hostile(self, skip: Skip) -> None:
        with self._lock:
            report = self.report
            report.hostile += 1
            report.reasons[skip.reason] = report.reasons.get(skip.reason, 0) + 1
            n = report.hostile
        if n <= LOG_LIMIT:
            log.warning("skipping key %r: %s", skip.key, skip.reason)
        elif n == LOG_LIMIT + 1:
            log.warning("more unsafe keys: only their count is reported from now on")

    def _too_large(self, key: str, size: int) -> None:
        with self._lock:
            report = self.report
            report.too_large += 1
            report.largest_refused = max(report.largest_refused, size)
            report.smallest_refused = size if report.too_large == 1 else min(report.smallest_refused, size)
            n = report.too_large
        if n <= LOG_LIMIT:
            log.warning("skipping %r: %d bytes is over the object limit %d", key, size, self.object_limit)

    def _clash(self, key: str) -> None:
        with self._lock:
            self.report.clashes += 1
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


__all__ = ["LEFT_OUT_BATCH", "LOG_LIMIT", "CatalogReport", "ClashFinder", "Filtered", "PageFilter",
           "rows_left_out"]
