"""The remote interface: what the listing, the downloader and the index writers ask of a dataset's
store, and the typed failures a remote raises.

A backend (one module of this package, named in :mod:`.registry`) subclasses :class:`Remote`
and :class:`Reader`. Every capability a caller uses is declared here, so no caller probes a
remote with ``getattr``; the optional ones answer None (or fall back on the required ones) by
default, as mountpoint-s3's ``ObjectClient`` answers ``read_part_size``:

==================  ===========================================================================
capability          default (a backend overrides it when its store does better)
==================  ===========================================================================
``list``            required: every object, as a stream
``open``            required: one object as a :class:`Reader`
``paged``           None: the remote lists in one stream; else a :class:`PagedRemote` (S3's
                    ``ListObjectsV2``: a page under a prefix after a start key), listed in parallel
``read_range``      opens the object and skips to ``start``; backends read the range alone
``part_size``       None: the sizes of a multipart upload's parts are unknown
``put_file``        raises :class:`RemoteError`: the remote cannot be written
``Reader.readinto`` copies what ``read`` returns; backends fill the buffer straight from the socket
``Reader.checksum`` None: no full-object checksum stored with the body
``Reader.etag_is_md5``  True: a plain 32-hex ETag is the body's md5 (False: S3 with KMS keys)
==================  ===========================================================================

Failures: :class:`RemoteError`, a remote that cannot be used at all (bad URL, missing library,
listing refused), stops the command. :class:`RemoteFailure` and its kinds say what one object's
failure means for another try; each backend raises them from ``open`` and from its reader's
``read``, translated from its library's exceptions where they arise (:mod:`.errors`):

============  =========================================================  ============================
kind          raised for                                                 the downloader
============  =========================================================  ============================
NotFound      404, ``NoSuchKey``, ENOENT: gone since the listing         skips it at once
Changed       not what the listing said (its size differs)               skips it at once
Denied        403, 407, EACCES, other 4xx, a TLS certificate that fails  skips it at once
Transient     truncated or garbled body, checksum mismatch, TLS cut      retries; then skips it
Throttled     S3 ``SlowDown`` (or another throttling code), HTTP 429,    returns at once, not counted
              GCS ``rateLimitExceeded``: the store asks for fewer        against the retries; the
              requests                                                   sampler keeps the key and
                                                                         narrows its fetch window
Unavailable   connection refused/reset, timeout, other 5xx               retries; then counts it
                                                                         toward an outage
Credentials-  S3 ``InvalidAccessKeyId``, ``SignatureDoesNotMatch``,      as Unavailable (the keys are
Refused       ``ExpiredToken``, ``InvalidToken``, no credentials found;  kept); S3 and GCS read
              Azure ``AuthenticationFailed`` and the other codes of      their credentials again
              ``AZURE_CREDENTIAL_CODES``; GCS's 401, a token not renewed
============  =========================================================  ============================

Of the rest of epochfs this imports only :data:`BLOCK`, from the store: the store reads and hashes
at the same size, and it may import nothing above it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar, Protocol

from epochfs.sidecar.store.digests import BLOCK  # what a reader hands the writer at a time

PassOver = Callable[[str, BaseException], bool]
"""Asked by :meth:`Remote.walk` about a folder it may not read: its key prefix (``a/b/``) and the
error; True to go on without it."""


@dataclass(frozen=True)
class RemoteObject:
    """One listed object: key relative to the remote root (bytes when not UTF-8), size, version
    (the S3 ETag, the GCS generation, ``mtime:<ns>`` for files, the HTTP ETag or Last-Modified)."""

    key: str | bytes
    size: int
    version: str


class ListedPage(tuple[list[RemoteObject], list[str], "str | None"]):
    """One page of a paged listing; it unpacks as (objects, common prefixes, next page's token or
    None). :attr:`truncated` (S3's ``IsTruncated``) is what says more follows, not the token:
    some S3-compatible stores and proxies say a page is truncated and send no token, and reading
    "no token" as "the end" would report a partial listing complete."""

    truncated: bool

    def __new__(cls, objects: list[RemoteObject], prefixes: list[str], token: str | None, *,
                truncated: bool) -> ListedPage:
        page = super().__new__(cls, (objects, prefixes, token))
        page.truncated = truncated
        return page

    def __getnewargs_ex__(self) -> tuple[tuple[object, ...], dict[str, object]]:
        """Pickled with its flag (a tuple subclass is rebuilt through ``__new__``)."""
        return tuple(self), {"truncated": self.truncated}


MAX_EMPTY_PAGES = 100
"""Empty pages in a row that say more follows, followed by their tokens, before a walk gives up:
S3 sends some (a long run of delete markers in a versioned bucket), a store that sends them for
ever would be listed for ever."""


class PageWalk:
    """Where each next page of a walk over a paged listing starts, refusing what would never end:
    the same continuation token twice (the same pages again, for ever), an empty truncated page
    with no token (no way on), more than :data:`MAX_EMPTY_PAGES` empty truncated pages in a row."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._tokens: set[str] = set()
        self._empty = 0

    def next(self, page: ListedPage, after: str) -> tuple[str | None, str] | None:
        """(continuation token, start after) of the page after ``page``, or None when ``page``
        ends the listing. ``after``: the last key listed so far, where a page truncated without a
        token goes on from (``StartAfter``). Raises :class:`RemoteError` naming what the server
        did when following it would loop."""
        objects, prefixes, token = page
        if not page.truncated:
            return None
        if token is not None:
            if token in self._tokens:
                raise RemoteError(f"cannot list {self.url}: the server sent the same continuation "
                                  f"token twice ({token!r}); following it would list for ever")
            self._tokens.add(token)
        if objects or prefixes:
            self._empty = 0
        else:
            self._empty += 1
            if token is None:
                raise RemoteError(f"cannot list {self.url}: the server sent an empty page that says "
                                  "more follows (IsTruncated) with no continuation token")
            if self._empty > MAX_EMPTY_PAGES:
                raise RemoteError(f"cannot list {self.url}: the server sent {self._empty} empty "
                                  "pages in a row that each say more follows (IsTruncated)")
        return (token, "") if token is not None else (None, after)


# ---------------------------------------------------------------------------- typed failures
class RemoteError(Exception):
    """A remote that cannot be used at all (missing library, unreachable, bad URL)."""


class RemoteFailure(Exception):
    """One object could not be fetched. The class says whether another try may work
    (``retry``) and whether the failure is the remote's as a whole (``outage``); ``status`` is
    the HTTP status when the remote answered with one."""

    retry: ClassVar[bool] = False
    outage: ClassVar[bool] = False
    throttled: ClassVar[bool] = False
    credentials: ClassVar[bool] = False

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotFound(RemoteFailure):
    """The object is gone (404, ``NoSuchKey``, ENOENT): another try finds nothing either."""


class Changed(RemoteFailure):
    """The object is not what the listing said (its size differs): the listing is stale for it."""


class Denied(RemoteFailure):
    """The remote, or the way to it, will not serve this request as made (403, a proxy's 407,
    EACCES, a TLS certificate that does not verify, any other 4xx): a configuration problem,
    which another try would meet again."""


class Transient(RemoteFailure):
    """Worth another try: a truncated or garbled response, a checksum mismatch, a TLS
    connection cut mid-body. Given up on, it says nothing about the remote as a whole."""

    retry = True


class Unavailable(Transient):
    """Worth another try, and a sign that the remote as a whole is down or overloaded
    (connection refused or reset, a timeout, a 5xx that is not throttling): objects given up on
    this way in a row make the sampler pause and keep their keys (the outage breaker)."""

    outage = True


class CredentialsRefused(Unavailable):
    """The store refuses the credentials themselves, whatever the object (S3's
    ``InvalidAccessKeyId``, ``SignatureDoesNotMatch``, ``ExpiredToken``, ``InvalidToken``; none
    found; Azure's ``AuthenticationFailed``; GCS's 401): a property of the remote as a whole, never
    of one object, so never a reason to skip one. Retried and counted toward an outage as
    :class:`Unavailable` (the keys are kept while it lasts), while the remote reads its credentials
    again (a rotated Secret's file, a renewed token: :mod:`.s3creds`, :mod:`.gcs`; Azure's key comes
    from the environment, read at the start). At the start it is a refusal all the same: the sampler
    exits naming the credentials (:func:`~.errors.may_answer_later`)."""

    credentials = True


class Throttled(Transient):
    """The store asks for fewer requests (S3 ``503 SlowDown`` and its other throttling codes,
    HTTP 429, GCS ``rateLimitExceeded``). It says nothing about the object, so it is never a
    reason to skip one, and nothing about the remote being down, so it is not an outage either:
    the answer is to ask less often. The downloader returns it at once (not counted against
    ``--retries``, no sleep in a download slot); the sampler keeps the key, fetches it again
    after a full-jitter delay and halves its fetch window (:mod:`epochfs.sidecar.sampler.throttle`)."""

    throttled = True


Kind = type[RemoteFailure]


# ---------------------------------------------------------------------------- the interface
class Reader(ABC):
    """An open remote object: ``read(n)`` returns up to n bytes, ``b""`` at the end; a failure
    is raised as a :class:`RemoteFailure`."""

    size: int | None = None
    """Length announced by the remote (Content-Length, file size), None when unknown."""
    etag: str | None = None
    """The ETag of what is being read, when the remote gives one."""
    checksum: tuple[str, str] | None = None
    """The full-object checksum the remote stored for the body, ``(algorithm, base64)`` (S3's
    ``x-amz-checksum-*``), for the downloader to verify the body against; None when it has none."""
    content_md5: str | None = None
    """The md5 (hex) the store keeps for the body apart from its version (GCS's ``md5Hash``,
    Azure's Content-MD5), for the downloader to verify the body against; the ETag stays the
    object's version tag. None when the store keeps none (S3's md5 is its ETag)."""
    etag_is_md5: bool = True
    """False when the remote says its ETags are not md5s of the content (S3 objects encrypted
    with KMS or customer keys), so a 32-hex ETag vouches for nothing."""

    @abstractmethod
    def read(self, n: int) -> bytes: ...

    def readinto(self, buf: memoryview) -> int:
        """Fill ``buf`` with up to ``len(buf)`` bytes; 0 at the end. The downloader reads every
        body this way, into one reused buffer per thread; this default copies what :meth:`read`
        returns, a backend that can fills the buffer straight from its socket or file."""
        data = self.read(len(buf))
        n = len(data)
        buf[:n] = data
        return n

    def close(self) -> None:
        """Release the body (its connection); reads after it fail."""
        return None


class PagedRemote(Protocol):
    """A remote that lists a page at a time (S3's ``ListObjectsV2``), which the listing reads in
    parallel: keys under a prefix after a start key, or folders with the delimiter."""

    url: str
    """The remote's URL, which names it in the errors of a walk over its pages (:class:`PageWalk`)."""

    def list_page(self, prefix: str, *, start_after: str = "", token: str | None = None,
                  delimiter: bool = False, max_keys: int = 1000) -> ListedPage:
        """One page of keys under ``prefix`` (relative to the remote root) after
        ``start_after`` (or from ``token``): (objects, common prefixes with ``delimiter``, the
        token of the next page or None), and whether more follows (:attr:`ListedPage.truncated`:
        a truncated page may come with no token, and may hold no key). Keys and prefixes come
        back relative to the root."""
        ...


def _byte_order(key: bytes) -> tuple[bytes, ...]:
    return (key,)


class Remote(ABC):
    """What the listing, the downloader and the index writers need from a remote."""

    url: str
    sorted_listing: ClassVar[bool] = False
    """True when :meth:`list` yields keys in UTF-8 byte order (file/folder clashes can be found)."""

    def walk_order(self) -> Callable[[bytes], tuple[bytes, ...]] | None:
        """The order :meth:`list` yields keys in, as a sort key of a key's UTF-8 bytes (a resumed
        listing skips to the key after the last it committed); None where it promises none.
        Byte order where :attr:`sorted_listing`."""
        return _byte_order if self.sorted_listing else None

    @abstractmethod
    def list(self) -> Iterator[RemoteObject]:
        """Every object under the remote's root, as a stream (the first keys before the last page)."""

    def walk(self, pass_over: PassOver) -> Iterator[RemoteObject]:
        """:meth:`list`, where a remote that walks folders asks ``pass_over`` about a folder it
        may not read (its key prefix, the error): True, the walk goes on without it; False, the
        listing fails. A remote that walks no folders lists as :meth:`list` (a refusal there is
        the whole listing's)."""
        return self.list()

    @abstractmethod
    def open(self, key: str, *, checksum: bool = False) -> Reader:
        """Open ``key`` for reading; ``checksum`` asks the remote to send the checksum it stored
        for the body, when it has one, as the reader's ``checksum`` (S3: checksum mode), for the
        downloader to verify the body against. Raises a :class:`RemoteFailure` saying what went
        wrong."""

    def paged(self) -> PagedRemote | None:
        """The remote's paged listing when it lists a page at a time under a prefix after a start
        key (S3); None: it lists only as one stream (:meth:`list`)."""
        return None

    def probe(self) -> None:
        """The listing's first request alone, read at the start (:func:`~epochfs.sidecar.listing.
        firstrequest.first_request`), so that a store refusing the listing ends the start with the
        fix named instead of meeting it only in the listing beside the sampler. Nothing by
        default: a paged remote's first page is read at the start anyway, and a ``file://``
        folder fails when it is opened; a remote that walks a bucket (``gs://``, ``az://``) or
        reads an index file (``http(s)://``: its first bytes) overrides it. Raises
        :class:`RemoteError` as :meth:`list` would."""
        return None

    def read_range(self, key: str, start: int, length: int) -> bytes:
        """Up to ``length`` bytes of ``key`` from byte ``start`` (fewer at the end of the object;
        ``b""`` past it). This default reads the object from its start; a backend asks its store
        for the range alone."""
        reader = self.open(key)
        try:
            skip = start
            while skip > 0:
                dropped = reader.read(min(skip, BLOCK))
                if not dropped:
                    return b""
                skip -= len(dropped)
            parts: list[bytes] = []
            left = length
            while left > 0:
                chunk = reader.read(min(left, BLOCK))
                if not chunk:
                    break
                parts.append(chunk)
                left -= len(chunk)
            return b"".join(parts)
        finally:
            reader.close()

    def object_size(self, key: str) -> int | None:
        """The size of ``key`` without reading it (S3: ``HeadObject``), for a reader that seeks
        (a Parquet footer is at the end); None when the remote cannot say."""
        return None

    def part_size(self, key: str, part: int) -> int | None:
        """Size of part ``part`` (1-based) of a multipart object (S3: ``HeadObject`` with
        ``PartNumber``), with which the downloader re-hashes a body into its multipart ETag; None
        when the remote cannot say."""
        return None

    def put_file(self, key: str, path: str) -> None:
        """Upload the file at ``path`` as ``key`` (``epochfs index --out``); raises
        :class:`RemoteError` when the remote cannot be written."""
        raise RemoteError(f"{self.url}: this remote cannot be written")

    def on_first_sent(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the next request is on the wire, before its answer is waited
        for (work that can overlap that wait: the sampler's imports); a remote that cannot say
        when calls it at once."""
        callback()

    def close(self) -> None:
        """Release clients and connections (also ends reads blocked on a stalled body)."""
        return None


__all__ = [
    "BLOCK",
    "MAX_EMPTY_PAGES",
    "Changed",
    "CredentialsRefused",
    "Denied",
    "Kind",
    "ListedPage",
    "NotFound",
    "PageWalk",
    "PagedRemote",
    "PassOver",
    "Reader",
    "Remote",
    "RemoteError",
    "RemoteFailure",
    "RemoteObject",
    "Throttled",
    "Transient",
    "Unavailable",
]
