"""The free space the sampler keeps on the cache's filesystem for the index, its write-ahead log
and the filesystem itself: what its room on the disk is measured against
(:mod:`epochfs.sidecar.sampler.diskspace`). In the store, below the sampler, beside the other
facts of the cache's volume that readers of the index may want.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from epochfs.sidecar.store.flocks import sampler_running
from epochfs.sidecar.store.index import free_bytes
from epochfs.sidecar.store.records import NO_ROOM_BYTES
from epochfs.sidecar.store.snapshot import DISK_FULL

MARGIN_MAX = 64 * 1024 * 1024
"""Free bytes kept for the index, its write-ahead log and the filesystem itself (at most)..."""
MARGIN_SHARE = 0.10
"""...or this share of the filesystem, when it is small..."""
MARGIN_MIN = 8 * 1024 * 1024
"""...but never less: SQLite's write-ahead log alone grows to about 4 MiB between checkpoints."""


def margin_for(fs_bytes: int) -> int:
    """The free bytes kept on a filesystem of ``fs_bytes``: :data:`MARGIN_SHARE` of it, within
    :data:`MARGIN_MIN` and :data:`MARGIN_MAX`."""
    return max(MARGIN_MIN, min(MARGIN_MAX, int(fs_bytes * MARGIN_SHARE)))


def volume_full_words(root: Path) -> str | None:
    """``disk full: ...`` when the volume of the cache at ``root`` has less than
    :data:`~.records.NO_ROOM_BYTES` free now (too little for the index to take a write: a
    transaction appends its pages to the write-ahead log); None when it has more or cannot be
    measured. The words do not change with the bytes left, so a status document that shows them
    changes only when the pause does."""
    free = free_bytes(root)
    if free is None or free >= NO_ROOM_BYTES:
        return None
    return (f"{DISK_FULL}: under {NO_ROOM_BYTES // 1024**2} MiB free on the cache's volume, too "
            "little for the index to record the pause")


def show_volume_full(doc: dict[str, Any], root: Path) -> None:
    """Show a status document's pause (``Stats.to_json``) as "disk full" while a sampler runs on
    the cache at ``root`` and its volume is full (:func:`volume_full_words`), where the index's own
    words are not already that.

    A volume filled to its last byte by another tenant takes no write of the index, so the
    sampler cannot record its "disk full" pause there (its gauge says it at once): ``epochfs
    status --cache`` and the views' ``status.json`` read the index, and would go on saying what
    it held before (``cache full``, or no pause at all). No sampler, no pause: the same rule as
    ``status --cache`` follows for every pause (the lock is asked only on a full volume)."""
    if str(doc.get("backpressure_reason") or "").startswith(DISK_FULL):
        return
    words = volume_full_words(root)
    if words is not None and sampler_running(root):
        doc["backpressure"], doc["backpressure_reason"] = True, words


__all__ = ["MARGIN_MAX", "MARGIN_MIN", "MARGIN_SHARE", "margin_for", "show_volume_full",
           "volume_full_words"]
