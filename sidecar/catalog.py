"""List the remote into the store's catalog: in parallel spans, page by page, only this shard.

:func:`build_catalog` runs a listing to the end (or resumes the one a restart interrupted) and
returns its report; the sampler instead runs it beside its fetch loop
(:class:`~epochfs.sidecar.listing.ListingThread`), so fetching starts with the first pages. How
spans are found, filtered and written is in :mod:`epochfs.sidecar.listing`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from epochfs.sidecar.listing import CatalogReport, Lister, Source, source_for
from epochfs.sidecar.listing.filter import LOG_LIMIT
from epochfs.sidecar.remote import Remote
from epochfs.sidecar.store import Store


def build_catalog(
    store: Store,
    remote: Remote | None,
    *,
    seed: int,
    shard_index: int,
    shard_count: int,
    object_limit: int,
    stop: threading.Event | None = None,
    threads: int = 4,
    batch: int = 1000,
    progress_every: int = 100_000,
    progress: Callable[[CatalogReport], None] | None = None,
    source: Source | None = None,
    fresh: bool = False,
) -> CatalogReport:
    """List ``remote`` (or ``source``) into ``store``'s catalog to the end: the running listing
    resumed, else a new one (``fresh``: always a new one, a relist). ``batch``: objects per page
    of a remote listed as one stream."""
    if source is None:
        if remote is None:
            raise ValueError("a remote or a source is needed")
        source = source_for(remote, page=batch)
    lister = Lister(store, source, seed=seed, shard_index=shard_index, shard_count=shard_count,
                    object_limit=object_limit, threads=threads, stop=stop,
                    progress_every=progress_every, on_page=progress)
    return lister.run(fresh=fresh or not lister.needed())


__all__ = ["LOG_LIMIT", "CatalogReport", "build_catalog"]
