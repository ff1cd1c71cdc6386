"""The free space the sampler keeps on the cache's filesystem for the index, its write-ahead log
and the filesystem itself: what its room on the disk is measured against
(:mod:`epochfs.sidecar.sampler.diskspace`). In the store, below the sampler, beside the other
facts of the cache's volume that readers of the index may want.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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


INDEX_ROOM = 1024 * 1024
"""Free bytes on the cache's volume under which the index may take no write: a transaction
appends its pages to the write-ahead log, and a checkpoint may need room as well."""


def volume_full_words(root: Path) -> str | None:
    """``disk full (N bytes free on the cache's volume)`` when the volume of the cache at ``root``
    has less than :data:`INDEX_ROOM` free now; None when it has more or cannot be measured.

    A volume filled to its last byte by another tenant takes no write of the index, so the
    sampler cannot record its "disk full" pause there (its gauge says it at once): ``epochfs
    status --cache`` and the views' ``status.json`` read the index, and would go on saying what
    it held before (``cache full``, or no pause at all). They measure the volume themselves."""
    try:
        st = os.statvfs(root)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if free >= INDEX_ROOM:
        return None
    return f"{DISK_FULL} ({free} bytes free on the cache's volume: too few for the index to record the pause)"


def show_volume_full(doc: dict[str, Any], root: Path) -> None:
    """Show a status document's pause (``Stats.to_json``) as :func:`volume_full_words` says, where
    the index's own words are not already "disk full"."""
    if str(doc.get("backpressure_reason") or "").startswith(DISK_FULL):
        return
    words = volume_full_words(root)
    if words is not None:
        doc["backpressure"], doc["backpressure_reason"] = True, words


__all__ = ["INDEX_ROOM", "MARGIN_MAX", "MARGIN_MIN", "MARGIN_SHARE", "margin_for", "show_volume_full",
           "volume_full_words"]
