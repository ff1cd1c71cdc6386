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
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator

from epochfs.sidecar.remote.base import NotFound, Reader, Remote, RemoteObject, Unavailable
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


__all__ = ["DAMAGE", "MemoryReader", "MemoryRemote"]
