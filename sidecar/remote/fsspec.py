"""Remotes through fsspec: any fsspec filesystem (``gs://`` through gcsfs) listed and opened,
and the reader of an fsspec file that :mod:`.httpindex` shares.

fsspec's and aiohttp's errors (gcsfs's ``HttpError`` too) are typed where they arise by
:func:`~epochfs.sidecar.remote.errors.aiohttp_kind`. Version tags: the GCS generation (or ETag,
mtime, updated time); a reader's ``etag``: the version it opened. A body read with ``checksum``
carries what the store keeps for it (GCS: CRC32C, md5: :func:`stored_checksums`), to verify.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import logging
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, NoReturn
from urllib.parse import urlsplit

from epochfs.sidecar.remote.base import BLOCK, Reader, Remote, RemoteError, RemoteObject
from epochfs.sidecar.remote.errors import Translated, aiohttp_kind, translate
from epochfs.sidecar.remote.refusal import NoSuchBucket
from epochfs.sidecar.remote.urls import split_url

log = logging.getLogger("epochfs.remote")

FSSPEC = Translated(aiohttp_kind)
"""fsspec's, aiohttp's and gcsfs's errors, typed where they arise."""


def range_past_the_end(e: BaseException) -> bool:
    """Whether ``e`` is a 416 answer (a range that starts at or past the end of the object), as
    gcsfs (``code``), aiohttp (``status``) or the Azure SDK (``status_code``) reports it."""
    status = getattr(e, "status", None)  # aiohttp's (its ``code`` is deprecated)
    if status is None:
        status = getattr(e, "status_code", None)
    return (status if status is not None else getattr(e, "code", None)) == 416


def stored_checksums(details: dict[str, Any]) -> tuple[tuple[str, str] | None, str | None]:
    """The checksums a store keeps for an object, from its metadata as fsspec gives it (the file's
    ``details``): GCS's ``crc32c`` (base64 of the big-endian CRC32C, the form S3's
    ``x-amz-checksum-crc32c`` takes, so the downloader verifies it as it does S3's) and
    ``md5Hash`` (base64; as a hex md5 ETag, what composite objects lack). Without them a gs://
    body was checked by its size alone."""
    crc = details.get("crc32c")
    full = ("crc32c", str(crc)) if isinstance(crc, str) and crc else None
    etag = None
    md5 = details.get("md5Hash")
    if isinstance(md5, str) and md5:
        with contextlib.suppress(ValueError):
            raw = base64.b64decode(md5, validate=True)
            etag = raw.hex() if len(raw) == 16 else None
    return full, etag


def said(e: BaseException) -> str:
    """What a failure says, for a line a user reads: fsspec's timeout (a store that accepted the
    request and did not answer within ``--read-timeout``) says nothing of itself."""
    if isinstance(e, TimeoutError) and not str(e):
        return "no answer within the read timeout (--read-timeout)"
    return str(e) or type(e).__name__


class FsspecReader(Reader):
    """An fsspec file opened for a streamed read (no read-ahead cache); ``errors`` types what its
    library raises (aiohttp's by default). An HTTP stream (``HTTPStreamFile``: no size in its
    details; ``r``: aiohttp's answer) is sized by its Content-Length, else, chunked, at its last
    chunk (one cut off raises): a body of another size than listed is Changed, not retried."""

    def __init__(self, f: Any, *, size: int | None = None, errors: Translated = FSSPEC) -> None:
        self._f = f
        self._errors = errors
        headers = getattr(getattr(f, "r", None), "headers", None) or {}
        length = str(headers.get("Content-Length", "")) if not headers.get("Content-Encoding") else ""
        size = size if size is not None else (getattr(f, "details", None) or {}).get("size")
        self.size = int(size) if size is not None else int(length) if length.isdigit() else None
        self._chunked, self._got = "chunked" in str(headers.get("Transfer-Encoding", "")).lower(), 0

    def read(self, n: int) -> bytes:
        buf = bytearray(max(n, 0))
        return bytes(buf[:self.readinto(memoryview(buf))])

    def readinto(self, buf: memoryview) -> int:
        got = 0
        with self._errors:
            while got < len(buf):
                chunk = self._f.read(len(buf) - got)
                if not chunk:
                    if self._chunked:  # its end, the last chunk read: the whole body's size
                        self.size = self._got + got
                    break
                buf[got:got + len(chunk)] = chunk
                got += len(chunk)
        self._got += got
        return got

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._f.close()


LIST_PAGE = 1000
"""Objects a listing request asks for (GCS's most)."""


def version_tag(info: dict[str, Any]) -> str:
    """An object's version tag from fsspec's details: the GCS generation, else the ETag, mtime."""
    return str(info.get("generation") or info.get("etag") or info.get("mtime") or info.get("updated") or "")


class FsspecRemote(Remote):
    """Any fsspec filesystem (``gs://``): a flat listing of the names under the root and
    ``fs.open`` per object. A filesystem whose library raises other errors, or keeps other
    checksums, than gcsfs says so by :attr:`errors` and :meth:`checksums` (:mod:`.azure`)."""

    sorted_listing = True  # a flat listing comes in name order (file/folder clashes are found)
    errors: ClassVar[Translated] = FSSPEC
    """Types the errors of the filesystem's library where they arise."""

    def __init__(self, *, url: str, fs: Any) -> None:
        self.url = url
        self._fs = fs
        _, bucket, path = split_url(url)
        self.root = (bucket + path).rstrip("/")

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def list(self) -> Iterator[RemoteObject]:
        """Every object under the root, once each with its true key, in name order: the store's
        flat listing of the names under ``<root>/`` (:meth:`object_pages`). fsspec's walk of
        folders made keys up (gcsfs: ``d//s.bin`` as a 0-byte file ``d``; adlfs: the blob ``x/a``
        merged with the folder ``x/a/``, ``x/a/b`` never listed), so the shared checks of keys
        never saw the real ones and a phantom was admitted as an empty sample. An object named as
        the root is not under it (nor under S3's prefix ``<root>/``); folder entries (a
        hierarchical namespace's) are not objects. The root not found is an empty listing, or a
        :class:`RemoteError` when its bucket does not exist (:meth:`no_objects`).

        A failure is a :class:`RemoteError` (``cannot list <url>: ...``), as S3's and the HTTP
        index's listings raise it, from the typed failure :attr:`errors` finds (when one does): the
        kind is decided here, by the rule of this filesystem's library, and read from the chain by
        :func:`~.errors.may_answer_later`, :func:`~.backoff.is_throttled` and the refusal's cause
        (:mod:`.refusal`)."""
        under = self.root + "/"
        paged = listed = False
        try:
            for page in self.object_pages():
                paged = True
                for info in page:
                    name = str(info["name"])
                    if info.get("type") == "directory" or not name.startswith(under):
                        continue
                    listed = True
                    yield RemoteObject(name[len(under):], int(info.get("size") or 0), version_tag(info))
        except FileNotFoundError as e:
            if paged:  # gone since the listing began (a bucket deleted): the listing is tried again
                self.cannot_list(e)
        except Exception as e:
            self.cannot_list(e)
        if not listed:
            self.no_objects()

    def object_pages(self) -> Iterator[Sequence[dict[str, Any]]]:
        """The objects whose names start with ``<root>/``, a page at a time, as fsspec's details
        (``name`` with the bucket, ``size``, ``type``, the version's fields): gcsfs's request for
        one page of a flat listing (``delimiter=""``: names as stored, empty segments and a
        trailing ``/`` kept) and its reading of an object's resource, which gcsfs keeps private
        (its ``find`` holds the whole bucket in memory: millions of keys); another filesystem's
        ``find`` (files only) as one page."""
        fs = self._fs
        page_of = getattr(fs, "_call_list_objects", None)
        details = getattr(fs, "_process_object", None)
        if page_of is None or details is None:
            yield list(fs.find(self.root, detail=True, withdirs=False).values())
            return
        from fsspec.asyn import sync

        bucket, _, path = self.root.partition("/")
        token = None
        while True:
            page = sync(fs.loop, page_of, bucket, delimiter="", prefix=f"{path}/" if path else None,
                        maxResults=LIST_PAGE, pageToken=token)
            yield [details(bucket, item) for item in page.get("items", [])]
            token = page.get("nextPageToken")
            if not token:
                return

    def cannot_list(self, e: Exception) -> NoReturn:
        """Raise the listing's failure ``e`` as a :class:`RemoteError` from its typed failure
        (from ``e`` itself when no rule knows it)."""
        failure = translate(e, self.errors.rule)
        raise RemoteError(f"cannot list {self.url}: {said(e)}") from (failure or e)

    def probe(self) -> None:
        """The listing's first request alone, at the start: whether the root holds anything
        (:meth:`first_entry`). It fails as :meth:`list` fails (``cannot list <url>: ...`` from
        the typed failure; a bucket that does not exist named by :meth:`no_objects`), so a store
        that refuses the listing (credentials, access, no such bucket) ends the sampler's start
        with the fix named, as S3's first page does; the listing alone meets the refusal only in
        the listing beside the sampler, which tries it again for ever. One request of one
        result, not a whole page."""
        try:
            found = self.first_entry()
        except FileNotFoundError:  # gcsfs's 404: no such prefix, or no such bucket
            found = False
        except Exception as e:
            self.cannot_list(e)
        if not found:
            self.no_objects()

    def first_entry(self) -> bool:
        """Whether the root holds an object or a folder, from one listing request: gcsfs asks
        for one result (``maxResults=1``; a second request, for an object of the root's own
        name, when the root holds nothing)."""
        return bool(self._fs.ls(self.root, detail=False, max_results=1))

    def no_objects(self) -> None:
        """The root lists no object: an empty dataset, unless the bucket itself does not exist
        (a typo in the URL), which raises :class:`RemoteError` from a
        :class:`~.refusal.NoSuchBucket` (the refusal's cause: the bucket's name)."""
        bucket = self.root.split("/", 1)[0]
        try:
            self._fs.info(bucket)
        except FileNotFoundError:
            said = self.missing_bucket(bucket)
            raise RemoteError(f"{self.url}: {said}") from NoSuchBucket(said, status=404)
        except Exception:  # a credential that may list but not read the bucket's metadata: empty
            pass

    def missing_bucket(self, bucket: str) -> str:
        """How the store says that ``bucket`` does not exist."""
        return f"no bucket {bucket!r}"

    def checksums(self, details: dict[str, Any]) -> tuple[tuple[str, str] | None, str | None]:
        """What the store keeps for an object, from its ``details``: (a full-object checksum
        ``(algorithm, base64)``, the hex md5 of the body), each None when it has none."""
        return stored_checksums(details)

    def open(self, key: str, *, checksum: bool = False) -> Reader:
        with self.errors:
            f = self._fs.open(self._path(key), "rb", block_size=BLOCK, cache_type="none")
        details = getattr(f, "details", None) or {}
        reader = FsspecReader(f, size=getattr(f, "size", None), errors=self.errors)
        reader.etag = version_tag(details) or None  # the version opened: the listing's may be older
        if checksum:
            # Not the version: as one, a repair found the md5 unlike the generation (lost for good).
            reader.checksum, reader.content_md5 = self.checksums(details)
        return reader

    def read_range(self, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        with self.errors:
            try:
                data: bytes = self._fs.cat_file(self._path(key), start=start, end=start + length)
            except Exception as e:
                if range_past_the_end(e):
                    return b""
                raise
        return data

    def object_size(self, key: str) -> int | None:
        """The size from the object's metadata (one request), for a reader that seeks: an index
        in Parquet on ``gs://`` is read by ranges (:func:`~.objects.open_ranged`)."""
        with self.errors:
            size = self._fs.size(self._path(key))
        return int(size) if size is not None else None

    def put_file(self, key: str, path: str) -> None:
        try:
            self._fs.put_file(path, self._path(key))
        except Exception as e:
            raise RemoteError(f"cannot write {self.url.rstrip('/')}/{key}: {e}") from e


BUCKET_TYPE_WARNINGS = ("Could not determine bucket type", "lack permissions for storage layout api",
                        "Could not determine if bucket")
"""gcsfs's warnings that it could not learn a bucket's layout (hierarchical or zonal) from the
Storage Control API and falls back to the plain JSON API: without Google credentials (an emulator,
a public bucket) or that API's permission, it asks again and warns again at every request (99
times for 19 objects)."""


class _OneTryLog(logging.Filter):
    """Drops gcsfs's "out of retries" record, an ERROR with a traceback that its one try now
    writes for every failed request (each 429 of a throttled bucket among them): the downloader
    and the listing say what failed, at the level it deserves. Lets each of gcsfs's bucket-layout
    warnings (:data:`BUCKET_TYPE_WARNINGS`) through once per run: it says the same of every
    request, and the fallback it names is what every later request takes."""

    def __init__(self) -> None:
        super().__init__()
        self._said: set[str] = set()  # a race between two threads lets a second one through at most

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "out of retries on exception" in message:
            return False
        kind = next((kind for kind in BUCKET_TYPE_WARNINGS if kind in message), None)
        if kind is None:
            return True
        first = kind not in self._said
        self._said.add(kind)
        return first


@functools.cache
def one_try_gcs() -> type:
    """gcsfs's filesystem with its own retries off, as :mod:`.s3` switches off botocore's and
    :mod:`.azure` the Azure SDK's: gcsfs tries each request six times, 1 to 32 s apart
    (``retry_request``), so a GCS server that was down took 34 s to fail one GET, and the
    downloader, which retries with its own backoff, counts an outage and narrows its window when
    throttled, could do none of it meanwhile. gcsfs binds the count when its class is made (a
    decorator on ``_request``, no option), so this subclass wraps the undecorated request again
    with one try."""
    import gcsfs
    from gcsfs.retry import retry_request

    gcs_log = logging.getLogger("gcsfs")
    if not any(isinstance(f, _OneTryLog) for f in gcs_log.filters):
        gcs_log.addFilter(_OneTryLog())
    request = gcsfs.GCSFileSystem._request
    undecorated = getattr(request, "__wrapped__", None)
    if undecorated is None:  # another gcsfs: its own retries stay
        return gcsfs.GCSFileSystem
    return type("OneTryGCSFileSystem", (gcsfs.GCSFileSystem,),
                {"_request": retry_request(retries=1)(undecorated)})


CONNECT_TIMEOUT = 10.0
"""Seconds to open a connection to the store (as :mod:`.s3` and :mod:`.httpindex` give it)."""


def request_timeout(read_timeout: float) -> Any:
    """aiohttp's timeout for each request: ``read_timeout`` seconds of silence on the socket, and
    :data:`CONNECT_TIMEOUT` to connect; no bound on the whole request, which a large body read
    slowly but steadily may take long to fill. Without it gcsfs waits on a store that accepts
    and never answers for as long as the connection stays open (minutes: the start's first
    request never ended, and neither did the sampler, SIGTERM or not)."""
    import aiohttp

    return aiohttp.ClientTimeout(total=None, sock_connect=min(CONNECT_TIMEOUT, read_timeout),
                                 sock_read=read_timeout)


def session_proxy(url: str) -> dict[str, Any]:
    """The options of an aiohttp session whose requests go to ``url``'s host: through the
    environment's proxy as botocore would send them there (:func:`.httpproxy.environ_proxy`, the
    route of the ``s3://`` remote), ``{"proxy": its URL}``, or straight, ``{}``. aiohttp reads no
    proxy variable unless told to (``trust_env``, whose rules are its own: an ``https://`` proxy
    dropped, ``NO_PROXY`` matched on the host alone, ``~/.netrc`` read), so gcsfs and fsspec's HTTP
    filesystem went straight out of a cluster whose ``s3://`` traffic took the proxy. Says once
    per remote which proxy it takes (credentials masked). Raises :class:`RemoteError` for a proxy
    URL that cannot be used (``socks5://``), or an aiohttp whose sessions take no proxy (an old
    one), rather than a request that goes straight."""
    import inspect

    import aiohttp

    from epochfs.sidecar.remote.httpproxy import Proxy, environ_proxy

    scheme = urlsplit(url).scheme
    try:
        proxy = environ_proxy(url)
    except ValueError as e:
        raise RemoteError(f"the proxy for {scheme}:// URLs ({scheme.upper()}_PROXY): {e}") from e
    if proxy is None:
        return {}
    if "proxy" not in inspect.signature(aiohttp.ClientSession).parameters:
        raise RemoteError(f"{scheme.upper()}_PROXY is set, and aiohttp {aiohttp.__version__} cannot "
                          "send a session's requests through a proxy (a newer one can)")
    log.info("requests to %s go through the proxy %s", urlsplit(url).netloc.rpartition("@")[2],
             Proxy.from_url(proxy))  # str() masks the credentials
    return {"proxy": proxy}


def open_gcs(url: str, *, endpoint_url: str | None = None, read_timeout: float = 30.0,
             **_: Any) -> Remote:
    """``gs://bucket/prefix`` (also ``gcs://``) through gcsfs, with its own retries off
    (:func:`one_try_gcs`); ``endpoint_url``: another GCS endpoint (an emulator, a private
    endpoint), else gcsfs's own (or ``STORAGE_EMULATOR_HOST``); ``read_timeout``: seconds a
    request may wait for the store's next byte (:func:`request_timeout`). Its requests go through
    the environment's proxy for that endpoint, as an ``s3://`` remote's do (:func:`session_proxy`).

    Without gcsfs's caches: the listing beside the sampler keeps this remote and lists it
    again and again, and gcsfs would answer every relisting from the folders it listed first
    (objects written since never seen, deleted ones still listed), and hand the next remote of
    the same options the same filesystem, caches and all."""
    options: dict[str, Any] = {"endpoint_url": endpoint_url} if endpoint_url else {}
    fs = one_try_gcs()(**options, requests_timeout=request_timeout(read_timeout), use_listings_cache=False,
                       skip_instance_cache=True)
    # The session is made at the first request, for the endpoint gcsfs settled on (endpoint_url,
    # STORAGE_EMULATOR_HOST or Google's; ``base``: its API's URL there): that endpoint's route.
    fs.session_kwargs = {**fs.session_kwargs, **session_proxy(fs.base)}
    return FsspecRemote(url=url, fs=fs)


__all__ = ["CONNECT_TIMEOUT", "FSSPEC", "FsspecReader", "FsspecRemote", "one_try_gcs", "open_gcs",
           "range_past_the_end", "request_timeout", "said", "session_proxy", "stored_checksums"]
