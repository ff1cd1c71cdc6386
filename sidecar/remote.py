"""Remote datasets: list keys as a stream, open one object as a byte stream.

One class per kind of remote, behind the small :class:`Remote` interface the catalog and the
downloader use:

- ``s3://bucket/prefix`` (botocore, :mod:`epochfs.sidecar.remote_s3`): paged ``ListObjectsV2``
  streamed page by page, and one plain ``GetObject`` per object (a presigned URL fetched on the
  worker thread) whose body is read in large blocks.
- ``file:///path``: a sorted walk of the folder (names as bytes, so non-UTF-8 names are seen and
  skipped rather than crashing the listing); symlinked folders are not followed.
- ``http(s)://base``: an index file (``--index`` or ``<base>/index.txt``) with one key per line,
  optionally ``key<TAB>size[<TAB>version]``; keys without a size cost one HEAD each while listing.
- ``gs://bucket/prefix`` through gcsfs when it is installed (a clear message when it is not).

Version tags: the S3 ETag, the GCS generation (or ETag), ``mtime_ns`` for files, and the HTTP
ETag/Last-Modified or the index's version column.

Failures: each remote raises the typed failures of :mod:`epochfs.sidecar.remote_errors` (not
found, changed, denied, transient, unavailable) from ``open`` and from its reader's ``read``,
translated from its library's exceptions where they arise; :class:`RemoteError` says that the
remote cannot be used at all.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol
from urllib.parse import quote, urlparse

from epochfs.sidecar.redact import redact
from epochfs.sidecar.remote_errors import (
    RemoteError,
    RemoteFailure,
    Translated,
    aiohttp_kind,
    failure_reason,
)
from epochfs.sidecar.remote_s3 import S3Remote

log = logging.getLogger("epochfs.remote")

BLOCK = 1 << 20
"""Bytes handed from the network to the writer at a time (hashing and writing release the GIL)."""


RemoteHTTPError = RemoteFailure
"""The former name of a failure with an HTTP status: every :class:`RemoteFailure` has ``status``."""

_OS = Translated()  # the standard library's errors only (files)
_FSSPEC = Translated(aiohttp_kind)


@dataclass(frozen=True)
class RemoteObject:
    """One listed object: key relative to the remote root (bytes when not UTF-8), size, version."""

    key: str | bytes
    size: int
    version: str


class Reader(Protocol):
    """An open remote object: ``read(n)`` returns up to n bytes, ``b""`` at the end; a failure
    is raised as a :class:`~epochfs.sidecar.remote_errors.RemoteFailure`.

    Readers may also offer ``readinto(buffer) -> int`` (0 at the end); the downloader then reads
    into one reused buffer per thread instead of getting a new ``bytes`` per block.
    """

    size: int | None
    """Length announced by the remote (Content-Length, file size), None when unknown."""
    etag: str | None
    """The ETag of what is being read, when the remote gives one."""

    def read(self, n: int) -> bytes: ...

    def close(self) -> None: ...


class Remote(Protocol):
    """What the catalog and the downloader need from a remote."""

    url: str
    sorted_listing: bool
    """True when :meth:`list` yields keys in UTF-8 byte order (file/folder clashes can be found)."""

    def list(self) -> Iterator[RemoteObject]: ...

    def open(self, key: str, *, checksum: bool = False) -> Reader:
        """Open ``key`` for reading; ``checksum`` asks the remote to send the checksum it stored
        for the body, when it has one, as the reader's ``checksum`` (S3: checksum mode), for the
        downloader to verify the body against. Raises a
        :class:`~epochfs.sidecar.remote_errors.RemoteFailure` saying what went wrong."""
        ...

    def close(self) -> None: ...


def plain_md5_etag(etag: str | None) -> str | None:
    """The hex md5 an ETag stands for, or None (multipart ``-N`` ETags, SSE-KMS, other stores)."""
    if not etag:
        return None
    tag = etag.strip().strip('"').lower()
    if len(tag) == 32 and all(c in "0123456789abcdef" for c in tag):
        return tag
    return None


# ---------------------------------------------------------------------------- file://
class _FileReader:
    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.size: int | None = os.fstat(f.fileno()).st_size
        self.etag: str | None = None

    def read(self, n: int) -> bytes:
        with _OS:
            return self._f.read(n)

    def readinto(self, buf: memoryview) -> int:
        with _OS:
            n: int | None = self._f.readinto(buf)  # type: ignore[attr-defined]  # a raw FileIO
        return n or 0

    def close(self) -> None:
        self._f.close()


class FileRemote:
    """``file:///path``: a local or mounted folder (NFS, a PVC), walked in sorted order."""

    sorted_listing = False  # a per-folder sorted walk is not byte order across folders

    def __init__(self, *, url: str) -> None:
        parsed = urlparse(url)
        root = (parsed.netloc + parsed.path) if parsed.netloc not in ("", "localhost") else parsed.path
        self.url = url
        self.root = os.fsencode(root or "/")
        if not os.path.isdir(self.root):
            raise RemoteError(f"{url}: {root} is not a folder")

    def list(self) -> Iterator[RemoteObject]:
        yield from self._walk(self.root, b"")

    def _walk(self, folder: bytes, rel: bytes) -> Iterator[RemoteObject]:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as e:
            log.warning("cannot list %s: %s", os.fsdecode(folder), e)
            return
        for entry in entries:
            name = rel + entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    yield from self._walk(entry.path, name + b"/")
                    continue
                st = entry.stat(follow_symlinks=True)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            try:
                key: str | bytes = name.decode("utf-8")
            except UnicodeDecodeError:
                key = name
            yield RemoteObject(key, st.st_size, f"mtime:{st.st_mtime_ns}")

    def open(self, key: str, *, checksum: bool = False) -> Reader:
        with _OS:  # ENOENT: not found; EACCES: denied; other errors (EIO) pass through
            return _FileReader(open(os.path.join(self.root, os.fsencode(key)), "rb", buffering=0))

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------- http(s)://
class _HTTPReader:
    def __init__(self, f: Any) -> None:
        self._f = f
        details = getattr(f, "details", {}) or {}
        size = details.get("size")
        self.size: int | None = int(size) if size is not None else None
        self.etag: str | None = None

    def read(self, n: int) -> bytes:
        out = bytearray()
        with _FSSPEC:
            while len(out) < n:
                chunk = self._f.read(n - len(out))
                if not chunk:
                    break
                out += chunk
        return bytes(out)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._f.close()


class HTTPRemote:
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
        with _FSSPEC:
            return _HTTPReader(self._fs.open(self._object_url(key), "rb", block_size=0))

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------- other fsspec
class FsspecRemote:
    """Any other fsspec filesystem (``gs://``): a plain walk and ``fs.open`` per object."""

    sorted_listing = False

    def __init__(self, *, url: str, fs: Any) -> None:
        self.url = url
        self._fs = fs
        self.root = url.split("://", 1)[1].rstrip("/")

    def list(self) -> Iterator[RemoteObject]:
        for _folder, _dirs, files in self._fs.walk(self.root, detail=True):
            for name in sorted(files):
                info = files[name]
                full = str(info["name"])
                key = full[len(self.root) + 1:] if full.startswith(self.root + "/") else full
                version = str(
                    info.get("generation") or info.get("etag") or info.get("mtime") or info.get("updated")
                    or ""
                )
                yield RemoteObject(key, int(info.get("size") or 0), version)

    def open(self, key: str, *, checksum: bool = False) -> Reader:
        with _FSSPEC:
            f = self._fs.open(f"{self.root}/{key}", "rb", block_size=BLOCK, cache_type="none")
        reader = _HTTPReader(f)
        reader.size = getattr(f, "size", None)
        return reader

    def close(self) -> None:
        pass


def open_remote(
    url: str,
    *,
    endpoint_url: str | None = None,
    index_url: str | None = None,
    concurrency: int = 32,
    read_timeout: float = 30.0,
) -> Remote:
    """The :class:`Remote` for ``url``; raises :class:`RemoteError` with a message for the user."""
    scheme = urlparse(url).scheme.lower()
    if scheme == "s3":
        return S3Remote(
            url=url, endpoint_url=endpoint_url, concurrency=concurrency, read_timeout=read_timeout
        )
    if scheme == "file":
        return FileRemote(url=url)
    if scheme in ("http", "https"):
        return HTTPRemote(url=url, index_url=index_url, read_timeout=read_timeout)
    if scheme in ("gs", "gcs"):
        try:
            import gcsfs
        except ImportError:
            raise RemoteError(
                "gs:// needs gcsfs, which is not installed: pip install 'epochfs[gcs]'"
            ) from None
        return FsspecRemote(url=url, fs=gcsfs.GCSFileSystem())
    raise RemoteError(f"unknown URL scheme {scheme!r}")


__all__ = [
    "BLOCK",
    "FileRemote",
    "FsspecRemote",
    "HTTPRemote",
    "Reader",
    "Remote",
    "RemoteError",
    "RemoteFailure",
    "RemoteHTTPError",
    "RemoteObject",
    "S3Remote",
    "open_remote",
    "plain_md5_etag",
]
