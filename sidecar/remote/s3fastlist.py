"""A ``ListObjectsV2`` page through a presigned URL, as :class:`~.s3.S3Remote` lists on its fast path.

The URL is fetched over the pool of :mod:`.httpget` and the page read with ElementTree
(:mod:`.s3list`): no botocore response pipeline, a fraction of its CPU a key. Apart from
:mod:`.s3` because it only fetches and reads a page; which URL, which region and when botocore
asks instead are the remote's choices.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlparse

from epochfs.sidecar.remote.base import BLOCK, RemoteError, Transient
from epochfs.sidecar.remote.errors import fast_path_failure
from epochfs.sidecar.remote.httpget import GetPool, HTTPStatusError
from epochfs.sidecar.remote.librules import s3_answer
from epochfs.sidecar.remote.notstore import is_foreign, not_the_store
from epochfs.sidecar.remote.s3list import ListedXML, ListXMLError, client_error_text, parse_list_page

MAX_PAGE_BYTES = 32 << 20
"""The most of one ``ListObjectsV2`` answer that is read. A page holds at most 1,000 keys of at
most 1,024 bytes each, with their fields some 4 MiB in the worst case; an answer past this is no
page of S3's (a server streaming without end), and read whole it would take the process's memory
(7.5 GB in 20 s): it fails as a garbled page does, and is asked again."""


class PageTooLarge(Exception):
    """An answer past :data:`MAX_PAGE_BYTES`."""


def read_page(read: Callable[[int], bytes]) -> bytes:
    """The body through ``read``, at most :data:`MAX_PAGE_BYTES`; :class:`PageTooLarge` past it."""
    chunks: list[bytes] = []
    size = 0
    while chunk := read(BLOCK):
        size += len(chunk)
        if size > MAX_PAGE_BYTES:
            raise PageTooLarge(f"the answer passed {MAX_PAGE_BYTES >> 20} MiB, more than any "
                               "ListObjectsV2 page holds")
        chunks.append(chunk)
    return b"".join(chunks)


class Fallback(Exception):
    """The presigned fast path cannot serve this bucket (region redirect, auth scheme)."""


def list_fast(gets: GetPool, remote_url: str, url: str, what: str) -> ListedXML | Fallback:
    """The page of the presigned ``url`` (``what``: the request, for messages), read with
    ElementTree (:mod:`.s3list`); a :class:`Fallback` when S3 refuses the URL (301, 307, 400,
    403: botocore asks again, and redirects or reports it). Any other failure is a
    :class:`~.base.RemoteError` worded as botocore's (``cannot list ...: An error occurred
    (NoSuchBucket) ...``) raised from the typed failure a GET would give
    (:func:`~.errors.fast_path_failure`: a ``503 SlowDown`` is :class:`~.base.Throttled`).
    ``remote_url``: the remote's ``s3://`` URL, which the messages name. A 200 answer that is
    not S3's XML (a web page: :mod:`.notstore`) is :class:`~.notstore.NotTheStore`, a setting to
    fix at the start; one in S3's format that does not parse is :class:`~.base.Transient`."""
    try:
        response = gets.get(url)
        try:
            body = read_page(response.read)
        finally:
            response.close()
        content_type = response.header("Content-Type")
    except PageTooLarge as e:
        raise RemoteError(f"cannot list {remote_url}: {what}: {e}") from Transient(f"{what}: {e}")
    except Exception as e:
        if isinstance(e, HTTPStatusError) and e.status in (301, 307, 400, 403):
            return Fallback(s3_answer(e)[1])
        failure = fast_path_failure(e, key=what)
        if failure is None:
            raise RemoteError(f"cannot list {remote_url}: {e}") from e
        if failure.__cause__ is None:
            failure.__cause__ = e
        if isinstance(e, HTTPStatusError):
            text = client_error_text(e.status, e.body)
        else:  # name the endpoint, as botocore's transport errors do (never the userinfo)
            parsed = urlparse(url)
            text = f"{failure} (endpoint {parsed.scheme}://{parsed.netloc.rpartition('@')[2]})"
        raise RemoteError(f"cannot list {remote_url}: {text}") from failure
    try:
        return parse_list_page(body)
    except ListXMLError as e:
        if is_foreign(content_type, body, ("xml",)):  # a web page: --endpoint-url is another server
            foreign = not_the_store(url, 200, content_type, "an S3 ListObjectsV2 answer")
            raise RemoteError(f"cannot list {remote_url}: {foreign}") from foreign
        # A garbled or cut page of the store's: worth another try, as botocore's parser error.
        raise RemoteError(f"cannot list {remote_url}: {e}") from Transient(f"{what}: {e}")


__all__ = ["MAX_PAGE_BYTES", "Fallback", "PageTooLarge", "list_fast", "read_page"]
