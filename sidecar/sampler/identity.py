"""Whose a cache is: one (remote, seed, shard), for which its ranks and samples were made; and
what its complete listing was made from, when that cannot be read at a start.

A cache started with another ``--remote``, ``--endpoint-url``, ``--seed`` or
``--shard-index/--shard-count`` is refused (exit 2 naming the flag): its samples would stand in
epochs for keys of another dataset or order. The endpoint is part of the remote: one bucket name
at two S3-compatible stores (two MinIO clusters, R2 and S3), or one container at two Azure
accounts, is two datasets; it is recorded as the store the backend reaches (:func:`store_endpoint`).
A cache recorded without it takes the current one.
Two spellings of one remote (``s3://b/p/`` and ``s3://b/p``) are the same remote; and a cache whose
listings found nothing (its first remote refused at the first listing, a typo in the bucket's name;
or listed to the end under a mistyped prefix, which status warns of: "check --remote's prefix")
belongs to no remote yet, so the corrected command takes it: its recorded remote, seed and shard
are replaced and its listing state forgotten, so the new remote is listed afresh (a complete
listing of 0 keys kept would stand for the new remote's and leave it unlisted).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from epochfs.sidecar.config import ConfigError, SamplerSettings
from epochfs.sidecar.listing.indexfile import IndexSource, recorded_index
from epochfs.sidecar.redact import redact
from epochfs.sidecar.remote import RemoteError
from epochfs.sidecar.remote.awsendpoint import configured_s3_endpoint
from epochfs.sidecar.remote.registry import backend_for
from epochfs.sidecar.remote.urls import same_endpoint, same_remote, split_url
from epochfs.sidecar.store import Meta, Store, classes

log = logging.getLogger("epochfs.sampler")


def check_identity(store: Store, settings: SamplerSettings) -> None:
    """A cache belongs to one (remote, seed, shard): its ranks and samples were made for them."""
    wanted = {
        # Credentials in the URL stay out of the index (a changed password is the same remote).
        Meta.SAMPLER_REMOTE: ("--remote", redact(settings.remote)),
        Meta.SAMPLER_ENDPOINT: ("--endpoint-url", store_endpoint(settings.remote, settings.endpoint_url)),
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
                    f"{flag}: the cache {settings.cache} was filled with {_shown(have)}, not "
                    f"{_shown(value)}; use another --cache (or remove this one)"
                )
            # A remote refused at its first listing (a typo in the bucket's name), or one whose
            # listing found nothing (a mistyped prefix), made nothing.
            log.info("%s: the cache %s was started with %r, which made nothing in it: it is now %r's",
                     flag, settings.cache, have, value)
            _forget_listing(store)  # before the identity: a crash between them takes it again
            store.set_meta(key, value)


def _shown(value: str) -> str:
    """A recorded identity value as the refusal names it; "" is the endpoint of none given."""
    return repr(value) if value else "the store's own endpoint"


def store_endpoint(remote: str, endpoint_url: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The endpoint of the store ``remote`` is read from, normalized and redacted
    (:func:`.urls.same_endpoint`): ``--endpoint-url`` (or ``EPOCHFS_ENDPOINT_URL``, the sidecar's
    children get it so), else the variable the backend reads in its place; "" for the store's own
    endpoint, and for ``file://`` and ``http(s)://``, which take no endpoint (a changed
    ``EPOCHFS_ENDPOINT_URL`` beside them changes no sample)."""
    scheme, host, _ = split_url(remote)
    backend = backend_for(scheme)
    if backend is None or not backend.stores_objects:
        return ""
    if endpoint_url:
        return same_endpoint(endpoint_url)
    return same_endpoint(_environ_endpoint(backend.module, host, os.environ if environ is None else environ))


def _environ_endpoint(module: str, host: str, environ: Mapping[str, str]) -> str:
    """The endpoint a backend takes from the environment when no ``--endpoint-url`` is given
    (botocore's ``AWS_ENDPOINT_URL[_S3]`` or the AWS config file's: :mod:`.awsendpoint`; gcsfs's
    ``STORAGE_EMULATOR_HOST``; the Azure account of the connection string or
    ``AZURE_STORAGE_ACCOUNT_NAME``), or ""."""
    if module == "s3":
        return configured_s3_endpoint(environ)
    if module == "fsspec":
        emulator = environ.get("STORAGE_EMULATOR_HOST", "")
        if emulator in ("", "default"):
            return ""
        return emulator if emulator.startswith(("http://", "https://")) else f"http://{emulator}"
    if module == "azure" and "@" not in host:  # an account named in the URL is the remote's own
        return _azure_account_endpoint(environ)
    return ""


def _azure_account_endpoint(environ: Mapping[str, str]) -> str:
    """The blob endpoint adlfs reaches from the environment: the connection string's
    ``BlobEndpoint``, else its account's (``AccountName``, ``EndpointSuffix``), else that of
    ``AZURE_STORAGE_ACCOUNT_NAME``; "" when none names an account."""
    parts = environ.get("AZURE_STORAGE_CONNECTION_STRING", "").split(";")
    conn = {name.strip().lower(): value.strip() for name, _, value in (part.partition("=") for part in parts)}
    if conn.get("blobendpoint"):
        return conn["blobendpoint"]
    account = conn.get("accountname") or environ.get("AZURE_STORAGE_ACCOUNT_NAME", "")
    if not account:
        return ""
    protocol = conn.get("defaultendpointsprotocol") or "https"
    return f"{protocol}://{account}.blob.{conn.get('endpointsuffix') or 'core.windows.net'}"


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


__all__ = ["check_identity", "recorded_listing", "store_endpoint"]
