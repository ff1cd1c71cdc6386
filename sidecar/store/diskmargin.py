"""The free space the sampler keeps on the cache's filesystem for the index, its write-ahead log
and the filesystem itself: what its room on the disk is measured against
(:mod:`epochfs.sidecar.sampler.diskspace`). In the store, below the sampler, beside the other
facts of the cache's volume that readers of the index may want.
"""

from __future__ import annotations

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


__all__ = ["MARGIN_MAX", "MARGIN_MIN", "MARGIN_SHARE", "margin_for"]
