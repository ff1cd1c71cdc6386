"""What can vouch for a downloaded body, beyond its size: the checks the downloader runs.

A body is *verified* when a checksum the remote stored before the transfer matches the bytes that
arrived. Three such checksums exist, tried in this order by :mod:`epochfs.sidecar.download`:

* a plain md5 ETag (a single-part S3 upload without KMS/customer keys, and many other stores):
  the md5 computed while streaming must equal it. Kind ``etag-md5``.
* a full-object checksum the remote returns with the body (S3 with ``ChecksumMode=ENABLED``:
  ``x-amz-checksum-crc64nvme``/``crc32c``/``crc32``/``sha1``/``sha256`` of type FULL_OBJECT),
  computed on the same blocks as the md5. Kind: the algorithm's name. CRC32C and CRC64NVME need
  awscrt (``pip install awscrt``); without it those checksums cannot be computed here.
* a multipart ETag (``<md5 of the parts' md5s>-<parts>``): the md5 of each part of the written
  file, with the part sizes the remote reports (S3: ``HeadObject`` with ``PartNumber``),
  re-hashed into that ETag. Kind ``etag-multipart``.

When none applies (``file://``, most HTTP servers, S3 objects encrypted with KMS or customer keys
that store no checksum) the kind is ``size-only``: the store then records no checksum that would
vouch for the bytes (the manifest says ``size-only``), only their md5 as the reference for scrubs
of the local copy. Nothing here imports the rest of epochfs.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

ETAG_MD5 = "etag-md5"
ETAG_MULTIPART = "etag-multipart"
SIZE_ONLY = "size-only"

MAX_PART_HEADS = 256
"""Most parts whose sizes are asked one by one when the parts are not all of the first part's size
(a HEAD each); beyond that such an object cannot be verified by its multipart ETag."""


class Hasher(Protocol):
    def update(self, data: Any, /) -> None: ...

    def digest(self) -> bytes: ...


class _Crc:
    """A CRC with the interface of hashlib's objects; ``fn(data, crc) -> crc``."""

    def __init__(self, fn: Callable[[Any, int], int], width: int) -> None:
        self._fn = fn
        self._width = width
        self._value = 0

    def update(self, data: Any, /) -> None:
        self._value = self._fn(data, self._value)

    def digest(self) -> bytes:
        return self._value.to_bytes(self._width, "big")


def _crt(name: str, width: int) -> Callable[[], Hasher] | None:
    try:
        from awscrt import checksums
    except ImportError:
        return None
    fn = getattr(checksums, name)
    return lambda: _Crc(lambda data, crc: int(fn(data, crc)), width)


def _algorithms() -> dict[str, Callable[[], Hasher]]:
    found: dict[str, Callable[[], Hasher]] = {
        "crc32": lambda: _Crc(zlib.crc32, 4),
        "sha1": hashlib.sha1,
        "sha256": hashlib.sha256,
    }
    for name, width in (("crc32c", 4), ("crc64nvme", 8)):
        factory = _crt(name, width)
        if factory is not None:
            found[name] = factory
    return found


ALGORITHMS = _algorithms()
"""Full-object checksums computable here, by their lower-case S3 names."""


def full_object_hasher(checksum: tuple[str, str] | None) -> Hasher | None:
    """A hasher for a full-object checksum ``(algorithm, base64 value)``; None when there is none
    or its algorithm cannot be computed here."""
    if checksum is None or checksum[0] not in ALGORITHMS:
        return None
    return ALGORITHMS[checksum[0]]()


def encoded(h: Hasher) -> str:
    """A hasher's digest as S3 writes checksums: base64."""
    return base64.b64encode(h.digest()).decode("ascii")


def multipart_etag(etag: str | None) -> tuple[str, int] | None:
    """``(md5 hex of the parts' md5s, parts)`` of a multipart ETag, or None."""
    if not etag:
        return None
    tag, sep, count = etag.strip().strip('"').lower().rpartition("-")
    if not sep or not count.isdigit() or int(count) < 1 or len(tag) != 32:
        return None
    if any(c not in "0123456789abcdef" for c in tag):
        return None
    return tag, int(count)


def uniform_parts(total: int, count: int, first: int) -> list[int] | None:
    """Part sizes when every part but the last has the first part's size (what upload tools do);
    None when ``total`` cannot be split so."""
    if count < 1 or first < 1:
        return None
    last = total - first * (count - 1)
    if not 0 < last <= first:
        return None
    return [first] * (count - 1) + [last]


def parts_etag(path: Path, sizes: list[int], *, block: int = 1 << 20) -> str:
    """The multipart ETag of the file at ``path`` cut into parts of ``sizes``: the md5 of the
    concatenated md5 digests of the parts, then ``-<parts>``."""
    outer = hashlib.md5()
    buf = memoryview(bytearray(block))
    with open(path, "rb", buffering=0) as f:
        for size in sizes:
            inner = hashlib.md5()
            left = size
            while left:
                n = f.readinto(buf[:min(block, left)])
                if not n:
                    raise ValueError(f"{path}: shorter than its parts")
                inner.update(buf[:n])
                left -= n
            outer.update(inner.digest())
        if f.read(1):
            raise ValueError(f"{path}: longer than its parts")
    return f"{outer.hexdigest()}-{len(sizes)}"


__all__ = [
    "ALGORITHMS",
    "ETAG_MD5",
    "ETAG_MULTIPART",
    "MAX_PART_HEADS",
    "SIZE_ONLY",
    "encoded",
    "full_object_hasher",
    "multipart_etag",
    "parts_etag",
    "uniform_parts",
]
