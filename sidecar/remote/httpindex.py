"""``http(s)://base``: objects under a base URL, listed by an index file (``--index`` or
``<base>/index.txt``) with one key per line, optionally ``key<TAB>size[<TAB>version]``; keys
without a size cost one HEAD each while listing. Read through fsspec's HTTP filesystem (aiohttp),
through the environment's proxy as an ``s3://`` remote goes through it (``HTTP_PROXY``,
``HTTPS_PROXY``, ``NO_PROXY``: :func:`~.fsspec.session_proxy`); the version tag is the HTTP ETag or
Last-Modified, or the index's version column.

URLs: a key (quoted) and ``index.txt`` go under the base URL's path, and the base's query (a
signed, SAS or CDN token) is sent after it with every request. Bodies are fetched as stored
(``Accept-Encoding: identity``, never decompressed): the index's sizes, and a HEAD's
Content-Length, describe the stored bytes. An ETag is opaque here (encrypted stores behind a CDN
send 32-hex ETags that are no md5), so a body is checked by its size alone.

A line that cannot be listed is passed over, as a ``file://`` walk passes over an entry it cannot
read: a size that is not a whole number of bytes (a typo in a hand-written index: ``b<TAB>1O``),
a key without a size whose object is not found (404, 410), that the server refuses (403, 401, any
other 4xx), that it does not answer (5xx, 429: asked :data:`KEY_TRIES` times, the shared full-jitter
backoff between), or whose size no answer says (a HEAD without Content-Length, then a ranged GET
without Content-Range or Content-Length). Each kind's first is logged with the index's URL and
its line number, the counts at the listing's end. Failing the listing instead would not end it:
the listing beside the sampler tries a failed listing again for ever, reading the whole index
each time, and it is read there, not at the start, so one object refused blocked the whole
dataset; a size is never guessed as 0, which would refuse every body as longer than listed. What
is the server's, not one object's, still fails the listing (tried again): a connection refused or
timed out, or :data:`UNANSWERED_RUN` keys in a row unanswered (a server down behind a proxy or a
load balancer that answers 502 or 503 for everything), which passed over would list the dataset
as empty and drop every key from the catalog.

A key without a size that the shared checks of keys refuse for its shape (an empty, ``.`` or
``..`` segment, a leading ``/``) is listed without a request, for those checks to count under
their reason: its URL would not name it (aiohttp resolves ``dots/../up.bin`` to ``up.bin``, and
``../../x`` would be asked outside the base URL).
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import time
from collections.abc import Iterator, Mapping
from typing import IO, Any, ClassVar
from urllib.parse import quote, urlsplit, urlunsplit

from epochfs.sidecar.redact import redact
from epochfs.sidecar.remote.backoff import full_jitter, jitter_bound
from epochfs.sidecar.remote.base import BLOCK, Reader, Remote, RemoteError, RemoteObject
from epochfs.sidecar.remote.errors import failure_reason
from epochfs.sidecar.remote.fsspec import FSSPEC, FsspecReader, range_past_the_end, session_proxy
from epochfs.sidecar.remote.indexlines import MAX_LINE_BYTES, index_lines
from epochfs.sidecar.remote.notstore import refuse_web_index
from epochfs.sidecar.remote.objects import FileRaw, gunzipped, open_stream
from epochfs.sidecar.remote.ratefloor import RateFloor

log = logging.getLogger("epochfs.remote")

IDENTITY = {"Accept-Encoding": "identity"}
"""Sent with every request: the stored bytes, which the listed sizes describe (a server that
gzips on the fly would send other bytes, and another length)."""
BOM = b"\xef\xbb\xbf"
"""The UTF-8 byte order mark some editors write at the start of a text file."""
KEY_TRIES = 3
"""Times a key without a size is asked for while the server answers 5xx or 429, before the line
is passed over."""
KEY_PAUSE = (0.5, 4.0)
"""The full-jitter bound of the first pause between those tries, and the longest (seconds)."""
UNANSWERED_RUN = 8
"""Keys in a row the server does not answer (each after :data:`KEY_TRIES`) or refuses (401, 403,
another 4xx but 404 and 410) that fail the listing: the server's state (an outage, an expired
password, a proxy or a firewall refusing everything), not one object's. Passed over one by one,
a relist would drop every key from the catalog."""
_NOT_NAMED = re.compile(r"(?:^|/)\.{0,2}(?:/|$)")
"""An empty, ``.`` or ``..`` segment (a leading or a doubled ``/`` among them): a key the shared
checks refuse whatever else it holds, and whose URL would not name it."""


class _Passed(ValueError):
    """A line of the index that is not listed; :attr:`why` ends the listing's count of such lines,
    :attr:`status` is the answer that made it so (``HTTP 503 Service Unavailable``), if any."""

    why: ClassVar[str] = ""

    def __init__(self, message: str, *, status: str = "") -> None:
        super().__init__(message)
        self.status = status


class _BadSize(_Passed):
    """A line of the index whose size field is not a whole number of bytes."""

    why = "whose size is not a number of bytes"


class _TooLong(_Passed):
    """A line of the index over :data:`~.indexlines.MAX_LINE_BYTES` (no key is that long)."""

    why = "too long to be a key's"


class _Missing(_Passed):
    """A key without a size whose object the server does not find (404)."""

    why = "whose object is not found"


class _Refused(_Passed):
    """A key without a size whose object the server refuses (401, 403, another 4xx)."""

    why = "whose object the server refuses"


class _Unanswered(_Passed):
    """A key without a size the server answered only with 5xx or 429, :data:`KEY_TRIES` times."""

    why = f"that the server did not answer (5xx or 429, {KEY_TRIES} tries each)"


class _NoSize(_Passed):
    """A key without a size whose size no answer says: listed as 0 bytes, every body would be
    refused as longer than listed."""

    why = "whose size the server does not say"


def _under(base: str, name: str) -> str:
    """``name`` (already quoted) under the path of the ``base`` URL, the base's query after it (a
    signed or SAS token goes with every request); the fragment is never sent."""
    parts = urlsplit(base)
    return urlunsplit((parts.scheme, parts.netloc, f"{parts.path.rstrip('/')}/{name}", parts.query, ""))


def _is_http(url: str) -> bool:
    return urlsplit(url).scheme in ("http", "https")


def _origin(url: str) -> tuple[str, str]:
    """The scheme and host (with its port) of ``url``: what its route depends on."""
    parts = urlsplit(url)
    return parts.scheme, parts.netloc.rpartition("@")[2]


def _filesystem(read_timeout: float, route: dict[str, Any]) -> Any:
    """fsspec's HTTP filesystem, its own (no instance shared with another remote), asking for the
    stored bytes (:data:`IDENTITY`, never decompressed), with ``read_timeout`` seconds of silence
    allowed on a socket and 10 to connect, its session going out by ``route``
    (:func:`~.fsspec.session_proxy`: the environment's proxy, as botocore would take it, or
    straight)."""
    import aiohttp
    import fsspec

    return fsspec.filesystem(
        "http",
        skip_instance_cache=True,
        headers=IDENTITY,
        client_kwargs={"timeout": aiohttp.ClientTimeout(total=None, sock_read=read_timeout, sock_connect=10),
                       "auto_decompress": False, **route},
    )


class HTTPRemote(Remote):
    """``http(s)://base`` with an index file listing the keys, one per line."""

    sorted_listing = False

    def __init__(self, *, url: str, index_url: str | None = None, read_timeout: float = 30.0) -> None:
        self.url = url
        self.index_url = index_url or _under(url, "index.txt")
        self._failed_in_a_row = 0
        route = session_proxy(url)
        self._fs = _filesystem(read_timeout, route)
        # An index on another host (or scheme), which NO_PROXY may cover when the base's is not
        # (or the other way round), is read by its own route.
        index_route = route
        if _is_http(self.index_url) and _origin(self.index_url) != _origin(url):
            index_route = session_proxy(self.index_url)
        self._index_fs = self._fs if index_route == route else _filesystem(read_timeout, index_route)
        self._read_timeout = read_timeout  # the index's reads are held to the bodies' rate floor

    def _object_url(self, key: str) -> str:
        return _under(self.url, quote(key, safe="/"))

    @contextlib.contextmanager
    def _open_index(self) -> Iterator[IO[bytes]]:
        """The index opened for a streamed read: over HTTP through this remote's filesystem (its
        timeouts, the stored bytes), any other URL or a local path through the one opener of
        index files (:func:`~.objects.open_stream`). Failing to open it raises
        :class:`RemoteError` from the failure, whose kind says whether it may answer later."""
        if not _is_http(self.index_url):
            with open_stream(self.index_url, what="the index", gunzip=True) as stream:
                yield stream
            return
        shown = redact(self.index_url)
        try:
            f = self._index_fs.open(self.index_url, "rb", block_size=0)
        except Exception as e:  # fsspec's FileNotFoundError, the answer or the socket's error under it
            raise RemoteError(f"cannot read the index {shown}: {failure_reason(e)}") from e
        # Bodies come as stored (never decompressed): an index stored gzipped (served with
        # Content-Encoding: gzip, or a keys.txt.gz) is gunzipped here.
        with f, io.BufferedReader(FileRaw(f, RateFloor(self._read_timeout)), BLOCK) as buffered, \
                gunzipped(buffered, f"the index {shown}") as stream:
            refuse_web_index(shown, f, stream)  # a web page's lines read as keys would be served as samples
            yield stream

    def probe(self) -> None:
        """The index's first bytes, read at the start: an index that is not found or refused
        (404, 403) ends the start with the fix named (exit 2), a server that cannot be reached
        now is met as such (exit 75), rather than both being tried again for ever by the listing
        beside the sampler. Raises :class:`RemoteError` from the failure."""
        try:
            with self._open_index() as f:
                f.read(1)
        except RemoteError:
            raise
        except Exception as e:  # the body cut short, or not gzip after its magic bytes
            raise RemoteError(f"cannot read the index {redact(self.index_url)}: {failure_reason(e)}") from e

    def list(self) -> Iterator[RemoteObject]:
        shown = redact(self.index_url)
        self._failed_in_a_row = 0  # keys in a row the server refused or did not answer (_in_run)
        passed: dict[type[_Passed], tuple[int, int]] = {}  # kind: (how many, the first's line number)
        with self._open_index() as f:
            for number, line in enumerate(index_lines(f), 1):
                if number == 1 and line is not None and line.startswith(BOM):
                    line = line[len(BOM):]
                try:
                    if line is None:
                        raise _TooLong(f"over {MAX_LINE_BYTES} bytes, read no further than its newline")
                    obj = self._parse(line)
                except _Passed as e:
                    count, first = passed.get(type(e), (0, number))
                    passed[type(e)] = (count + 1, first)
                    if not count:
                        log.warning("%s line %d: %s; the line is passed over (not listed; the rest are "
                                    "counted at the listing's end)", shown, number, e)
                    continue
                if obj is not None:
                    yield obj
        for kind, (count, first) in passed.items():
            log.warning("%s: listed without %d line(s) %s (first: line %d)", shown, count, kind.why, first)

    def _parse(self, line: bytes) -> RemoteObject | None:
        line = line.rstrip(b"\r")
        if not line or line.startswith(b"#"):
            return None
        fields = line.split(b"\t")
        raw = fields[0]
        try:
            key: str | bytes = raw.decode("utf-8")
        except UnicodeDecodeError:
            return RemoteObject(raw, 0, "")
        if len(fields) >= 2 and fields[1].strip():
            try:
                size = int(fields[1])
            except ValueError:
                size = -1
            if size < 0:
                raise _BadSize(f"size {fields[1].decode('utf-8', 'replace')!r} is not a number of bytes")
            version = fields[2].decode("utf-8", "replace") if len(fields) >= 3 else ""
            return RemoteObject(key, size, version)
        assert isinstance(key, str)
        if _NOT_NAMED.search(key):  # refused by the shared checks, counted there; never asked for
            return RemoteObject(key, 0, "")
        found, version = self._stat(key)
        if found is None:
            raise _NoSize(f"{key}: the server does not say its size (no Content-Length to a HEAD, "
                          "no Content-Range or Content-Length to a GET of its first byte); write it "
                          "in the index (key<TAB>size)")
        return RemoteObject(key, found, version)

    def _in_run(self, e: _Passed, said: str) -> None:
        """Count ``e``'s key in the run of keys in a row the server refused or did not answer
        (:data:`UNANSWERED_RUN`); the run's last fails the listing, ``said`` (with ``{}`` for the
        count) saying why."""
        self._failed_in_a_row += 1
        if self._failed_in_a_row >= UNANSWERED_RUN:
            count = str(self._failed_in_a_row)
            raise RemoteError(f"cannot list {redact(self.url)}: the server "
                              + said.replace("{}", count, 1)) from e  # keys may hold braces

    def _stat(self, key: str) -> tuple[int | None, str]:
        """(size, version) of ``key``, from a HEAD, else from a GET of its first byte (its
        Content-Range names the whole size); the size None when neither says it. A 5xx or 429 is
        asked again, :data:`KEY_TRIES` times in all, the shared full-jitter backoff between.
        Raises a :class:`_Passed` for the line (404, a refusal, no answer), and
        :class:`RemoteError` for what fails the listing: any other failure (a connection refused,
        a timeout), or the :data:`UNANSWERED_RUN`-th key in a row without an answer."""
        from fsspec.asyn import sync

        for attempt in range(KEY_TRIES):
            try:
                result: tuple[int | None, str] = sync(self._fs.loop, self._ask_size, key)
            except _Unanswered as e:
                if attempt + 1 < KEY_TRIES:
                    time.sleep(full_jitter(jitter_bound(*KEY_PAUSE, attempt)))
                    continue
                self._in_run(e, f"answered none of the last {{}} keys it was asked for "
                                f"({redact(self._object_url(key))}: {e.status})")
                raise
            except _Refused as e:
                self._in_run(e, f"refused or answered none of the last {{}} keys it was asked for ({e})")
                raise
            except _Passed:
                self._failed_in_a_row = 0
                raise
            except Exception as e:
                raise RemoteError(f"cannot list {redact(self.url)}: {redact(self._object_url(key))}: "
                                  f"{failure_reason(e)}") from e
            self._failed_in_a_row = 0
            return result
        raise AssertionError("unreachable")  # the last try returns or raises

    async def _ask_size(self, key: str) -> tuple[int | None, str]:
        url = self._fs.encode_url(self._object_url(key))
        session = await self._fs.set_session()
        async with session.head(url, headers=IDENTITY, allow_redirects=True) as r:
            if r.status in (404, 410):
                _passed_by(key, r.status, r.reason)
            length = _whole(r.headers.get("Content-Length"))
            if r.status < 300 and length:
                return length, _version(r.headers)
        # No length in a HEAD (a chunked server), a length of 0 (a proxy that drops HEAD lengths;
        # an empty object answers the ranged GET below with 416), or a HEAD refused (a URL signed
        # for GET): the first byte's Content-Range. The body of a 200 (Range ignored) is not read: released
        # unread, its connection is closed.
        async with session.get(url, headers={**IDENTITY, "Range": "bytes=0-0"}, allow_redirects=True) as r:
            _passed_by(key, r.status, r.reason)
            if r.status == 416:  # no first byte: an empty object (Content-Range: bytes */0)
                return _range_total(r.headers.get("Content-Range")), _version(r.headers)
            r.raise_for_status()
            if r.status == 206:
                return _range_total(r.headers.get("Content-Range")), _version(r.headers)
            return _whole(r.headers.get("Content-Length")), _version(r.headers)

    def open(self, key: str, *, checksum: bool = False) -> Reader:
        with FSSPEC:
            reader = FsspecReader(self._fs.open(self._object_url(key), "rb", block_size=0))
        reader.etag_is_md5 = False  # an HTTP ETag is opaque: a 32-hex one may be no md5 (KMS, a CDN)
        return reader

    def read_range(self, key: str, start: int, length: int) -> bytes:
        """One GET with a ``Range`` header. A server that ignores ``Range`` answers the whole body
        (fsspec does not check for a 206): the range is cut out of it then."""
        if length <= 0:
            return b""
        with FSSPEC:
            try:
                data = bytes(self._fs.cat_file(self._object_url(key), start=start, end=start + length))
            except Exception as e:
                if range_past_the_end(e):
                    return b""
                raise
        return data[start:start + length] if len(data) > length else data


def _passed_by(key: str, status: int, reason: str | None) -> None:
    """Raise the :class:`_Passed` that an answer of ``status`` to a request for ``key`` makes of
    its line: not found (404, 410), not answered (5xx, 429: asked again), refused (any other
    4xx); nothing for any other status."""
    said = f"HTTP {status} {reason or ''}".rstrip()
    if status in (404, 410):
        raise _Missing(f"{key}: not found (HTTP {status})")
    if status == 429 or status >= 500:
        raise _Unanswered(f"{key}: no answer ({said})", status=said)
    if 400 <= status < 500 and status != 416:
        raise _Refused(f"{key}: refused ({said})")


def _whole(value: str | None) -> int | None:
    """A header's whole number of bytes, None when absent or not one."""
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


def _range_total(value: str | None) -> int | None:
    """The whole size in a Content-Range (``bytes 0-0/1234``, ``bytes */1234``); None for ``*``."""
    return _whole(value.rpartition("/")[2]) if value else None


def _version(headers: Mapping[str, str]) -> str:
    return str(headers.get("ETag") or headers.get("Last-Modified") or "")


def open_http(url: str, *, index_url: str | None = None, read_timeout: float = 30.0,
              **_: object) -> HTTPRemote:
    """The registry's opener for ``http(s)://``."""
    return HTTPRemote(url=url, index_url=index_url, read_timeout=read_timeout)


__all__ = ["HTTPRemote", "open_http"]
