"""``az://container/prefix``: Azure Blob Storage through adlfs (fsspec's Azure filesystem, over
azure-storage-blob), listed by the SDK's flat ``List Blobs`` and read by its ranged ``Get Blob``
(:class:`AzureReader`). Its requests take the route of every other scheme (:func:`with_route`).

URLs: ``az://<container>/<prefix>``, also ``abfs://`` and ``abfss://`` (adlfs's names), and
``<scheme>://<container>@<account>.blob.core.windows.net/<prefix>`` (or ``.dfs.``), which names
the storage account in the URL. Without it the account comes from the credentials.

Credentials, from the standard environment variables, as adlfs reads them:
``AZURE_STORAGE_CONNECTION_STRING``; else ``AZURE_STORAGE_ACCOUNT_NAME`` with ``AZURE_STORAGE_ACCOUNT_KEY``
or ``AZURE_STORAGE_SAS_TOKEN`` (or a service principal: ``AZURE_STORAGE_CLIENT_ID``, ``_CLIENT_SECRET``,
``_TENANT_ID``); else, with the account name alone, azure-identity's ``DefaultAzureCredential`` (workload
identity, managed identity, the Azure CLI's login). ``--endpoint-url`` is the blob endpoint of the account
(an emulator such as Azurite, ``http://127.0.0.1:10000/devstoreaccount1``; Azure Stack; a private endpoint):
with a key or a SAS token (from those variables, or from the connection string, whose own endpoint it
replaces) it is reached by plain ``http://`` or ``https://``; with a token credential only by ``https://``.
The account is then taken from the URL, the variables, the connection string or the endpoint's first path
segment (the emulator's path-style address), in that order. A key or SAS is read once: refused later
(rotated, expired, revoked), the keys are kept until a restart reads a new one; a token renews itself.

What Azure stores for a body: the Content-MD5 property (base64), which Azure computes for every
blob written in one request (``Put Blob``: single-shot uploads, azcopy's and the SDK's for small
files) and which uploaders may set for blobs written in blocks; Azure keeps no full-object CRC
(its CRC64 checks one transfer, not the stored blob). A body read with ``checksum`` carries that
md5 as its ETag-style hex md5 (:meth:`AzureRemote.checksums`), which the downloader verifies
(``etag-md5``, :func:`~epochfs.sidecar.remote.checksums.choose`); a blob without one is checked
by its size (``size-only``). The md5 is read from the blob's properties when it is opened, so it
is the blob's own, not that of a range; the body is then read as that version or not at all
(:class:`AzureReader`). Errors are typed by :func:`~.errors.azure_kind` where they arise.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit

from epochfs.sidecar.remote.base import Reader, RemoteError, Transient
from epochfs.sidecar.remote.errors import Translated, azure_kind
from epochfs.sidecar.remote.fsspec import CONNECT_TIMEOUT, FsspecRemote, range_past_the_end, session_proxy
from epochfs.sidecar.remote.notstore import azure_listing_check
from epochfs.sidecar.remote.registry import BACKENDS
from epochfs.sidecar.remote.urls import split_url

AZURE = Translated(azure_kind)
"""The Azure SDK's, adlfs's and aiohttp's errors, typed where they arise."""

SCHEMES = next(backend.schemes for backend in BACKENDS if backend.module == __name__.rsplit(".", 1)[1])
"""The URL schemes of Azure Blob URLs: the registry's line for this module (written once)."""

CONTAINER = re.compile(r"\$root|\$logs|\$web|(?=.{3,63}$)[a-z0-9]+(?:-[a-z0-9]+)*")
"""The names Azure gives containers, its special ones too."""


def content_md5(details: Mapping[str, Any]) -> str | None:
    """The hex md5 Azure stores for a blob (its Content-MD5), from the blob's properties as adlfs
    gives them (``content_settings``: a dict or the SDK's ``ContentSettings``; the md5 as bytes,
    or base64 as the REST API writes it), or None when the blob has none."""
    got = details.get("content_settings")
    md5 = got.get("content_md5") if isinstance(got, Mapping) else getattr(got, "content_md5", None)
    if isinstance(md5, str):
        try:
            md5 = base64.b64decode(md5, validate=True)
        except (ValueError, binascii.Error):
            return None
    if isinstance(md5, (bytes, bytearray)) and len(md5) == 16:
        return bytes(md5).hex()
    return None


def quoted(etag: object) -> str:
    """An ETag as adlfs quotes it (``"0x8D..."``): the version tag of a listing and of a read."""
    return f'"{str(etag).strip(chr(34))}"' if etag else ""


class AzureReader(Reader):
    """One blob's body, by ranged ``Get Blob`` requests (one a ``readinto``: the downloader asks a
    block at a time), each with the ETag the blob had when opened (``If-Match``): a blob
    overwritten meanwhile (a block list committed at once, no Content-MD5 to catch the mix) fails
    the read as :class:`~.base.Transient`, never joins one version's bytes to another's under the
    first's ETag. Bodies come as stored (``decompress=False``): a blob written with
    ``Content-Encoding: gzip`` is the bytes its listed size and Content-MD5 describe."""

    def __init__(self, remote: AzureRemote, name: str, client: Any, properties: Any) -> None:
        self._remote, self._name, self._client, self._pos = remote, name, client, 0
        self._version = properties.etag
        self.size = int(properties.size or 0)
        self.etag = quoted(properties.etag) or None

    def read(self, n: int) -> bytes:
        buf = bytearray(max(n, 0))
        return bytes(buf[:self.readinto(memoryview(buf))])

    def readinto(self, buf: memoryview) -> int:
        want = min(len(buf), (self.size or 0) - self._pos)
        if want <= 0:
            return 0
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceModifiedError

        with AZURE:
            try:
                data = self._remote.download(self._client, self._pos, want, etag=self._version,
                                             match_condition=MatchConditions.IfNotModified)
            except ResourceModifiedError as e:  # 412
                raise Transient(f"{self._name}: overwritten while it was read (its ETag is no "
                                f"longer {self.etag}): read again") from e
        if len(data) != want:
            raise Transient(f"{self._name}: {len(data)} bytes at {self._pos}, {want} asked")
        buf[:want] = data
        self._pos += want
        return want


class AzureRemote(FsspecRemote):
    """A container (and a prefix in it) of an Azure storage account, through adlfs."""

    errors: ClassVar[Translated] = AZURE

    def __init__(self, *, url: str, fs: Any, root: str) -> None:
        super().__init__(url=url, fs=fs)
        self.root = root

    def missing_bucket(self, bucket: str) -> str:  # a missing container lists empty: no_objects
        return f"the storage account has no container {bucket!r}"

    def _check(self) -> Any:  # a web page for a listing names the endpoint (.notstore)
        return azure_listing_check(str(self._fs.service_client.url))

    def first_entry(self) -> bool:
        """Whether the root holds a blob, from one ``List Blobs`` request of one result: adlfs
        lists a folder whole (every page of it) and has no way to ask for less, so the request
        is the SDK's, on the client and the event loop adlfs made. A container that does not
        exist (404 ``ContainerNotFound``) holds nothing: :meth:`~.fsspec.FsspecRemote.no_objects`
        names it."""
        from azure.core.exceptions import ResourceNotFoundError
        from fsspec.asyn import sync

        container, _, prefix = self.root.partition("/")

        async def first() -> bool:
            async with self._fs.service_client.get_container_client(container) as client:
                pages = client.list_blobs(name_starts_with=f"{prefix}/" if prefix else None,
                                          results_per_page=1, raw_response_hook=self._check()).by_page()
                async for page in pages:
                    async for _blob in page:
                        return True
                    return False
            return False

        try:
            return bool(sync(self._fs.loop, first))
        except ResourceNotFoundError:
            return False

    def object_pages(self) -> Iterator[Sequence[dict[str, Any]]]:
        """The blobs whose names start with ``<root>/``, a page at a time, from the SDK's flat
        ``List Blobs`` on adlfs's client and loop: each blob once, named as stored (adlfs's walk
        merged ``x/a`` with the folder ``x/a/``, dropped keys with an empty segment, and its
        ``find`` holds the whole container in memory). Folder entries (``hdi_isfolder``,
        ``is_directory``) are not objects; a missing container lists nothing (:meth:`no_objects`)."""
        from azure.core.exceptions import ResourceNotFoundError
        from fsspec.asyn import sync

        container, _, prefix = self.root.partition("/")
        client = self._fs.service_client.get_container_client(container)
        pages = client.list_blobs(name_starts_with=f"{prefix}/" if prefix else None, include=["metadata"],
                                  raw_response_hook=self._check()).by_page()

        async def next_page() -> list[Any] | None:
            try:
                page = await pages.__anext__()
            except StopAsyncIteration:
                return None
            return [blob async for blob in page]

        first = True
        try:
            while True:
                try:
                    blobs = sync(self._fs.loop, next_page)
                except ResourceNotFoundError:
                    if first:  # no such container: an empty listing, checked by no_objects
                        return
                    raise
                first = False
                if blobs is None:
                    return
                yield [blob_details(container, blob) for blob in blobs]
        finally:
            with contextlib.suppress(Exception):
                sync(self._fs.loop, client.close)

    def checksums(self, details: dict[str, Any]) -> tuple[tuple[str, str] | None, str | None]:
        return None, content_md5(details)

    def download(self, client: Any, start: int, length: int, **conditions: Any) -> bytes:
        """``length`` bytes of a blob from ``start`` as stored (``decompress=False``), by one
        ranged ``Get Blob`` of the SDK's ``client`` under ``conditions`` (an ``If-Match``)."""
        from fsspec.asyn import sync

        async def get() -> bytes:
            stream = await client.download_blob(offset=start, length=length, decompress=False, **conditions)
            return bytes(await stream.readall())

        return bytes(sync(self._fs.loop, get))

    def open(self, key: str, *, checksum: bool = False) -> Reader:
        """The blob's properties (one ``Get Blob Properties``: its ETag, size and Content-MD5), then
        its body by an :class:`AzureReader` that reads that version or fails."""
        from fsspec.asyn import sync

        name = self._path(key)
        container, _, blob = name.partition("/")
        with self.errors:
            client = self._fs.service_client.get_blob_client(container, blob)
            properties = sync(self._fs.loop, client.get_blob_properties)
        reader = AzureReader(self, name, client, properties)
        if checksum:
            reader.content_md5 = content_md5({"content_settings": properties.content_settings})
        return reader

    def read_range(self, key: str, start: int, length: int) -> bytes:
        """A range of the blob as stored (a gzip-encoded blob's own bytes); past the end: empty."""
        if length <= 0:
            return b""
        container, _, blob = self._path(key).partition("/")
        with self.errors:
            try:
                return self.download(self._fs.service_client.get_blob_client(container, blob), start, length)
            except Exception as e:
                if range_past_the_end(e):
                    return b""
                raise

    def object_size(self, key: str) -> int | None:
        with self.errors:
            size = self._fs.size(self._path(key))
        return int(size) if size is not None else None


def blob_details(container: str, blob: Any) -> dict[str, Any]:
    """fsspec's details of a listed blob (the SDK's ``BlobProperties``): its name with the
    container as stored (a marker's ``/`` kept), its size, its ETag (:func:`quoted`), and ``type``
    ``directory`` for a folder entry (adlfs's ``is_directory``, a namespace's ``hdi_isfolder``)."""
    metadata = {str(k).lower(): str(v).lower() for k, v in (getattr(blob, "metadata", None) or {}).items()}
    folder = metadata.get("is_directory") == "true" or metadata.get("hdi_isfolder") == "true"
    return {"name": f"{container}/{blob.name}", "size": int(blob.size or 0),
            "etag": quoted(getattr(blob, "etag", None)), "type": "directory" if folder else "file"}


def parse_url(url: str) -> tuple[str, str | None, str]:
    """``(container, the account's host or None, prefix)`` of an ``az://`` (``abfs://``,
    ``abfss://``) URL, the host when the URL names one (``container@account.blob.core.windows.net``);
    raises :class:`RemoteError` for one without a container."""
    scheme, netloc, path = split_url(url)  # a blob name's legal "#" and "?" kept (az://c/run#1)
    if scheme not in SCHEMES:
        raise RemoteError(f"{url}: not an Azure Blob URL ({', '.join(f'{s}://' for s in SCHEMES)})")
    container, _, host = netloc.partition("@")
    prefix = path.strip("/")
    if not container:
        raise RemoteError(f"{url}: no container (az://<container>/<prefix>)")
    return container, host or None, prefix


def client_options(host: str | None, endpoint_url: str | None,
                   environ: Mapping[str, str]) -> dict[str, Any]:
    """adlfs's options for the account (``host``: the one the URL names) and the endpoint; without
    an endpoint adlfs reads the credentials from ``environ`` itself (the process's environment)."""
    account = host.split(".", 1)[0] if host else None
    if not endpoint_url:
        if not host:
            return {}
        # The blob endpoint of the account the URL names (a .dfs. host names the same account).
        return {"account_name": account, "account_host": host.replace(".dfs.", ".blob.", 1)}
    from azure.core.utils import parse_connection_string

    given = environ.get("AZURE_STORAGE_CONNECTION_STRING")
    conn = parse_connection_string(given) if given else {}
    endpoint = urlsplit(endpoint_url)
    account = (account or environ.get("AZURE_STORAGE_ACCOUNT_NAME") or conn.get("accountname")
               or endpoint.path.strip("/").split("/", 1)[0] or None)
    key = environ.get("AZURE_STORAGE_ACCOUNT_KEY") or conn.get("accountkey")
    sas = environ.get("AZURE_STORAGE_SAS_TOKEN") or conn.get("sharedaccesssignature")
    blob_endpoint = endpoint_url.rstrip("/")
    if key:
        if not account:
            raise RemoteError(f"--endpoint-url {endpoint_url}: no account name for the key "
                              "(AZURE_STORAGE_ACCOUNT_NAME)")
        return {"connection_string": f"BlobEndpoint={blob_endpoint};AccountName={account};AccountKey={key}"}
    if sas:
        return {"connection_string": f"BlobEndpoint={blob_endpoint};SharedAccessSignature={sas.lstrip('?')}"}
    if endpoint.scheme != "https":
        raise RemoteError(f"--endpoint-url {endpoint_url}: a plain http endpoint needs a key or a SAS "
                          "token (AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN or "
                          "AZURE_STORAGE_CONNECTION_STRING)")
    host = f"{endpoint.netloc}{endpoint.path}".rstrip("/")
    return {"account_name": account or endpoint.netloc.split(".", 1)[0], "account_host": host}


def without_sdk_retries(fs: Any) -> None:
    """Switch off the Azure SDK's own retries (three, 15 s and more apart, connection errors and
    5xx alike), as :mod:`.s3` switches off botocore's: the downloader retries with its own backoff,
    counts an outage and narrows its window when throttled, which it could not do while the SDK
    spent a minute on one object. adlfs has no way to pass ``retry_total``: it is set on the
    policy every client of the account shares (``_config.retry_policy``)."""
    policy = getattr(getattr(fs.service_client, "_config", None), "retry_policy", None)
    if policy is not None and hasattr(policy, "total_retries"):
        policy.total_retries = 0


SDK_REQUEST_LOG = "azure.core.pipeline.policies.http_logging_policy"
"""azure-core's logger of every request and answer (URL, headers: a dozen lines each, at INFO)."""


def quiet_sdk_logs() -> None:
    """Keep the Azure SDK's log of every request and answer (1,435 lines for 19 samples) out of
    the sampler's log; its warnings pass, and so does a level the user set on that logger.
    Failures are the downloader's and the listing's to say, once, at the level they deserve."""
    log = logging.getLogger(SDK_REQUEST_LOG)
    if log.level == logging.NOTSET:
        log.setLevel(logging.WARNING)


def with_timeouts(fs: Any, read_timeout: float) -> None:
    """Give the Azure SDK's requests ``read_timeout`` seconds to wait for the store's next byte
    (and :data:`~.fsspec.CONNECT_TIMEOUT` at most to connect), as ``--read-timeout`` says for
    every remote: the SDK waits 60 s for a read and 20 s to connect whatever the flag says (a
    store that accepts and never answers held the start, and SIGTERM). It reads both at each
    request from the connection settings of the transport every client of the account shares."""
    transport = getattr(getattr(fs.service_client, "_pipeline", None), "_transport", None)
    config = getattr(transport, "connection_config", None)
    if config is not None and hasattr(config, "read_timeout"):
        config.timeout = min(CONNECT_TIMEOUT, read_timeout)
        config.read_timeout = read_timeout


def with_route(fs: Any) -> None:
    """Send the Azure SDK's requests by the route every other scheme takes: the environment's
    proxy as botocore would take it for the account's endpoint (:func:`~.fsspec.session_proxy`),
    or straight. The SDK's transport, which every client of the account shares, would make its
    aiohttp session with ``trust_env=True``, whose own rules went straight past an ``https://``
    proxy, matched ``NO_PROXY`` on the host alone, and put a scheme-less proxy URL's credentials
    in its errors. So the transport is handed its session here, made as the SDK makes it (no
    cookies, bodies as stored) but reading no variable. Raises :class:`RemoteError` for a proxy
    that cannot be used, or a transport that takes no session, rather than going straight."""
    import aiohttp
    from fsspec.asyn import sync

    client = fs.service_client
    endpoint = str(getattr(client, "primary_endpoint", None) or getattr(client, "url", ""))
    route = session_proxy(endpoint)
    # The SDK keeps the transport in the client's pipeline (as with_timeouts reaches it).
    transport = getattr(getattr(client, "_pipeline", None), "_transport", None)
    if transport is None or not hasattr(transport, "session") or transport.session is not None:
        raise RemoteError(f"az:// requests cannot take the route of {urlsplit(endpoint).netloc}: this "
                          "Azure SDK's transport takes no aiohttp session")

    async def session() -> Any:
        return aiohttp.ClientSession(trust_env=False, cookie_jar=aiohttp.DummyCookieJar(),
                                     auto_decompress=False, **route)

    transport.session = sync(fs.loop, session)


def open_azure(url: str, *, endpoint_url: str | None = None, read_timeout: float = 30.0,
               **_: Any) -> AzureRemote:
    """``az://container/prefix`` (also ``abfs://``, ``abfss://``) through adlfs; ``endpoint_url``:
    the account's blob endpoint (an emulator, a private endpoint), else Azure's own. Its requests
    go through the environment's proxy for that endpoint (:func:`with_route`). A container name
    Azure cannot hold is refused with its rule: Azure's 400 for it read as a refused credential."""
    import adlfs  # the registry names the extra when it is missing

    quiet_sdk_logs()
    container, host, prefix = parse_url(url)
    options = client_options(host, endpoint_url, os.environ)
    if not CONTAINER.fullmatch(container):
        raise RemoteError(f"{url}: {container!r} is not an Azure container name (3 to 63 lower-case "
                          "letters, digits and single hyphens, starting and ending with a letter or digit)")
    try:
        fs = adlfs.AzureBlobFileSystem(**options, read_timeout=read_timeout, use_listings_cache=False,
                                       skip_instance_cache=True)
    except ValueError as e:  # no account, or a connection string adlfs cannot use
        raise RemoteError(f"{url}: {e} (set AZURE_STORAGE_CONNECTION_STRING, or "
                          "AZURE_STORAGE_ACCOUNT_NAME with a key, a SAS token or an Azure login)") from e
    without_sdk_retries(fs)
    with_timeouts(fs, read_timeout)
    with_route(fs)
    return AzureRemote(url=url, fs=fs, root=f"{container}/{prefix}".rstrip("/"))


__all__ = ["AZURE", "CONTAINER", "SCHEMES", "SDK_REQUEST_LOG", "AzureReader", "AzureRemote", "blob_details",
           "client_options", "content_md5", "open_azure", "parse_url", "quiet_sdk_logs", "quoted",
           "with_route", "with_timeouts", "without_sdk_retries"]
