"""Digests of object bodies that carry the name of their algorithm: ``md5:<hex>``,
``crc64nvme:<base64>``, ``crc32c:<base64>``, ``crc32:<base64>``, ``sha1:<base64>``,
``sha256:<base64>``.

Why a digest names its algorithm: the downloader computes exactly one digest of each body while
streaming it, the one the remote's stored checksum is in (a CRC64NVME, say, checked against S3's
``x-amz-checksum-crc64nvme``), or md5 where only a plain md5 ETag can vouch for the bytes. That
digest is recorded as the sample's ``digest`` and is the reference every later scrub of the local
copy recomputes, so the scrub must be told which algorithm to run. A bare 32-digit hex string (the
digests of index schema 2 before they carried a name) is an md5. md5 is written in hex, as in the
manifest's ``md5:<hex>``; the others in base64, as S3 writes its checksums, so a digest and the
checksum S3 stored compare as strings.

CRC32C and CRC64NVME are awscrt's (hardware CRC instructions, about 20 GB/s on one core, the GIL
released); CRC32 is zlib's; md5 and the SHAs are hashlib's. Without awscrt the two CRCs are not
available here (:func:`available`), and a digest naming one cannot be checked (:func:`hasher`
raises ``ValueError``).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import zlib
from collections.abc import Callable
from typing import Any, Protocol

from epochfs.sidecar.store import crtcrc

MD5 = "md5"
BLOCK = 1 << 20
"""Bytes hashed at a time: the downloader's blocks from the network (the remote hands them on at
this size) and the scrub's from the disk. hashlib and awscrt release the GIL for blocks this
large, so the hashing of one fetch runs beside the others' network reads."""


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


_BUILTIN: dict[str, Callable[[], Hasher]] = {
    MD5: hashlib.md5,
    "crc32": lambda: _Crc(zlib.crc32, 4),
    "sha1": hashlib.sha1,
    "sha256": hashlib.sha256,
}
_CRT_WIDTHS = {"crc32c": 4, "crc64nvme": 8}


@functools.cache
def _crt() -> dict[str, Callable[[Any, int], int]] | None:
    """awscrt's CRCs by name, or None without awscrt; loaded on first use, so that processes which
    only read the store (the FUSE server, ``epochfs status``) do not load its native library.
    Straight from its shared library where that checks out (:mod:`.crtcrc`: no ~55 ms module
    start with the GIL held), else through ``awscrt.checksums``."""
    direct = crtcrc.load()
    if direct is not None:
        return direct
    try:
        from awscrt import checksums
    except ImportError:
        return None
    return {name: getattr(checksums, name) for name in _CRT_WIDTHS}


def available(algorithm: str) -> bool:
    """Whether digests in ``algorithm`` can be computed here."""
    return algorithm in _BUILTIN or (algorithm in _CRT_WIDTHS and _crt() is not None)


def local_algorithm() -> str:
    """The digest of a body that nothing the remote stored is computed in (a multipart ETag, no
    checksum at all): it only has to find a changed byte of the local copy later, so the cheapest."""
    return "crc64nvme" if available("crc64nvme") else MD5


def new_hasher(algorithm: str) -> Hasher:
    """A fresh hasher for ``algorithm``; ``ValueError`` when it cannot be computed here."""
    builtin = _BUILTIN.get(algorithm)
    if builtin is not None:
        return builtin()
    crt = _crt() if algorithm in _CRT_WIDTHS else None
    if crt is None:
        missing = " (awscrt is not installed)" if algorithm in _CRT_WIDTHS else ""
        raise ValueError(f"cannot compute {algorithm!r} digests here{missing}")
    return _Crc(crt[algorithm], _CRT_WIDTHS[algorithm])


def value(algorithm: str, h: Hasher) -> str:
    """The value part of a digest: hex for md5, base64 (as S3 writes checksums) for the rest."""
    raw = h.digest()
    return raw.hex() if algorithm == MD5 else base64.b64encode(raw).decode("ascii")


def format_digest(algorithm: str, h: Hasher) -> str:
    """``<algorithm>:<value>`` of what ``h`` has hashed."""
    return f"{algorithm}:{value(algorithm, h)}"


def parse(digest: str) -> tuple[str, str] | None:
    """``(algorithm, value)`` of a recorded digest; a bare 32-digit hex string is an md5 (schema 2
    before digests named their algorithm); None for an empty one (only the size is known)."""
    if not digest:
        return None
    algorithm, sep, rest = digest.partition(":")
    if sep:
        return algorithm.lower(), rest
    return MD5, digest.lower()


def hasher(digest: str) -> tuple[Hasher, str, str] | None:
    """``(a fresh hasher, algorithm, expected value)`` to check bytes against ``digest``; None
    when the digest is empty. ``ValueError`` when its algorithm cannot be computed here."""
    parsed = parse(digest)
    if parsed is None:
        return None
    algorithm, expected = parsed
    return new_hasher(algorithm), algorithm, expected


__all__ = [
    "BLOCK",
    "MD5",
    "Hasher",
    "available",
    "format_digest",
    "hasher",
    "local_algorithm",
    "new_hasher",
    "parse",
    "value",
]
