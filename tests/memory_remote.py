"""An in-memory remote with failure injection, so the sampler's logic runs in-process in
milliseconds (mountpoint-s3's in-memory and failure-injecting clients are the model).

It speaks the :class:`epochfs.sidecar.remote.Remote` protocol: ``list`` in key order, ``open`` with
the md5 ETag of each body. ``fail(key, *errors)`` makes the next opens of a key raise those errors
in turn; ``down`` makes every open raise ConnectionRefusedError (a remote outage) until cleared.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator

from epochfs.sidecar.remote import RemoteObject


class MemoryReader:
    def __init__(self, body: bytes, etag: str) -> None:
        self._body = memoryview(body)
        self._pos = 0
        self.size: int | None = len(body)
        self.etag: str | None = etag

    def read(self, n: int) -> bytes:
        chunk = bytes(self._body[self._pos:self._pos + n])
        self._pos += len(chunk)
        return chunk

    def close(self) -> None:
        pass


class MemoryRemote:
    """Objects held in a dict; every open is counted."""

    sorted_listing = True

    def __init__(self, objects: dict[str, bytes], *, url: str = "memory://test") -> None:
        self.url = url
        self.objects = dict(objects)
        self.down = threading.Event()
        self.opens: dict[str, int] = {}
        self._failures: dict[str, list[BaseException]] = {}
        self._lock = threading.Lock()

    def fail(self, key: str, *errors: BaseException) -> None:
        with self._lock:
            self._failures.setdefault(key, []).extend(errors)

    def list(self) -> Iterator[RemoteObject]:
        for key in sorted(self.objects, key=lambda k: k.encode()):
            body = self.objects[key]
            yield RemoteObject(key, len(body), hashlib.md5(body).hexdigest())

    def open(self, key: str, *, checksum: bool = False) -> MemoryReader:
        with self._lock:
            self.opens[key] = self.opens.get(key, 0) + 1
            queued = self._failures.get(key)
            error = queued.pop(0) if queued else None
        if self.down.is_set():
            raise ConnectionRefusedError(111, "Connection refused (the remote is down)")
        if error is not None:
            raise error
        if key not in self.objects:
            raise FileNotFoundError(key)
        body = self.objects[key]
        return MemoryReader(body, hashlib.md5(body).hexdigest())

    def close(self) -> None:
        pass
