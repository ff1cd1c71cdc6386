"""An in-memory remote that lists a page at a time like S3's ListObjectsV2 (a prefix, a start
key or a continuation token, the delimiter on demand), counting its LIST calls, with a gate that
holds every continuation page until a test opens it (a listing that blocks after its first pages)."""

from __future__ import annotations

import hashlib
import threading

from epochfs.sidecar.remote import PagedRemote, RemoteObject
from epochfs.sidecar.remote.testing import MemoryRemote

_TOP = "\U0010ffff"


class PagedMemoryRemote(MemoryRemote):
    def __init__(self, objects: dict[str, bytes], *, page: int = 10, url: str = "memory://paged") -> None:
        super().__init__(objects, url=url)
        self.page = page
        self.list_calls = 0
        self.gate: threading.Event | None = None
        """When set to a cleared Event, every page but a span's first (a token, or a start after a
        key) waits for it."""
        self.pages_asked: list[tuple[str, str, str | None]] = []
        self.hold: dict[str, threading.Event] = {}
        """Prefixes whose pages (any, the first included) wait for their Event."""
        self._count = threading.Lock()

    def paged(self) -> PagedRemote:
        return self

    def list_page(self, prefix: str, *, start_after: str = "", token: str | None = None,
                  delimiter: bool = False, max_keys: int = 1000
                  ) -> tuple[list[RemoteObject], list[str], str | None]:
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
                return objects, prefixes, last
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
        return objects, prefixes, None
