"""``s3://bucket/prefix`` through botocore, with presigned GETs on the worker threads.

Listing is a paged ``ListObjectsV2``: :meth:`S3Remote.list_page` is one page (a prefix, a
delimiter, a start key), which the parallel listers of :mod:`epochfs.sidecar.listing` call; it is
presigned and fetched like a GET and read with ElementTree (:mod:`.s3list`).
Each object is one plain ``GetObject`` (a presigned URL fetched on the worker thread,
the pool of :mod:`.httpget`) whose body is read in large blocks, so a download costs one
request (``fs.open`` would add a HEAD and ranged reads). Retries are left to the downloader
(bounded attempts, backoff with jitter), so botocore's own retries are switched off.

The URLs are signed by :mod:`.sigv4` (the standard library) where that gives botocore's own URL
(an explicit endpoint, keys in the environment), and botocore's client is then made on first
need only (a fallback, a ranged read, a HEAD of a part, an upload): its import and client cost
~0.4 s, which a sampler that needs neither does not spend before its first GET.

The bodies are read, and what vouches for them (the stored checksum, an md5 ETag) taken from the
answer, by the readers of :mod:`.s3read`. Failures come out typed where they arise
(:mod:`.errors`): botocore's by :func:`~.librules.botocore_kind`, the fast path's S3 error
answers (their ``<Code>`` read as XML), proxy refusals and socket errors by
:func:`~.errors.fast_path_failure`. A refusal of the credentials themselves has a new botocore session
and client made, which read them again (:mod:`.s3creds`). The interface this class implements is
:class:`~.base.Remote`; :mod:`.registry` opens it for ``s3://``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from epochfs.sidecar.remote import s3boto
from epochfs.sidecar.remote.base import (
    ListedPage,
    PagedRemote,
    PageWalk,
    Reader,
    Remote,
    RemoteError,
    RemoteObject,
)
from epochfs.sidecar.remote.errors import fast_path_failure
from epochfs.sidecar.remote.httpget import DEFAULT_RECV_BUFFER, GetPool, HTTPStatusError
from epochfs.sidecar.remote.librules import s3_answer
from epochfs.sidecar.remote.pageahead import PageAhead
from epochfs.sidecar.remote.s3client import (
    botocore_config,
    client_in_bucket_region,
    client_proxies,
    new_client,
    signer_in_bucket_region,
)
from epochfs.sidecar.remote.s3creds import CredentialRereads
from epochfs.sidecar.remote.s3fastlist import Fallback as _Fallback
from epochfs.sidecar.remote.s3fastlist import list_fast
from epochfs.sidecar.remote.s3list import ListedXML, checked_size
from epochfs.sidecar.remote.s3outside import within_root
from epochfs.sidecar.remote.s3read import BOTOCORE, CHECKSUM_MODE, BotoReader, FastReader
from epochfs.sidecar.remote.sigv4 import Presigner, environ_proxies, light_settings
from epochfs.sidecar.remote.trust import resolve_trust
from epochfs.sidecar.remote.urls import split_url

log = logging.getLogger("epochfs.remote")

class S3Remote(Remote):
    """``s3://bucket/prefix`` through one botocore client (thread-safe), used from any thread.

    Object GETs take a fast path: the URL is presigned on the calling (worker) thread and fetched
    on that same thread over a pool of keep-alive connections (:mod:`.httpget`),
    the body read straight into the downloader's buffer. That skips botocore's request and
    response pipeline (about 0.4 ms of CPU per object) and keeps every byte off any shared thread.
    Every GET asks for the object's stored checksum (``x-amz-checksum-mode: ENABLED``, signed
    into the URL), which the downloader checks while streaming. Listing pages take the same path
    (:meth:`list_page`). What the fast path cannot serve (a region redirect, no credentials) goes
    through the botocore client directly. Both go through the same proxy (the one botocore's
    client takes, :meth:`_proxies`) and trust the same CA bundle (:mod:`.trust`).

    Plain botocore rather than s3fs/aiobotocore: nothing here needs an event loop any more, and
    leaving s3fs, aiobotocore and aiohttp out saves about 0.2 s of start-up (imports, a second
    client, the I/O thread).
    """

    sorted_listing = True

    def __init__(
        self,
        *,
        url: str,
        endpoint_url: str | None = None,
        concurrency: int = 32,
        connect_timeout: float = 10.0,
        read_timeout: float = 30.0,
    ) -> None:
        if importlib.util.find_spec("botocore") is None:  # pragma: no cover - a sidecar dependency
            raise RemoteError("s3:// needs botocore: pip install 'epochfs[sidecar]'")
        _, bucket, path = split_url(url)  # a key's legal "#" and "?" kept (s3://b/run#1: run#1)
        if not bucket:
            raise RemoteError(f"no bucket in {url!r} (expected s3://bucket/prefix)")
        self.url = url
        self.bucket = bucket
        self.prefix = path.strip("/")
        self._concurrency = concurrency
        self._timeouts = (connect_timeout, read_timeout)
        self._endpoint_url = endpoint_url
        self._boto: Any = None
        self._boto_lock = threading.Lock()
        self._creds = CredentialRereads(self._forget_client)  # a rotated credentials file read again
        self._region_lock = threading.Lock()
        light = light_settings(endpoint_url)
        self._trust = resolve_trust(profiles=light is None)  # one CA bundle: the fast path's and botocore's
        # Presigned URLs without botocore where they are the same URL (sigv4.light_settings):
        # botocore's import and client (~0.4 s) are then made on first need, off the way to the
        # first GET, and each GET is signed in microseconds instead of botocore's ~0.3 ms.
        self._signer: Presigner | None = Presigner(light) if light is not None else None
        pool = partial(GetPool, connect_timeout=connect_timeout, read_timeout=read_timeout,
                       tls=self._trust.context, max_idle=concurrency + 4, recv_buffer=DEFAULT_RECV_BUFFER)
        self._fast = True
        self._fast_list = True  # off once botocore lists what a presigned listing was refused
        self._ahead: PageAhead[ListedPage] = PageAhead()
        endpoint = light.endpoint if light is not None else self._client.meta.endpoint_url
        self._trust.checked(endpoint)  # a bundle named that cannot be loaded: refused at the start
        try:
            self._gets = pool(proxies=self._proxies())
        except ValueError as e:  # a proxy URL the fast path cannot use: botocore decides
            log.warning("S3 presigned GETs unavailable (%s); using botocore for every GET", e)
            self._gets = pool()
            self._fast = False
            self._signer = None
        proxy = self._gets.proxy_for(endpoint)
        if proxy is not None and self._fast:
            log.info("S3 requests go through the proxy %s", proxy)  # str() masks credentials
        # The bucket's region is learned from a refusal, not asked first: a HEAD of the bucket
        # before the first LIST is a round trip on the way to the first GET that the LIST answers
        # as well (a missing bucket or denied access comes back typed from it). A presigned
        # request signed for another region is refused (301, 400), and then the bucket's HEAD
        # says which region to sign for (_learn_region) and the request is made again.
        self._region_known = self._signer is None  # botocore's own client checks it (client_in_bucket_region)
        if self._signer is None:
            try:
                self._client.generate_presigned_url("get_object", Params={"Bucket": self.bucket, "Key": "x"})
            except Exception as e:
                log.info("S3 presigned GETs unavailable (%s); using botocore for every GET", e)
                self._fast = False

    @property
    def _client(self) -> Any:
        """The botocore client, made on first use (at once where :mod:`.sigv4` cannot sign): the
        fallbacks, ranged reads, heads and uploads, and every presigned URL without a signer."""
        client = self._boto
        if client is None:
            with self._boto_lock:
                if self._boto is None:
                    self._boto = self._make_client()
                client = self._boto
        return client

    def _make_client(self) -> Any:
        import botocore.session

        self._config = botocore_config(self._timeouts, self._concurrency)
        self._session = botocore.session.get_session()
        if self._signer is not None:  # the signer's region, made the bucket's first (_learn_region)
            self._learn_region()
            return self._new_client(self._signer.region)
        return client_in_bucket_region(self._new_client(), self.bucket, self._new_client)

    def _forget_client(self) -> Any:
        """Drop botocore's client (returned): the next use makes a new session and client, which
        read the credentials again (botocore reads a shared credentials file only then)."""
        with self._boto_lock:
            client, self._boto = self._boto, None
        return client

    def _learn_region(self) -> bool:
        """Once, after a presigned request was refused (or before botocore's client is made):
        sign for the bucket's own region (:func:`.s3client.signer_in_bucket_region`). True when
        the region changed, so the refused request is worth making again with the new signer."""
        if self._region_known:
            return False
        with self._region_lock:
            signer = self._signer
            if self._region_known or signer is None:
                return False
            learned = signer_in_bucket_region(self._gets, signer, self.bucket)
            self._signer = learned
            self._region_known = True
        if learned is not signer:
            log.info("S3 bucket %s is in region %s: signing for it", self.bucket, learned.region)
        return learned is not signer

    def _presign(self, operation: str, params: dict[str, Any], headers: dict[str, str]) -> str:
        """A presigned URL of ``operation``: by :mod:`.sigv4` where it can, else botocore."""
        signer = self._signer
        if signer is not None:
            if operation == "get_object":
                return signer.get_object(params["Bucket"], params["Key"], headers)
            return signer.list_objects_v2(params["Bucket"], params)
        with BOTOCORE:
            url: str = self._client.generate_presigned_url(operation, Params=params, ExpiresIn=900)
        return url

    def _new_client(self, region: str | None = None) -> Any:
        return new_client(self._trust.pin(self._session), region, self._endpoint_url, self._config)

    def _proxies(self) -> dict[str, str]:
        """The proxies of botocore's own client (:func:`.s3client.client_proxies`), so listing and
        the fast path take one route; the environment's where no client is made."""
        if self._signer is not None:  # no botocore Config, so no configured proxies
            return environ_proxies(self._signer.light.endpoint)
        return client_proxies(self._client)

    def on_first_sent(self, callback: Callable[[], None]) -> None:
        """:meth:`.Remote.on_first_sent`: after the next presigned request (the first LIST) is
        written to the pool's connection."""
        self._gets.on_sent = callback

    def _full_key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def list(self) -> Iterator[RemoteObject]:
        """Every object, page after page, until a page says nothing follows (:class:`PageWalk`)."""
        walk = PageWalk(self.url)
        token: str | None = None
        start_after = ""
        while True:
            page = self.list_page("", token=token, start_after=start_after)
            yield from page[0]
            step = walk.next(page, str(page[0][-1].key) if page[0] else start_after)
            if step is None:
                return
            token, start_after = step

    def list_page_ahead(self, prefix: str = "") -> None:
        """Send the request of ``list_page(prefix)`` (the first page under ``prefix``, its other
        arguments left as they are) now, on a thread; the first such call takes its answer.
        The sampler asks so for a new cache's first page before it opens its index."""
        self._ahead.start(prefix, partial(self._list_page, prefix))

    def list_page(self, prefix: str, *, start_after: str = "", token: str | None = None,
                  delimiter: bool = False, max_keys: int = 1000) -> ListedPage:
        """One ``ListObjectsV2`` page of keys under ``prefix`` (relative to the remote root) after
        ``start_after`` (or from ``token``): (objects, common prefixes with ``delimiter``, the
        token of the next page or None) and ``IsTruncated`` (:class:`ListedPage`). Keys and
        prefixes come back relative to the root.

        Like a GET, the page is a presigned URL fetched over the pool (:meth:`_list_fast`: no
        botocore response pipeline, a fraction of its CPU a key); botocore lists when that path is
        off or refused (a region redirect, an auth scheme).

        The first page under ``prefix`` may have been asked ahead (:meth:`list_page_ahead`): its
        answer is taken then."""
        if not (start_after or token or delimiter) and max_keys >= 1000:
            ahead = self._ahead.take(prefix)
            if ahead is not None:
                return ahead
        return self._list_page(prefix, start_after=start_after, token=token, delimiter=delimiter,
                               max_keys=max_keys)

    def _list_page(self, prefix: str, *, start_after: str = "", token: str | None = None,
                   delimiter: bool = False, max_keys: int = 1000) -> ListedPage:
        """:meth:`list_page` itself, without a page asked ahead."""
        root = f"{self.prefix}/" if self.prefix else ""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": root + prefix,
                                  "MaxKeys": max(1, min(1000, max_keys))}
        if token:
            kwargs["ContinuationToken"] = token
        elif start_after:
            kwargs["StartAfter"] = root + start_after
        if delimiter:
            kwargs["Delimiter"] = "/"
        generation = self._creds.generation
        fast = self._list_fast(kwargs) if self._fast and self._fast_list else None
        if isinstance(fast, _Fallback) and self._learn_region():  # signed for the bucket's region now
            fast = self._list_fast(kwargs)
        if isinstance(fast, ListedXML):
            cut = len(root)
            inside = within_root(root, [k for k, _, _ in fast.objects], fast.prefixes, self.url)
            return ListedPage([RemoteObject(key[cut:], size, etag) for key, size, etag in fast.objects
                               if key.startswith(root)],
                              [p[cut:] for p in inside],
                              fast.next_token if fast.truncated and fast.next_token else None,
                              truncated=fast.truncated)
        try:
            page = self._client.list_objects_v2(**kwargs)
        except Exception as e:
            self._creds.refused(e)
            raise RemoteError(f"cannot list {self.url}: {e}") from e
        if fast is not None and self._fast_list and generation == self._creds.generation:
            # botocore listed what the presigned URL was refused: stop using it for listing.
            log.warning("S3 presigned listing refused (%s); using botocore for every page", fast)
            self._fast_list = False
        contents = page.get("Contents", ())
        inside = within_root(root, [str(item["Key"]) for item in contents],
                             [str(p["Prefix"]) for p in page.get("CommonPrefixes", ())], self.url)
        objects = [RemoteObject(str(item["Key"])[len(root):], checked_size(int(item.get("Size", -1))),
                                str(item.get("ETag", "")).strip('"'))
                   for item in contents if str(item["Key"]).startswith(root)]
        prefixes = [p[len(root):] for p in inside]
        truncated = bool(page.get("IsTruncated"))
        more = page.get("NextContinuationToken") if truncated else None
        return ListedPage(objects, prefixes, str(more) if more else None, truncated=truncated)

    def _list_fast(self, kwargs: dict[str, Any]) -> ListedXML | _Fallback:
        """The page of ``kwargs`` through a presigned URL (:func:`.s3fastlist.list_fast`);
        ``encoding-type=url`` is asked, as botocore asks it, so keys XML 1.0 cannot carry come
        back (decoded by the parser)."""
        url = self._presign("list_objects_v2", {**kwargs, "EncodingType": "url"}, {})
        return list_fast(self._gets, self.url, url, f"list {kwargs['Prefix']!r}")

    def open(self, key: str, *, checksum: bool = False) -> Reader:
        """Open ``key``; S3 is always asked for the object's stored checksum (checksum mode), which
        the reader hands to the downloader as ``checksum`` (``checksum`` is ignored: there is no
        cost in asking). A refusal of the credentials has them read again (:mod:`.s3creds`)."""
        with self._creds.watching():
            return self._open(key)

    def _open(self, key: str) -> Reader:
        """:meth:`open` itself."""
        generation = self._creds.generation
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self._full_key(key),
                                  "ChecksumMode": "ENABLED"}
        refused: _Fallback | None = None
        if self._fast:
            fast = self._open_fast(key, kwargs)
            if isinstance(fast, _Fallback) and self._learn_region():  # signed for its region now
                fast = self._open_fast(key, kwargs)
            if isinstance(fast, FastReader):
                return fast
            refused = fast
        with BOTOCORE:
            response = self._client.get_object(**kwargs)
        if refused is not None and self._fast and generation == self._creds.generation:
            # botocore got what the presigned URL was refused (with the same credentials): stop
            # using the fast path.
            log.warning("S3 presigned GETs refused (%s); using botocore for every GET", refused)
            self._fast = False
        return BotoReader(response)

    def _open_fast(self, key: str, kwargs: dict[str, Any]) -> FastReader | _Fallback:
        """The presigned GET of ``kwargs``: its reader, or a :class:`_Fallback` when S3 refuses the
        URL (301, 307, 400, 403: botocore tries it again, and redirects or reports it); any other
        failure raised, typed (:func:`~.errors.fast_path_failure`)."""
        url = self._presign("get_object", kwargs, CHECKSUM_MODE)
        try:
            return FastReader(self._gets.get(url, CHECKSUM_MODE))
        except Exception as e:
            if isinstance(e, HTTPStatusError) and e.status in (301, 307, 400, 403):
                return _Fallback(s3_answer(e)[1])
            failure = fast_path_failure(e, key=key)
            if failure is None:
                raise
            raise failure from e

    def paged(self) -> PagedRemote:
        return self

    def read_range(self, key: str, start: int, length: int) -> bytes:
        """One ranged ``GetObject`` through botocore (index headers, Parquet footers)."""
        return s3boto.read_range(self._client, self.bucket, self._full_key(key), start, length)

    def object_size(self, key: str) -> int:
        """``HeadObject``'s ContentLength (a Parquet inventory file read by ranges)."""
        return s3boto.head_size(self._client, self.bucket, self._full_key(key))

    def part_size(self, key: str, part: int) -> int:
        """Size of part ``part`` (1-based) of a multipart object: the downloader re-hashes a body
        into its multipart ETag with it."""
        return s3boto.head_size(self._client, self.bucket, self._full_key(key), part)

    def put_file(self, key: str, path: str) -> None:
        """Upload the file at ``path`` as ``key`` (``epochfs index --out s3://``)."""
        s3boto.put_file(self._client, self.bucket, self._full_key(key), path)

    def close(self) -> None:
        self._gets.close()  # also ends reads blocked on a stalled body
        if self._boto is not None:
            with contextlib.suppress(Exception):
                self._boto.close()


def open_s3(url: str, *, endpoint_url: str | None = None, concurrency: int = 32,
            read_timeout: float = 30.0, **_: object) -> S3Remote:
    """The registry's opener for ``s3://``."""
    return S3Remote(url=url, endpoint_url=endpoint_url, concurrency=concurrency, read_timeout=read_timeout)


__all__ = ["S3Remote", "open_s3"]
