"""One object addressed by its whole URL, read as a stream or by ranges, or written: the one opener
for the index files (``--index``, ``epochfs index --out``) and S3 Inventory's manifests and data
files (CSV streamed, Parquet by ranges).

An object of an object store (``s3://``, ``gs://``, ``az://``: a backend of the registry that
``stores_objects``) goes through that backend's own remote, opened by the registry as the dataset's
is (``--endpoint-url``, the read timeout, the one-try clients, credentials, proxies and typed
errors), using only the capabilities every remote declares
(:meth:`~epochfs.sidecar.remote.base.Remote.open`, ``read_range``, ``object_size``,
``put_file``): an index on Azurite or a private GCS endpoint is read where the dataset is, not
from the cloud's public host that a bare ``fsspec.open`` would ask (a minute of retries, then a
"host does not resolve" naming the container). Any other URL (``https``, ``file``, what fsspec
knows) is opened by fsspec, whose files stream and seek. A local file is written whole beside
itself and renamed over the old one (:func:`replace_local`): readers never see part of it.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import shutil
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from epochfs.sidecar.redact import redact
from epochfs.sidecar.remote.base import BLOCK, Reader, Remote, RemoteError
from epochfs.sidecar.remote.errors import failure_reason
from epochfs.sidecar.remote.ratefloor import RateFloor
from epochfs.sidecar.remote.registry import backend_for, open_remote
from epochfs.sidecar.remote.urls import split_url
from epochfs.sidecar.store.objects import replace_file

GZIP_MAGIC = b"\x1f\x8b"


class WriteError(RemoteError):
    """An object that could not be written (``epochfs index --out``), said in one line: the
    caller names its flag (a store library's own exception, an adlfs ``RuntimeError`` say, went
    past ``epochfs index`` as a traceback of 179 lines)."""


def in_store(url: str) -> bool:
    """Whether ``url`` names an object of an object store whose backend reads and writes it (the
    registry's ``stores_objects``: ``s3://``, ``gs://``, ``az://``)."""
    backend = backend_for(split_url(url).scheme)
    return backend is not None and backend.stores_objects


def is_s3(url: str) -> bool:
    return split_url(url).scheme == "s3"


@contextlib.contextmanager
def _store_object(url: str, endpoint_url: str | None, failed: str) -> Iterator[tuple[Remote, str]]:
    """The remote of ``url``'s bucket or container, opened by the registry as the dataset's remote
    is (one connection: a single object is read or written), and the key (its "#" and "?" kept:
    :mod:`.urls`); closed after. A remote that cannot be opened (a library, credentials, an
    endpoint the backend refuses) raises :class:`RemoteError` starting with ``failed``."""
    scheme, bucket, path = split_url(url)
    try:
        remote = open_remote(f"{scheme}://{bucket}", endpoint_url=endpoint_url, concurrency=1)
    except RemoteError as e:
        raise RemoteError(f"{failed}: {e}") from e
    try:
        yield remote, path.lstrip("/")
    finally:
        remote.close()


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
    """Any file object with ``read(n)`` as a raw binary file for :class:`io.BufferedReader`;
    ``floor``: each read held to a body's rate floor (a stream that trickles is cut, not waited on)."""

    def __init__(self, f: IO[bytes], floor: RateFloor | None = None) -> None:
        super().__init__()
        self._f = f
        self._floor = floor

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        started = time.monotonic()
        data = self._f.read(len(view))
        if self._floor is not None:
            self._floor.note(len(data), time.monotonic() - started)
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
    """``url`` opened by fsspec (its files stream and seek); a failure to open names ``label``.
    An ``http(s)://`` URL goes out by the route every remote takes (:func:`.fsspec.session_proxy`:
    the environment's proxy as botocore would take it, or straight): fsspec's session reads no
    proxy variable, and an ``--index`` on http(s) went around the proxy."""
    import fsspec

    try:
        options: dict[str, Any] = {}
        if urlsplit(url).scheme in ("http", "https"):
            from epochfs.sidecar.remote.fsspec import session_proxy

            options["client_kwargs"] = session_proxy(url)
        f = fsspec.open(url, "rb", block_size=block_size, **options).open()
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
        with gunzipped(buffered, f"{what} {redact(url)}".strip()) as stream:
            yield stream


@contextlib.contextmanager
def gunzipped(buffered: io.BufferedReader[Any], label: str = "") -> Iterator[IO[bytes]]:
    """``buffered`` read gunzipped when it starts with gzip's magic bytes, as it is otherwise. A
    gzip stream cut short or damaged is a :class:`RemoteError` naming ``label`` (the object, in
    words) and telling to write it again, as a plain index without its trailer is."""
    if buffered.peek(2)[:2] != GZIP_MAGIC:
        yield buffered
        return
    with gzip.GzipFile(fileobj=buffered) as stream, \
            io.BufferedReader(_Gunzipping(stream, label or "the gzip object"), BLOCK) as checked:
        yield checked


class _Gunzipping(io.RawIOBase):
    """A gzip stream's bytes, its own errors told in one line: gzip raises ``EOFError`` at a cut
    short stream and ``BadGzipFile`` or ``zlib.error`` at a damaged one, which no reader of an
    index or inventory expects (a traceback). Errors of the transport below pass as they are."""

    def __init__(self, stream: gzip.GzipFile, label: str) -> None:
        self._stream = stream
        self._label = label

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        try:
            return self._stream.readinto1(b)  # one step: a stream cut short gives its whole lines first
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise RemoteError(f"{self._label}: its gzip stream is cut short or damaged ({e}): write "
                              "it again") from e


@contextlib.contextmanager
def _buffered(url: str, *, endpoint_url: str | None, what: str) -> Iterator[io.BufferedReader[Any]]:
    """``url`` as a :class:`io.BufferedReader` (``readline`` and ``peek`` on every kind of URL)."""
    label = f"{what} {redact(url)}".strip()
    if not in_store(url):
        # Buffered here too: fsspec's files differ (HTTP's streaming file has no readline(n), no
        # seek; only a local file can peek), and the index reader needs readline and peek.
        with _fsspec_file(url, label, block_size=0 if url.startswith("http") else BLOCK) as f, \
                io.BufferedReader(FileRaw(f), BLOCK) as buffered:
            yield buffered
        return
    with _store_object(url, endpoint_url, f"cannot read {label}") as (remote, key):
        try:
            raw = ReaderFile(remote.open(key))
        except Exception as e:
            raise RemoteError(f"cannot read {label}: {failure_reason(e)}") from e
        with io.BufferedReader(raw, BLOCK) as buffered:
            yield buffered


@contextlib.contextmanager
def open_ranged(url: str, *, endpoint_url: str | None = None) -> Iterator[IO[bytes]]:
    """``url`` opened for random access (a Parquet footer, then row groups): an object store's
    object one ranged read per buffered read, other URLs fsspec's seekable files."""
    if not in_store(url):
        with _fsspec_file(url, redact(url), block_size=BLOCK) as f:
            yield f
        return
    with _store_object(url, endpoint_url, f"cannot read {redact(url)}") as (remote, key):
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


def upload(path: str, url: str, *, endpoint_url: str | None = None) -> None:
    """Write the local file ``path`` to ``url``: an object store's object through its backend (one
    upload, atomic: readers see the old object or the new one), a local path or ``file://`` URL by
    :func:`replace_local`, anything else through fsspec. Any failure raises :class:`WriteError`,
    one line naming ``url`` and the cause."""
    failed = f"cannot write {redact(url)}"
    try:
        if in_store(url):
            with _store_object(url, endpoint_url, failed) as (remote, key):
                remote.put_file(key, path)
        elif "://" not in url or url.startswith("file://"):
            replace_local(path, url.removeprefix("file://"))
        else:
            import fsspec

            with open(path, "rb") as src, fsspec.open(url, "wb") as dst:
                shutil.copyfileobj(src, dst, BLOCK)
    except WriteError:
        raise
    except Exception as e:
        raise WriteError(f"{failed}: {_why_not_written(e, url)}") from e


def _why_not_written(e: Exception, url: str) -> str:
    """The cause of a failed upload of ``url`` in a few words, on one line (the Azure SDK's text
    goes on with a request id, a time and the answer's body). A store answers 404 to an upload
    only when the bucket or container is not there (gcsfs says so with the request's URL alone,
    adlfs with an errno: "no such file or directory")."""
    cause = e.__cause__ if isinstance(e, RemoteError) and e.__cause__ is not None else e
    if in_store(url) and isinstance(cause, FileNotFoundError):
        scheme, bucket, _ = split_url(url)
        kind = "container" if backend_for(scheme) is backend_for("az") else "bucket"
        return f"not found: no {kind} {bucket.partition('@')[0]!r} in this store"
    reason = failure_reason(cause).strip().splitlines()
    return reason[0] if reason else type(cause).__name__


def replace_local(path: str, target: str) -> None:
    """Copy the file ``path`` to the local file ``target`` atomically, by the sidecar's one
    atomic writer (:func:`~epochfs.sidecar.store.objects.replace_file`): written whole to a new
    file in ``target``'s folder, flushed to the disk, then renamed over ``target``. A fleet's
    samplers may start while a shared index is refreshed: each opens the old file or the new one,
    never an empty or cut file ("not an epochfs index", exit 2), and one that holds the old one
    open reads it whole. The new file keeps the mode and owner of the one it replaces; a symlink
    at ``target`` keeps pointing where it did (its target is replaced). A failed write leaves no
    temp; a write killed midway leaves a hidden ``.<name>.<pid>.<random>.tmp`` beside it, never a
    cut index. A folder that refuses its fsync (some network and FUSE file systems) is left
    unsynced: readers see the new file either way."""
    final = os.path.realpath(os.path.expanduser(target))
    replace_file(Path(final), _pieces(path), mode=0o666,
                 before_rename=lambda fd: _keep_owner_and_mode(fd, final), strict=False)


def _pieces(path: str) -> Iterator[bytes]:
    """The file ``path``'s bytes, :data:`BLOCK` at a time."""
    with open(path, "rb") as src:
        while piece := src.read(BLOCK):
            yield piece


def _keep_owner_and_mode(fd: int, old: str) -> None:
    """Give the new file ``fd`` the owner (where this user may) and the mode of the file ``old``
    it replaces, as a rewrite in place kept them: a fleet's readers that could read the old index
    read the new one. Nothing for a new path (the mode the umask gave)."""
    try:
        st = os.stat(old)
    except FileNotFoundError:
        return
    with contextlib.suppress(PermissionError):
        os.fchown(fd, st.st_uid, st.st_gid)
    os.fchmod(fd, st.st_mode & 0o7777)


__all__ = ["FileRaw", "RangedFile", "ReaderFile", "WriteError", "in_store", "is_s3", "open_ranged",
           "open_stream", "replace_local", "upload"]
