"""What can vouch for a downloaded body, beyond its size: the checks the downloader runs, and the
one digest it computes while streaming.

A body is *verified* when a checksum the remote stored before the transfer matches the bytes that
arrived. These are tried in this order by :mod:`epochfs.sidecar.download` (:func:`choose`):

* a full-object checksum the remote returns with the body (S3 with checksum mode enabled:
  ``x-amz-checksum-crc64nvme``/``crc32c``/``crc32``/``sha1``/``sha256`` of type FULL_OBJECT; every
  object uploaded since 2025 has one, CRC64NVME by default): that CRC is computed while streaming
  (awscrt's hardware CRC, about 20 GB/s on one core, against 0.5-0.8 GB/s for md5) and must equal
  it. Kind: the algorithm's name.
* a plain md5 ETag (a single-part upload without KMS/customer keys that stored no checksum, and
  many other stores): the md5 computed while streaming must equal it. Kind ``etag-md5``.
* a multipart ETag (``<md5 of the parts' md5s>-<parts>``): the md5 of each part of the written
  file, with the part sizes the remote reports (S3: ``HeadObject`` with ``PartNumber``),
  re-hashed into that ETag. Kind ``etag-multipart``.

When none applies (``file://``, most HTTP servers, S3 objects encrypted with KMS or customer keys
that store no checksum) the kind is ``size-only``: the store then records no checksum that would
vouch for the bytes (the manifest says ``size-only``).

Exactly one digest of each body is computed while it streams, and it is recorded as the scrub's
reference for the local copy (:mod:`epochfs.sidecar.store.digests`, ``<algorithm>:<value>``): the
stored checksum's algorithm, md5 for a plain md5 ETag, else the cheapest (CRC64NVME). md5 is never
computed when a stored checksum can vouch for the bytes. Nothing here imports the rest of epochfs
but the store's digests.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from epochfs.sidecar.store import digests
from epochfs.sidecar.store.digests import Hasher

ETAG_MD5 = "etag-md5"
ETAG_MULTIPART = "etag-multipart"

MAX_PART_HEADS = 256
"""Most parts whose sizes are asked one by one when the parts are not all of the first part's size
(a HEAD each); beyond that such an object cannot be verified by its multipart ETag."""

FULL_OBJECT = ("crc64nvme", "crc32c", "crc32", "sha256", "sha1")
"""The full-object checksums S3 may store, in the order they are preferred when several are sent."""



@dataclass(frozen=True)
class Plan:
    """What the downloader computes while streaming one body, and what it decides.

    ``algorithm`` is the one digest computed on the body's blocks (and recorded for the scrub);
    ``kind`` the check that digest settles (a full-object checksum's name or ``etag-md5``), with
    ``expected`` the value it must equal (as :func:`epochfs.sidecar.store.digests.value` writes
    it); ``kind`` None: the digest vouches for nothing by itself (multipart ETag, size only)."""

    algorithm: str
    kind: str | None = None
    expected: str | None = None


def choose(full: tuple[str, str] | None, md5_etag: str | None) -> Plan:
    """The plan for a body: its stored full-object checksum ``(algorithm, base64)`` when there is
    one computable here, else its plain md5 ETag (hex), else only the local digest."""
    if full is not None and full[0] in FULL_OBJECT and digests.available(full[0]):
        return Plan(full[0], full[0], full[1])
    if md5_etag is not None:
        return Plan(digests.MD5, ETAG_MD5, md5_etag.lower())
    return Plan(digests.local_algorithm())


def plain_md5_etag(etag: str | None) -> str | None:
    """The hex md5 an ETag stands for, or None (multipart ``-N`` ETags, SSE-KMS, other stores)."""
    if not etag:
        return None
    tag = etag.strip().strip('"').lower()
    if len(tag) == 32 and all(c in "0123456789abcdef" for c in tag):
        return tag
    return None


def multipart_etag(etag: str | None) -> tuple[str, int] | None:
    """``(md5 hex of the parts' md5s, parts)`` of a multipart ETag, or None."""
    if not etag:
        return None
    tag, sep, count = etag.strip().strip('"').lower().rpartition("-")
    if not sep or not (count.isascii() and count.isdigit()) or int(count) < 1 or len(tag) != 32:
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


def parts_etag(path: Path, sizes: list[int], *, block: int = digests.BLOCK) -> str:
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
    "ETAG_MD5",
    "ETAG_MULTIPART",
    "FULL_OBJECT",
    "MAX_PART_HEADS",
    "Hasher",
    "Plan",
    "choose",
    "multipart_etag",
    "parts_etag",
    "plain_md5_etag",
    "uniform_parts",
]
