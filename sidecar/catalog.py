"""List the remote into the store's catalog: streaming, in batches, only this node's shard.

The listing is consumed one object at a time and written to SQLite in batches, so a catalog of
millions of keys costs the memory of one batch, not of the whole list. Each key is checked
(:mod:`epochfs.sidecar.keys`), hashed into its shard and its rank in the sampling order
(:mod:`epochfs.sidecar.sampling`), and filtered by the object size limit. Hostile keys and objects
over the limit are counted in the store's ``skipped_total`` and logged once each (the first
``LOG_LIMIT`` of each kind, then a summary). When the listing is in byte order (S3), a key that is
also a folder of other keys (``a/b`` beside ``a/b/c``) cannot be shown as both a file and a folder:
the file is skipped and counted the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from epochfs.sidecar import keyorder
from epochfs.sidecar.keys import SafeKey, check_key, is_directory_marker
from epochfs.sidecar.remote import Remote
from epochfs.sidecar.store import CatalogRow, Meta, Store

log = logging.getLogger("epochfs.catalog")

LOG_LIMIT = 100
"""Skipped keys logged one by one per kind before only the counts are reported."""


@dataclass
class CatalogReport:
    """What one listing found."""

    listed: int = 0
    """Objects the remote listed (all shards)."""
    in_shard: int = 0
    """Listed objects that belong to this node's shard (valid keys only)."""
    added: int = 0
    """Objects written to the catalog."""
    hostile: int = 0
    too_large: int = 0
    clashes: int = 0
    markers: int = 0
    largest_refused: int = 0
    smallest_refused: int = 0
    seconds: float = 0.0
    reasons: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        parts = [
            f"catalog: {self.listed} object(s) listed in {self.seconds:.1f}s",
            f"{self.in_shard} in this shard",
            f"{self.added} cataloged",
        ]
        if self.hostile:
            why = ", ".join(f"{k}: {v}" for k, v in sorted(self.reasons.items()))
            parts.append(f"{self.hostile} unsafe key(s) skipped ({why})")
        if self.too_large:
            parts.append(f"{self.too_large} over the object limit skipped")
        if self.clashes:
            parts.append(f"{self.clashes} file/folder name clash(es) skipped")
        if self.markers:
            parts.append(f"{self.markers} folder marker(s) ignored")
        return ", ".join(parts)


class _ClashFinder:
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


def build_catalog(
    store: Store,
    remote: Remote,
    *,
    seed: int,
    shard_index: int,
    shard_count: int,
    object_limit: int,
    stop: threading.Event | None = None,
    batch: int = 5000,
    progress_every: int = 100_000,
    progress: Callable[[CatalogReport], None] | None = None,
) -> CatalogReport:
    """List ``remote`` into ``store``'s catalog, then number it in sampling order."""
    if batch < 1 or progress_every < 1:
        raise ValueError("batch and progress_every must be positive")
    report = CatalogReport()
    started = time.monotonic()
    rows: list[CatalogRow] = []
    finder = _ClashFinder() if remote.sorted_listing else None
    clash_keys: list[str] = []
    listing_skips = 0

    def flush() -> None:
        nonlocal rows, clash_keys
        if rows:
            report.added += store.add_catalog(rows)
            rows = []
        for key in clash_keys:
            store.mark_skipped(key)  # counts it in skipped_total
        clash_keys = []

    for obj in remote.list():
        if stop is not None and stop.is_set():
            break
        report.listed += 1
        if report.listed % progress_every == 0:
            report.seconds = time.monotonic() - started
            log.info(
                "listing %s: %d object(s) so far (%.0f/s), %d cataloged",
                remote.url, report.listed, report.listed / max(report.seconds, 1e-9),
                report.added + len(rows),
            )
            if progress is not None:
                progress(report)
        if is_directory_marker(obj.key):
            report.markers += 1
            continue
        checked = check_key(obj.key)
        if not isinstance(checked, SafeKey):
            report.hostile += 1
            report.reasons[checked.reason] = report.reasons.get(checked.reason, 0) + 1
            listing_skips += 1
            if report.hostile <= LOG_LIMIT:
                log.warning("skipping key %r: %s", checked.key, checked.reason)
            elif report.hostile == LOG_LIMIT + 1:
                log.warning("more unsafe keys: only their count is reported from now on")
            continue
        cataloged = keyorder.in_shard(checked.key, shard_index, shard_count)
        if cataloged:
            report.in_shard += 1
            if obj.size > object_limit:
                cataloged = False
                report.too_large += 1
                listing_skips += 1
                report.largest_refused = max(report.largest_refused, obj.size)
                report.smallest_refused = (
                    obj.size if report.too_large == 1 else min(report.smallest_refused, obj.size)
                )
                if report.too_large <= LOG_LIMIT:
                    log.warning("skipping %r: %d bytes is over the object limit %d", checked.key,
                                obj.size, object_limit)
        if finder is not None:
            for clash in finder.see(checked.key, cataloged):
                report.clashes += 1
                log.warning("skipping key %r: it is also a folder of other keys", clash)
                kept = [r for r in rows if r.key != clash]
                if len(kept) < len(rows):
                    rows = kept
                    listing_skips += 1
                else:
                    clash_keys.append(clash)
                    report.added -= 1  # it was written with an earlier batch
        if not cataloged:
            continue
        rows.append(
            CatalogRow(
                key=checked.key,
                sid=checked.sid,
                size=obj.size,
                version=obj.version,
                rank=keyorder.rank(seed, checked.key),
            )
        )
        if len(rows) >= batch:
            flush()
    flush()
    # A restart lists again: count only skips beyond those an earlier listing already counted.
    counted = int(store.meta(Meta.CATALOG_SKIPS_COUNTED) or 0)
    if listing_skips > counted:
        store.count_skip(listing_skips - counted)
        store.set_meta(Meta.CATALOG_SKIPS_COUNTED, str(listing_skips))
    if finder is not None and not finder.sorted:
        log.warning("the listing of %s was not sorted: file/folder name clashes were not checked",
                    remote.url)
    total = store.finalize_catalog()
    report.seconds = time.monotonic() - started
    log.info("%s; %d in the catalog", report, total)
    return report


__all__ = ["CatalogReport", "build_catalog"]
