"""An in-memory remote with failure injection, so the sampler's logic runs in-process in
milliseconds (mountpoint-s3's in-memory and failure-injecting clients are the model). Tests and
benchmarks use it; it needs nothing but the standard library and this package.

It is a :class:`~.base.Remote`: ``list`` in key order, ``open`` with the md5 ETag of each body,
and failures typed as a real remote types them (:mod:`.errors`):

- ``fail(key, *errors)`` makes the next opens of a key raise those errors in turn: typed failures
  (``Unavailable(...)``, ``NotFound(...)``...) as they are, a standard-library error
  (``ConnectionResetError``, ``FileNotFoundError``) typed where it arises, as ``file://`` does;
- ``damage(key, *faults)`` makes the next opens of a key serve a damaged body in turn:
  ``"truncate"`` (half of it, the full size announced) or ``"corrupt"`` (one byte flipped);
- ``objects[key] = body`` after the listing changes the object behind the catalog's back;
- ``down`` makes every open raise :class:`Unavailable` (connection refused: an outage) until cleared.

:class:`PagedMemoryRemote` lists the same objects a page at a time, as S3's ``ListObjectsV2``
does, so the parallel listing runs in-process too; it counts its pages and can hold them, for
tests of a listing that blocks. tests/remote/test_conformance.py runs both through the suite every
backend passes, so a test on them shows what a real store would do.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator

from epochfs.sidecar.remote.base import (
    ListedPage,
    NotFound,
    PagedRemote,
    Reader,
    Remote,
    RemoteObject,
    Unavailable,
)
from epochfs.sidecar.remote.errors import Translated

DAMAGE = ("truncate", "corrupt")


class MemoryReader(Reader):
    def __init__(self, body: bytes, etag: str, *, size: int | None = None) -> None:
        self._body = memoryview(body)
        self._pos = 0
        self.size = len(body) if size is None else size
        self.etag = etag

    def read(self, n: int) -> bytes:
        chunk = bytes(self._body[self._pos:self._pos + n])
        self._pos += len(chunk)
        return chunk

    def close(self) -> None:
        pass


class MemoryRemote(Remote):
    """Objects held in a dict; every open is counted."""

    sorted_listing = True

    def __init__(self, objects: dict[str, bytes], *, url: str = "memory://test") -> None:
        self.url = url
        self.objects = dict(objects)
        self.down = threading.Event()
        self.opens: dict[str, int] = {}
        self._failures: dict[str, list[BaseException]] = {}
        self._damage: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def fail(self, key: str, *errors: BaseException) -> None:
        with self._lock:
            self._failures.setdefault(key, []).extend(errors)

    def damage(self, key: str, *faults: str) -> None:
        unknown = set(faults) - set(DAMAGE)
        if unknown:
            raise ValueError(f"unknown damage {sorted(unknown)} (known: {DAMAGE})")
        with self._lock:
            self._damage.setdefault(key, []).extend(faults)

    def list(self) -> Iterator[RemoteObject]:
        for key in sorted(self.objects, key=lambda k: k.encode()):
            body = self.objects[key]
            yield RemoteObject(key, len(body), hashlib.md5(body).hexdigest())

    def open(self, key: str, *, checksum: bool = False) -> MemoryReader:
        with self._lock:
            self.opens[key] = self.opens.get(key, 0) + 1
            queued = self._failures.get(key)
            error = queued.pop(0) if queued else None
            damaged = self._damage.get(key)
            fault = damaged.pop(0) if damaged else None
        if self.down.is_set():
            raise Unavailable(f"{key}: ConnectionRefusedError: Connection refused (the remote is down)")
        if error is not None:
            with Translated():  # a standard-library error is typed here, as a real remote does
                raise error
        if key not in self.objects:
            raise NotFound(f"{key}: no such object")
        body = self.objects[key]
        etag = hashlib.md5(body).hexdigest()
        if fault == "truncate":
            return MemoryReader(body[:len(body) // 2], etag, size=len(body))
        if fault == "corrupt":
            flipped = bytearray(body)
            flipped[len(flipped) // 2] ^= 0xFF
            return MemoryReader(bytes(flipped), etag)
        return MemoryReader(body, etag)

    def close(self) -> None:
        pass


_TOP = "\U0010ffff"
"""Above every key's next character: the token after a folder's prefix resumes past all its keys."""


class PagedMemoryRemote(MemoryRemote):
    """:class:`MemoryRemote` listing a page at a time, as S3's ``ListObjectsV2`` does (a prefix,
    a start key or a continuation token, the delimiter on demand; at most ``page`` entries a
    page), counting its pages in ``list_calls`` and ``pages_asked``."""

    def __init__(self, objects: dict[str, bytes], *, page: int = 10, url: str = "memory://paged") -> None:
        super().__init__(objects, url=url)
        self.page = page
        self.list_calls = 0
        self.pages_asked: list[tuple[str, str, str | None]] = []
        """(prefix, start_after, token) of each page asked, in order."""
        self.gate: threading.Event | None = None
        """When set to a cleared Event, every page but a span's first (a token, or a start after a
        key) waits for it: a listing that blocks after its first pages."""
        self.hold: dict[str, threading.Event] = {}
        """Prefixes whose pages (any, the first included) wait for their Event."""
        self._count = threading.Lock()

    def paged(self) -> PagedRemote:
        return self

    def list_page(self, prefix: str, *, start_after: str = "", token: str | None = None,
                  delimiter: bool = False, max_keys: int = 1000) -> ListedPage:
        with self._count:
            self.list_calls += 1
            self.pages_asked.append((prefix, start_after, token))
        held = self.hold.get(prefix)
        if held is not None and not delimiter:
            held.wait()
        gate = self.gate
        if gate is not None and (token or start_after) and not delimiter:
            gate.wait()
        resume = token or start_after
        keys = sorted((k for k in self.objects if k.startswith(prefix) and k > resume),
                      key=lambda k: k.encode())
        objects: list[RemoteObject] = []
        prefixes: list[str] = []
        last = ""
        for k in keys:
            if len(objects) + len(prefixes) >= min(self.page, max_keys):
                return ListedPage(objects, prefixes, last, truncated=True)
            rest = k[len(prefix):]
            if delimiter and "/" in rest:
                p = prefix + rest.split("/", 1)[0] + "/"
                if prefixes and prefixes[-1] == p:
                    continue
                prefixes.append(p)
                last = p + _TOP
                continue
            body = self.objects[k]
            objects.append(RemoteObject(k, len(body), hashlib.md5(body).hexdigest()))
            last = k
        return ListedPage(objects, prefixes, None, truncated=False)


__all__ = ["DAMAGE", "MemoryReader", "MemoryRemote", "PagedMemoryRemote"]
