"""Whose a cache is: one (remote, seed, shard), for which its ranks and samples were made; and
what its complete listing was made from, when that cannot be read at a start.

A cache started with another ``--remote``, ``--seed`` or ``--shard-index/--shard-count`` is refused
(exit 2 naming the flag): its samples would stand in epochs for keys of another dataset or order.
Two spellings of one remote (``s3://b/p/`` and ``s3://b/p``) are the same remote; and a cache whose
listings found nothing (its first remote refused at the first listing, a typo in the bucket's name;
or listed to the end under a mistyped prefix, which status warns of: "check --remote's prefix")
belongs to no remote yet, so the corrected command takes it: its recorded remote, seed and shard
are replaced and its listing state forgotten, so the new remote is listed afresh (a complete
listing of 0 keys kept would stand for the new remote's and leave it unlisted).
"""

from __future__ import annotations

import logging

from epochfs.sidecar.config import ConfigError, SamplerSettings
from epochfs.sidecar.listing.indexfile import IndexSource, recorded_index
from epochfs.sidecar.redact import redact
from epochfs.sidecar.remote import RemoteError
from epochfs.sidecar.remote.urls import same_remote
from epochfs.sidecar.store import Meta, Store, classes

log = logging.getLogger("epochfs.sampler")


def check_identity(store: Store, settings: SamplerSettings) -> None:
    """A cache belongs to one (remote, seed, shard): its ranks and samples were made for them."""
    wanted = {
        # Credentials in the URL stay out of the index (a changed password is the same remote).
        Meta.SAMPLER_REMOTE: ("--remote", redact(settings.remote)),
        Meta.SAMPLER_SEED: ("--seed", str(settings.seed)),
        Meta.SAMPLER_SHARD: ("--shard-index/--shard-count", f"{settings.shard_index}/{settings.shard_count}"),
    }
    for key, (flag, value) in wanted.items():
        have = store.meta(key)
        if have is None:
            store.set_meta(key, value)
        elif have != value and not (key == Meta.SAMPLER_REMOTE and same_remote(have) == same_remote(value)):
            if not _nothing_made(store):
                raise ConfigError(
                    f"{flag}: the cache {settings.cache} was filled with {have!r}, not {value!r}; "
                    f"use another --cache (or remove this one)"
                )
            # A remote refused at its first listing (a typo in the bucket's name), or one whose
            # listing found nothing (a mistyped prefix), made nothing.
            log.info("%s: the cache %s was started with %r, which made nothing in it: it is now %r's",
                     flag, settings.cache, have, value)
            _forget_listing(store)  # before the identity: a crash between them takes it again
            store.set_meta(key, value)


def _nothing_made(store: Store) -> bool:
    """The cache's listings found nothing and nothing is in it (no catalog row, no sample, no
    epoch cut, no class folder recorded): its ranks and samples were made for no remote, seed or
    shard yet. A complete listing of 0 keys (a mistyped prefix) is such a cache: status tells
    the user to check ``--remote``'s prefix, and the corrected command must be able to."""
    stats = store.stats()
    return (store.last_catalog_row() == 0 and stats.samples == 0 and stats.cuts_total == 0
            and not store.epochs() and not classes.read(store.root).folders)


LISTING_STATE = (Meta.LISTING_COMPLETE, Meta.LISTING_SOURCE, Meta.CATALOG_OBJECTS, Meta.LISTING_PROGRESS,
                 Meta.LISTING_FAILED, Meta.FETCH_OFFERED)
"""What a cache records of its last listing: forgotten when another remote, seed or shard takes a
cache that holds nothing, so that the sampler lists afresh (a listing whose source is not recorded
is not covered, :meth:`.Lister.covered_by`: its parts are dropped) instead of sampling the old
remote's complete listing of 0 keys, or resuming its parts. Generations only grow: kept."""


def _forget_listing(store: Store) -> None:
    """Drop :data:`LISTING_STATE` (under the sampler's lock, before any lister starts)."""
    for key in LISTING_STATE:
        store.set_meta(key, None)


def recorded_listing(settings: SamplerSettings, store: Store, error: RemoteError) -> IndexSource:
    """An ``--index`` that cannot be read at the start, over a catalog completely listed from it:
    sample from that catalog (one warning; a relist reads the file again and says so in status
    while it fails). Anything else re-raises ``error`` (a refusal, or a wait)."""
    state = store.listings().state()
    source = (recorded_index(settings.index_url, endpoint_url=settings.endpoint_url, recorded=state.source)
              if settings.index_url and state.complete is not None and not state.parts else None)
    if source is None:
        raise error
    log.warning("--index %s cannot be read now (%s): sampling from the complete catalog listed from "
                "it; a relist reads it again", redact(settings.index_url or ""), " ".join(str(error).split()))
    return source


__all__ = ["check_identity", "recorded_listing"]
