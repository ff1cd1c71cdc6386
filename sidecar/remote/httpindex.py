"""``http(s)://base``: objects under a base URL, listed by an index file (``--index`` or
``<base>/index.txt``) with one key per line, optionally ``key<TAB>size[<TAB>version]``; keys
without a size cost one HEAD each while listing. Read through fsspec's HTTP filesystem (aiohttp);
the version tag is the HTTP ETag or Last-Modified, or the index's version column.

A line whose size is not a whole number of bytes (a typo in a hand-written index: ``b<TAB>1O``) is
passed over, as a ``file://`` walk passes over an entry it cannot read: the first is logged with
the index's URL and its line number, the count at the listing's end. Failing the listing instead
would not end it: the listing beside the sampler tries a failed listing again for ever, reading
the whole index each time, and it is read there, not at the start.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from epochfs.sidecar.redact import redact
from epochfs.sidecar.remote.base import BLOCK, Reader, Remote, RemoteError, RemoteObject
from epochfs.sidecar.remote.errors import failure_reason
from epochfs.sidecar.remote.fsspec import FSSPEC, FsspecReader, range_past_the_end

log = logging.getLogger("epochfs.remote")


class _BadSize(ValueError):
    """A line of the index whose size field is not a whole number of bytes."""


class HTTPRemote(Remote):
    """``http(s)://base`` with an index file listing the keys, one per line."""

    sorted_listing = False

    def __init__(self, *, url: str, index_url: str | None = None, read_timeout: float = 30.0) -> None:
        import aiohttp
        import fsspec

        self.url = url
        self.base = url.rstrip("/")
        self.index_url = index_url or f"{self.base}/index.txt"
        self._fs = fsspec.filesystem(
            "http",
            skip_instance_cache=True,
            client_kwargs={"timeout": aiohttp.ClientTimeout(total=None, sock_read=read_timeout,
                                                            sock_connect=10)},
        )

    def _object_url(self, key: str) -> str:
        return f"{self.base}/{quote(key, safe='/')}"

    def list(self) -> Iterator[RemoteObject]:
        try:
            f = self._fs.open(self.index_url, "rb", block_size=0)
        except Exception as e:
            raise RemoteError(f"cannot read the index {redact(self.index_url)}: {failure_reason(e)}") from e
        shown = redact(self.index_url)
        passed, first = 0, 0  # the lines passed over: how many, the first one's number
        with f:
            for number, line in enumerate(_lines(f), 1):
                try:
                    obj = self._parse(line)
                except _BadSize as e:
                    passed += 1
                    if passed == 1:
                        first = number
                        log.warning("%s line %d: %s; the line is passed over (not listed; the rest are "
                                    "counted at the listing's end)", shown, number, e)
                    continue
                if obj is not None:
                    yield obj
        if passed:
            log.warning("%s: listed without %d line(s) whose size is not a number of bytes (first: "
                        "line %d)", shown, passed, first)

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
        info = self._fs.info(self._object_url(key))
        version = str(info.get("ETag") or info.get("etag") or info.get("Last-Modified") or "")
        return RemoteObject(key, int(info.get("size") or 0), version)

    def open(self, key: str, *, checksum: bool = False) -> Reader:
        with FSSPEC:
            return FsspecReader(self._fs.open(self._object_url(key), "rb", block_size=0))

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


def _lines(f: Any) -> Iterator[bytes]:
    """The lines of an open file, read BLOCK bytes at a time (the index may be larger than memory
    allows to hold at once); the last one whether or not it ends with a newline."""
    pending = b""
    while block := f.read(BLOCK):
        pending += block
        *lines, pending = pending.split(b"\n")
        yield from lines
    if pending:
        yield pending


def open_http(url: str, *, index_url: str | None = None, read_timeout: float = 30.0,
              **_: object) -> HTTPRemote:
    """The registry's opener for ``http(s)://``."""
    return HTTPRemote(url=url, index_url=index_url, read_timeout=read_timeout)


__all__ = ["HTTPRemote", "open_http"]
