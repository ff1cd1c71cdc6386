"""``http(s)://base``: objects under a base URL, listed by an index file (``--index`` or
``<base>/index.txt``) with one key per line, optionally ``key<TAB>size[<TAB>version]``; keys
without a size cost one HEAD each while listing. Read through fsspec's HTTP filesystem (aiohttp);
the version tag is the HTTP ETag or Last-Modified, or the index's version column.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

from epochfs.sidecar.redact import redact
from epochfs.sidecar.remote.base import BLOCK, Reader, Remote, RemoteError, RemoteObject
from epochfs.sidecar.remote.errors import failure_reason
from epochfs.sidecar.remote.fsspec import FSSPEC, FsspecReader, range_past_the_end


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
        with f:
            pending = b""
            while True:
                block = f.read(BLOCK)
                if not block:
                    break
                pending += block
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    obj = self._parse(line)
                    if obj is not None:
                        yield obj
            if pending:
                obj = self._parse(pending)
                if obj is not None:
                    yield obj

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
            size = int(fields[1])
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


def open_http(url: str, *, index_url: str | None = None, read_timeout: float = 30.0,
              **_: object) -> HTTPRemote:
    """The registry's opener for ``http(s)://``."""
    return HTTPRemote(url=url, index_url=index_url, read_timeout=read_timeout)


__all__ = ["HTTPRemote", "open_http"]
