"""One object addressed by its whole URL, read as a stream or by ranges, or written: the one opener
for the index files (``--index``, ``epochfs index --out``) and S3 Inventory's manifests and data
files (CSV streamed, Parquet by ranges).

``s3://`` objects go through :class:`~epochfs.sidecar.remote.s3.S3Remote` (the sampler's own S3
client: its endpoint, region, credentials, proxies and typed errors), using only the capabilities
every remote declares (:meth:`~epochfs.sidecar.remote.base.Remote.open`, ``read_range``,
``object_size``, ``put_file``), so an index read from S3 is asked for as the dataset is and fails
with the same typed errors. Any other URL (``https``, ``gs``, ``file``, what fsspec knows) is
opened by fsspec, whose files stream and seek.
"""

from __future__ import annotations

import contextlib
import gzip
import io
from collections.abc import Callable, Iterator
from typing import IO, Any, cast

from epochfs.sidecar.redact import redact
from epochfs.sidecar.remote.base import BLOCK, Reader, Remote, RemoteError
from epochfs.sidecar.remote.errors import failure_reason
from epochfs.sidecar.remote.urls import split_url

GZIP_MAGIC = b"\x1f\x8b"


def _s3(url: str, endpoint_url: str | None) -> tuple[Remote, str]:
    """The S3 remote of ``url``'s bucket (one connection: a single object is read) and the key
    (its "#" and "?" kept: :mod:`.urls`)."""
    from epochfs.sidecar.remote.s3 import S3Remote

    _, bucket, path = split_url(url)
    remote = S3Remote(url=f"s3://{bucket}", endpoint_url=endpoint_url, concurrency=1)
    return remote, path.lstrip("/")


def is_s3(url: str) -> bool:
    return split_url(url).scheme == "s3"


class ReaderFile(io.RawIOBase):
    """A remote :class:`~epochfs.sidecar.remote.base.Reader` as a raw binary file, for
    :class:`io.BufferedReader` (which needs ``readinto`` and ``closed``), gzip and readline."""

    def __init__(self, reader: Reader) -> None:
        super().__init__()
        self._reader = reader

    def readinto(self, b: Any) -> int:
        return self._reader.readinto(memoryview(b).cast("B"))

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed:
            self._reader.close()
        super().close()


class FileRaw(io.RawIOBase):
    """Any file object with ``read(n)`` as a raw binary file for :class:`io.BufferedReader`."""

    def __init__(self, f: IO[bytes]) -> None:
        super().__init__()
        self._f = f

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        data = self._f.read(len(view))
        view[:len(data)] = data
        return len(data)

    def readable(self) -> bool:
        return True


class RangedFile(io.RawIOBase):
    """An object of known size as a seekable raw file: each read is one ranged read."""

    def __init__(self, read_range: Callable[[int, int], bytes], size: int) -> None:
        super().__init__()
        self._read_range = read_range
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        n = min(len(view), self._size - self._pos)
        if n <= 0:
            return 0
        data = self._read_range(self._pos, n)
        view[:len(data)] = data
        self._pos += len(data)
        return len(data)


@contextlib.contextmanager
def _fsspec_file(url: str, label: str, *, block_size: int) -> Iterator[IO[bytes]]:
    """``url`` opened by fsspec (its files stream and seek); a failure to open names ``label``."""
    import fsspec

    try:
        f = fsspec.open(url, "rb", block_size=block_size).open()
    except Exception as e:
        raise RemoteError(f"cannot read {label}: {failure_reason(e)}") from e
    with f:
        yield f


@contextlib.contextmanager
def open_stream(url: str, *, endpoint_url: str | None = None, what: str = "",
                gunzip: bool = False) -> Iterator[IO[bytes]]:
    """``url`` opened for a buffered, streamed read. ``what`` names the object in errors
    ("the index"). ``gunzip``: a body that starts with gzip's magic bytes is read gunzipped, any
    other as it is (index files and S3 Inventory's CSV data files come either way)."""
    with _buffered(url, endpoint_url=endpoint_url, what=what) as buffered:
        if not gunzip:
            yield buffered
            return
        with gunzipped(buffered) as stream:
            yield stream


@contextlib.contextmanager
def gunzipped(buffered: io.BufferedReader[Any]) -> Iterator[IO[bytes]]:
    """``buffered`` read gunzipped when it starts with gzip's magic bytes, as it is otherwise."""
    if buffered.peek(2)[:2] != GZIP_MAGIC:
        yield buffered
        return
    with gzip.GzipFile(fileobj=buffered) as stream:
        yield cast(IO[bytes], stream)


@contextlib.contextmanager
def _buffered(url: str, *, endpoint_url: str | None, what: str) -> Iterator[io.BufferedReader[Any]]:
    """``url`` as a :class:`io.BufferedReader` (``readline`` and ``peek`` on every kind of URL)."""
    label = f"{what} {redact(url)}".strip()
    if not is_s3(url):
        # Buffered here too: fsspec's files differ (HTTP's streaming file has no readline(n), no
        # seek; only a local file can peek), and the index reader needs readline and peek.
        with _fsspec_file(url, label, block_size=0 if url.startswith("http") else BLOCK) as f, \
                io.BufferedReader(FileRaw(f), BLOCK) as buffered:
            yield buffered
        return
    remote, key = _s3(url, endpoint_url)
    try:
        try:
            raw = ReaderFile(remote.open(key))
        except Exception as e:
            raise RemoteError(f"cannot read {label}: {failure_reason(e)}") from e
        with io.BufferedReader(raw, BLOCK) as buffered:
            yield buffered
    finally:
        remote.close()


@contextlib.contextmanager
def open_ranged(url: str, *, endpoint_url: str | None = None) -> Iterator[IO[bytes]]:
    """``url`` opened for random access (a Parquet footer, then row groups): ``s3://`` one ranged
    GET per buffered read, other URLs fsspec's seekable files."""
    if not is_s3(url):
        with _fsspec_file(url, redact(url), block_size=BLOCK) as f:
            yield f
        return
    remote, key = _s3(url, endpoint_url)
    try:
        try:
            size = remote.object_size(key)
        except Exception as e:
            raise RemoteError(f"cannot read {redact(url)}: {failure_reason(e)}") from e
        if size is None:
            raise RemoteError(f"cannot read {redact(url)}: its size is unknown")

        def read_range(start: int, length: int) -> bytes:
            try:
                return remote.read_range(key, start, length)
            except Exception as e:
                raise RemoteError(f"cannot read {redact(url)} bytes {start}-{start + length - 1}: "
                                  f"{failure_reason(e)}") from e

        with io.BufferedReader(RangedFile(read_range, size), BLOCK) as f:
            yield f
    finally:
        remote.close()


def upload(path: str, url: str, *, endpoint_url: str | None = None) -> None:
    """Write the local file ``path`` to ``url`` (``s3://``: one PutObject; else through fsspec)."""
    if is_s3(url):
        remote, key = _s3(url, endpoint_url)
        try:
            remote.put_file(key, path)
        finally:
            remote.close()
        return
    import fsspec

    with open(path, "rb") as src, fsspec.open(url, "wb") as dst:
        while block := src.read(BLOCK):
            dst.write(block)


__all__ = ["FileRaw", "RangedFile", "ReaderFile", "is_s3", "open_ranged", "open_stream", "upload"]
