"""botocore's client for ``s3://`` (made on first need by :class:`~.s3.S3Remote`) and the bucket's
region, apart from the remote's requests: how the client is configured, which region a presigned
URL must be signed for (presigned URLs are not redirected like requests), and the proxies the
client takes, which the fast path then takes too."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from epochfs.sidecar.remote.base import RemoteError
from epochfs.sidecar.remote.httpget import GetPool
from epochfs.sidecar.remote.s3botolist import bound_list_answers
from epochfs.sidecar.remote.s3list import readable_sizes
from epochfs.sidecar.remote.s3read import no_second_check
from epochfs.sidecar.remote.sigv4 import Presigner


def botocore_config(timeouts: tuple[float, float], concurrency: int) -> Any:
    """The client's settings: retries are the downloader's (bounded, with backoff and jitter),
    and botocore's own body check is off as the downloader checks every body against the stored
    checksum (or md5 ETag) itself, on the blocks it writes (:func:`.s3read.no_second_check`)."""
    from botocore.config import Config

    connect_timeout, read_timeout = timeouts
    return Config(
        signature_version="s3v4",
        max_pool_connections=max(10, concurrency + 4),
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"mode": "standard", "total_max_attempts": 1},
        response_checksum_validation="when_required",
    )


_LOADERS: dict[str | None, Any] = {}
"""botocore's loaders of its data files (service models, endpoints), one per data path, kept for
the life of the process."""
_LOADERS_LOCK = threading.Lock()


def share_loader(session: Any) -> None:
    """Give ``session`` this process's loader of botocore's data files for its data path.

    Each client is made from a session of its own, so that it reads the credentials and the
    configuration again (a rotated credentials file is read at the next client), and a new
    session parses S3's service model again: 0.14 s of CPU a client on this machine, 0.02 s with
    the loader kept. The loader holds only what botocore's own files say (no credentials, no
    settings); botocore fills in a few of their entries in place as it makes a client (the
    endpoints' defaults, the S3 model's paths), the same way for every client, as for the
    clients of one session: sharing it changes nothing but that time."""
    from botocore.loaders import create_loader

    data_path = session.get_config_variable("data_path")
    with _LOADERS_LOCK:
        loader = _LOADERS.get(data_path)
        if loader is None:
            loader = _LOADERS[data_path] = create_loader(data_path)
    session.register_component("data_loader", loader)


def new_client(session: Any, region: str | None, endpoint_url: str | None, config: Any) -> Any:
    """botocore's S3 client. botocore reads the AWS configuration as it makes one, before any
    request: a profile that does not exist (``AWS_PROFILE``), a config file it cannot parse, half
    a key in the environment or a region it cannot use would otherwise escape as a traceback (and
    the sidecar would restart its sampler for ever): they are a :class:`~.base.RemoteError`, a bad
    setting the sampler refuses in one line (:func:`.refusal.refusal_cause`: ``aws-config``)."""
    from botocore import exceptions as bce

    try:
        share_loader(session)
        client = session.create_client("s3", region_name=region, endpoint_url=endpoint_url, config=config)
    except (bce.ProfileNotFound, bce.ConfigParseError, bce.ConfigNotFound, bce.InvalidConfigError,
            bce.InvalidRegionError, bce.PartialCredentialsError) as e:
        raise RemoteError(f"cannot use the AWS configuration: {e}") from e
    client.meta.events.register("before-call.s3.GetObject", no_second_check)
    client.meta.events.register("before-parse.s3.ListObjectsV2", readable_sizes)  # a bad Size skips a key
    bound_list_answers(client)  # a page that never ends fails at the cap, not out of memory
    return client


def client_in_bucket_region(client: Any, bucket: str, make: Callable[[str], Any]) -> Any:
    """``client``, or one ``make(region)`` made for the bucket's own region where a HEAD of the
    bucket says it is another (nothing changes when the HEAD fails)."""
    region = client.meta.region_name
    with contextlib.suppress(Exception):
        head = client.head_bucket(Bucket=bucket)
        headers = head.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        region = headers.get("x-amz-bucket-region") or region
    if region and region != client.meta.region_name:
        client.close()
        client = make(region)
    return client


def signer_in_bucket_region(gets: GetPool, signer: Presigner, bucket: str) -> Presigner:
    """The signer of :mod:`.sigv4` for the bucket's own region: a presigned ``HeadBucket`` over
    the pool; its ``x-amz-bucket-region`` (sent with a refusal too) is the region to sign for,
    where it differs; ``signer`` itself when the HEAD fails."""
    with contextlib.suppress(Exception):
        _, headers = gets.head(signer.head_bucket(bucket))
        region = headers.get("x-amz-bucket-region")
        if region and region != signer.region:
            return Presigner(replace(signer.light, region=region))
    return signer


def client_proxies(client: Any) -> dict[str, str]:
    """The proxies of botocore's client: ``Config(proxies=...)`` when set, else the
    environment's (``HTTP_PROXY``, ``HTTPS_PROXY``, lower or upper case) unless ``NO_PROXY``
    covers the endpoint, decided for the client's endpoint URL as botocore decides it."""
    from botocore.utils import get_environ_proxies

    configured = client.meta.config.proxies
    if configured is not None:
        return dict(configured)
    return dict(get_environ_proxies(client.meta.endpoint_url))


__all__ = ["botocore_config", "client_in_bucket_region", "client_proxies", "new_client",
           "share_loader", "signer_in_bucket_region"]
