"""Remotes through fsspec: any fsspec filesystem (``gs://`` through gcsfs, adapted by :mod:`.gcs`)
listed and opened, and the reader of an fsspec file that :mod:`.httpindex` shares.

fsspec's and aiohttp's errors (gcsfs's ``HttpError`` too) are typed where they arise by
:func:`~epochfs.sidecar.remote.errors.aiohttp_kind`. Version tags: the GCS generation (or ETag,
mtime, updated time); a reader's ``etag``: the version it opened. A body read with ``checksum``
carries what the store keeps for it (GCS: CRC32C, md5: :func:`stored_checksums`), to verify.
"""

from __future__ import annotations

import base64
import contextlib
import logging
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar, NoReturn
from urllib.parse import urlsplit

from epochfs.sidecar.remote.base import BLOCK, Changed, Reader, Remote, RemoteError, RemoteObject
from epochfs.sidecar.remote.errors import Translated, aiohttp_kind, may_answer_later, translate
from epochfs.sidecar.remote.gcs import gcs_rereads, one_try_gcs
from epochfs.sidecar.remote.refusal import NoSuchBucket
from epochfs.sidecar.remote.s3creds import CredentialRereads
from epochfs.sidecar.remote.urls import split_url

log = logging.getLogger("epochfs.remote")

FSSPEC = Translated(aiohttp_kind)
"""fsspec's, aiohttp's and gcsfs's errors, typed where they arise."""


def range_past_the_end(e: BaseException) -> bool:
    """Whether ``e`` is a 416 answer (a range that starts at or past the end of the object), as
    gcsfs (``code``), aiohttp (``status``) or the Azure SDK (``status_code``) reports it."""
    status = getattr(e, "status", None)  # aiohttp's (its ``code`` is deprecated)
    status = getattr(e, "status_code", None) if status is None else status
    return (status if status is not None else getattr(e, "code", None)) == 416


def stored_checksums(details: dict[str, Any]) -> tuple[tuple[str, str] | None, str | None]:
    """The checksums a store keeps for an object, from fsspec's ``details``: GCS's ``crc32c``
    (base64 of the big-endian CRC32C, the form of S3's ``x-amz-checksum-crc32c``, verified as
    S3's is) and ``md5Hash`` (base64; as a hex md5 ETag, what composite objects lack)."""
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
    """An fsspec file read as a stream (no read-ahead cache); ``errors`` types what its library
    raises (aiohttp's by default). An HTTP stream (``HTTPStreamFile``, ``r``: aiohttp's answer) is
    sized by its Content-Length, else, chunked, at its last chunk: another size than listed is Changed."""

    def __init__(self, f: Any, *, size: int | None = None, errors: Translated = FSSPEC) -> None:
        self._f = f
        self._errors = errors
        headers = getattr(getattr(f, "r", None), "headers", None) or {}
        length = str(headers.get("Content-Length", "")) if not headers.get("Content-Encoding") else ""
        size = size if size is not None else (getattr(f, "details", None) or {}).get("size")
        self.size = int(size) if size is not None else int(length) if length.isdigit() else None
        self._chunked, self._got = "chunked" in str(headers.get("Transfer-Encoding", "")).lower(), 0

    def read(self, n: int) -> bytes:
        """``n`` bytes, fewer only at the body's end."""
        buf = bytearray(max(n, 0))
        view, got = memoryview(buf), 0
        while got < n and (more := self.readinto(view[got:])):
            got += more
        return bytes(buf[:got])

    def readinto(self, buf: memoryview) -> int:
        """What one read of the stream brings (0 at its end), as a socket's ``readinto``: the
        caller's rate floor (:mod:`.ratefloor`) sees each read, where a buffer filled whole in one
        call made a body shorter than the buffer one read that ends it, never cut however slowly
        it trickled."""
        if not len(buf):
            return 0
        with self._errors:
            chunk = self._f.read(len(buf))
            if not chunk:
                if self._chunked:  # its end, the last chunk read: the whole body's size
                    self.size = self._got
                return 0
            if len(chunk) > len(buf):  # a library that inflated the body as it read it
                raise Changed(f"{len(chunk)} bytes read where {len(buf)} were asked")
            buf[:len(chunk)] = chunk
        self._got += len(chunk)
        return len(chunk)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._f.close()


class Ranges:
    """An object read a range at a time (``cat_file``, as gcsfs's file reads it) up to its size."""

    def __init__(self, fs: Any, path: str, details: dict[str, Any]) -> None:
        self._fs, self._path, self.details, self._at = fs, path, details, 0
        self.size = int(details.get("size") or 0)

    def read(self, n: int) -> bytes:
        """The next ``n`` bytes (fewer only at the listed size). A range answered short before
        the object's end is :class:`~.base.Changed` at once, never a part read to ask the rest of:
        a proxy's or a portal's page answering every range (``200 text/html``, 72 bytes) made one
        object thousands of GETs, each advancing by the page's length."""
        n = min(n, self.size - self._at)
        data: bytes = self._fs.cat_file(self._path, start=self._at, end=self._at + n) if n > 0 else b""
        if len(data) < n:
            raise Changed(f"{len(data)} bytes answered for the {n} asked at {self._at} (the listing "
                          f"said {self.size}): the object is shorter, or something else answered")
        self._at += len(data)
        return data

    def close(self) -> None:  # nothing held between ranges: each is its own request
        return None


LIST_PAGE = 1000  # objects a listing request asks for (GCS's most)


def version_tag(info: dict[str, Any]) -> str:
    """An object's version tag from fsspec's details: the GCS generation, else the ETag, mtime."""
    return str(info.get("generation") or info.get("etag") or info.get("mtime") or info.get("updated") or "")


class FsspecRemote(Remote):
    """Any fsspec filesystem (``gs://``): a flat listing of the names under the root, and each
    object read by ranges. Another library's errors and checksums: :attr:`errors`, :meth:`checksums`."""

    sorted_listing = True  # a flat listing comes in name order (file/folder clashes are found)
    errors: ClassVar[Translated] = FSSPEC
    """Types the errors of the filesystem's library where they arise."""

    def __init__(self, *, url: str, fs: Any, rereads: CredentialRereads | None = None) -> None:
        self.url = url
        self._fs = fs
        _, bucket, path = split_url(url)
        self.root = (bucket + path).rstrip("/")
        self.rereads = rereads
        """Told of each failure, has the credentials read again after the store refuses them (gs://)."""

    def _watching(self) -> AbstractContextManager[None]:
        """Reports the block's failure or success to :attr:`rereads`, where there is one."""
        return self.rereads.watching() if self.rereads is not None else nullcontext()

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def list(self) -> Iterator[RemoteObject]:
        """Every object under the root, once each with its true key, in name order: the store's
        flat listing of the names under ``<root>/`` (:meth:`object_pages`); fsspec's walk of
        folders made keys up (gcsfs: ``d//s.bin`` as a 0-byte file ``d``), which the shared checks
        of keys never saw. An object named as the root is not under it (nor under S3's prefix
        ``<root>/``); folder entries are not objects. The root not found is an empty listing, or a
        :class:`RemoteError` when its bucket does not exist (:meth:`no_objects`). A failure is a
        :class:`RemoteError` (``cannot list <url>: ...``) from the typed failure :attr:`errors`
        finds, read by :func:`~.errors.may_answer_later`, :func:`~.backoff.is_throttled` and
        :mod:`.refusal`."""
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
        """The objects whose names start with ``<root>/``, a page at a time, as fsspec's details:
        gcsfs's private request for one page of a flat listing (``delimiter=""``: names as stored;
        its ``find`` holds the whole bucket in memory); another filesystem's ``find`` as one page."""
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
        """Raise the listing's failure ``e`` as a :class:`RemoteError` from its typed failure."""
        if self.rereads is not None:  # a refusal of the credentials has them read again
            self.rereads.refused(e)
        failure = translate(e, self.errors.rule)
        raise RemoteError(f"cannot list {self.url}: {said(e)}") from (failure or e)

    def probe(self) -> None:
        """The listing's first request alone (one result, :meth:`first_entry`), at the start: it
        fails as :meth:`list` fails (a missing bucket named by :meth:`no_objects`), so a store that
        refuses the listing ends the sampler's start with the fix named, as S3's first page does,
        not the listing beside the sampler, which would try it again for ever."""
        try:
            found = self.first_entry()
        except FileNotFoundError:  # gcsfs's 404: no such prefix, or no such bucket
            found = False
        except Exception as e:
            self.cannot_list(e)
        if not found:
            self.no_objects()

    def first_entry(self) -> bool:
        """Whether the root holds an object or a folder, from one listing request of one result
        (``maxResults=1``; gcsfs asks for an object of the root's name when the root is empty)."""
        return bool(self._fs.ls(self.root, detail=False, max_results=1))

    def no_objects(self) -> None:
        """The root lists no object: an empty dataset, unless the bucket does not exist (a typo),
        a :class:`RemoteError` from a :class:`~.refusal.NoSuchBucket` (the refusal's cause). A
        store that could not answer the bucket's question (down, throttling, a reset) fails the
        listing as any of its requests would, to be asked again: taken for an empty prefix, a
        typo'd bucket met during a passing 503 ran as an idle sampler. Credentials that may list
        the bucket but not read its metadata (denied, or refused for that request alone: the
        listing went through with them) leave it an empty prefix, said in the log."""
        bucket = self.root.split("/", 1)[0]
        try:
            self._fs.info(bucket)
        except FileNotFoundError:
            missing = self.missing_bucket(bucket)
            raise RemoteError(f"{self.url}: {missing}") from NoSuchBucket(missing, status=404)
        except Exception as e:
            failure = translate(e, self.errors.rule)
            if failure is not None and may_answer_later(failure):  # not a refusal: asked again
                self.cannot_list(e)
            log.warning("%s lists no object and its bucket's metadata cannot be read (%s): taken "
                        "for an empty prefix", self.url, said(e))

    def missing_bucket(self, bucket: str) -> str:  # in the store's own words
        return f"no bucket {bucket!r}"

    def checksums(self, details: dict[str, Any]) -> tuple[tuple[str, str] | None, str | None]:
        """What the store keeps for an object, from its ``details``: (a full-object checksum
        ``(algorithm, base64)``, the hex md5 of the body), each None when it has none."""
        return stored_checksums(details)

    def object_details(self, path: str) -> dict[str, Any] | None:
        """The object's resource by one request (gcsfs's ``_get_object``), where gcsfs's file asks
        ``info``, which adds a listing of a folder of that name (3 requests before the body, one a
        billed objects.list). None for a filesystem without it (its own file is opened)."""
        get = getattr(self._fs, "_get_object", None)
        if get is None:
            return None
        from fsspec.asyn import sync

        return dict(sync(self._fs.loop, get, path))

    def open(self, key: str, *, checksum: bool = False) -> Reader:
        path = self._path(key)
        with self._watching(), self.errors:
            known = self.object_details(path)
            f = (Ranges(self._fs, path, known) if known is not None
                 else self._fs.open(path, "rb", block_size=BLOCK, cache_type="none"))
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
        with self._watching(), self.errors:
            try:
                data: bytes = self._fs.cat_file(self._path(key), start=start, end=start + length)
            except Exception as e:
                if range_past_the_end(e):
                    return b""
                raise
        return data

    def object_size(self, key: str) -> int | None:
        """The size from the object's metadata, for a reader that seeks (:func:`~.objects.open_ranged`)."""
        with self._watching(), self.errors:
            size = self._fs.size(self._path(key))
        return int(size) if size is not None else None

    def put_file(self, key: str, path: str) -> None:
        try:
            self._fs.put_file(path, self._path(key))
        except Exception as e:
            raise RemoteError(f"cannot write {self.url.rstrip('/')}/{key}: {e}") from e


CONNECT_TIMEOUT = 10.0
"""Seconds to open a connection to the store (as :mod:`.s3` and :mod:`.httpindex` give it)."""


def request_timeout(read_timeout: float) -> Any:
    """aiohttp's timeout for each request: ``read_timeout`` seconds of silence on the socket, and
    :data:`CONNECT_TIMEOUT` to connect; no bound on the whole request (a large body read slowly
    but steadily). Without it gcsfs waits on a store that accepts and never answers for as long
    as the connection stays open, SIGTERM or not."""
    import aiohttp

    return aiohttp.ClientTimeout(total=None, sock_connect=min(CONNECT_TIMEOUT, read_timeout),
                                 sock_read=read_timeout)


def session_proxy(url: str) -> dict[str, Any]:
    """The options of an aiohttp session whose requests go to ``url``'s host: through the
    environment's proxy as botocore would send them there (:func:`.httpproxy.environ_proxy`),
    ``{"proxy": its URL}``, or straight, ``{}``: aiohttp's own ``trust_env`` rules (an ``https://``
    proxy dropped, ``NO_PROXY`` matched on the host alone) are not the ``s3://`` remote's. Says
    once which proxy it takes (credentials masked). Raises :class:`RemoteError` for a proxy URL
    that cannot be used (``socks5://``), or an aiohttp whose sessions take no proxy."""
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
    """``gs://bucket/prefix`` (also ``gcs://``) through gcsfs, its own retries off
    (:func:`~.gcs.one_try_gcs`); ``endpoint_url``: another GCS endpoint (an emulator), else gcsfs's own
    (or ``STORAGE_EMULATOR_HOST``); ``read_timeout``: :func:`request_timeout`; through the
    environment's proxy for that endpoint (:func:`session_proxy`); its credentials read again when
    GCS refuses them (:func:`~.gcs.gcs_rereads`). Without gcsfs's caches: they would answer every
    relisting from the first (new objects never seen, deleted ones listed)."""
    # gcsfs adds "/storage/v1/...": an endpoint's own trailing "/" made "//storage", a 404.
    options: dict[str, Any] = {"endpoint_url": endpoint_url.rstrip("/")} if endpoint_url else {}
    fs = one_try_gcs()(**options, requests_timeout=request_timeout(read_timeout), use_listings_cache=False,
                       skip_instance_cache=True)
    # The session is made at the first request, for the endpoint gcsfs settled on (endpoint_url,
    # STORAGE_EMULATOR_HOST or Google's; ``base``: its API's URL there): that endpoint's route.
    # Bodies as stored: an object written with Content-Encoding gzip is the bytes its size and its
    # CRC32C describe, which aiohttp would otherwise inflate.
    fs.session_kwargs = {**fs.session_kwargs, **session_proxy(fs.base), "auto_decompress": False}
    return FsspecRemote(url=url, fs=fs, rereads=gcs_rereads(fs))


__all__ = ["CONNECT_TIMEOUT", "FSSPEC", "FsspecReader", "FsspecRemote", "one_try_gcs", "open_gcs",
           "range_past_the_end", "request_timeout", "said", "session_proxy", "stored_checksums"]
