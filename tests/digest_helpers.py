"""Digests as the store records them (``md5:<hex>``, ``crc64nvme:<base64>``...), computed here
independently of epochfs (hashlib, zlib, awscrt) so that a test can check what the downloader
recorded for a body."""

from __future__ import annotations

import base64
import hashlib
import zlib


def raw_digest(algorithm: str, data: bytes) -> bytes:
    """The digest of ``data`` in ``algorithm`` (S3's names, lower case, or md5), as bytes."""
    if algorithm in ("md5", "sha1", "sha256"):
        return hashlib.new(algorithm, data).digest()
    if algorithm == "crc32":
        return zlib.crc32(data).to_bytes(4, "big")
    from awscrt import checksums

    if algorithm == "crc32c":
        return checksums.crc32c(data).to_bytes(4, "big")
    if algorithm == "crc64nvme":
        return checksums.crc64nvme(data).to_bytes(8, "big")
    raise ValueError(algorithm)


def s3_checksum(algorithm: str, data: bytes) -> str:
    """The base64 value S3 stores for ``data`` (``x-amz-checksum-<algorithm>``)."""
    return base64.b64encode(raw_digest(algorithm, data)).decode("ascii")


def digest_of(algorithm: str, data: bytes) -> str:
    """``<algorithm>:<value>`` of ``data``: hex for md5, base64 for the others."""
    if algorithm == "md5":
        return f"md5:{hashlib.md5(data).hexdigest()}"
    return f"{algorithm}:{s3_checksum(algorithm, data)}"


def expected_record(recorded_digest: str, data: bytes) -> tuple[str, str]:
    """``(digest, checksum)`` a sample of ``data`` must have, in the algorithm its recorded digest
    names (a bare hex digest, as admissions without a named digest record it, is an md5)."""
    algorithm, sep, _ = recorded_digest.partition(":")
    if not sep:
        md5 = hashlib.md5(data).hexdigest()
        return md5, f"md5:{md5}"
    digest = digest_of(algorithm, data)
    return digest, digest


def checksum_like(checksum: str, data: bytes) -> str:
    """``data``'s checksum in the algorithm that a manifest ``checksum`` names (``md5:<hex>``,
    ``crc32:<base64>``...): equal to ``checksum`` when ``data`` are the bytes it vouches for."""
    algorithm, sep, _ = checksum.partition(":")
    return digest_of(algorithm if sep else "md5", data)
