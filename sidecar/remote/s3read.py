"""The readers of an S3 ``GetObject`` body, and what the answer says can verify it.

An object's body reaches the downloader in one of two shapes: a presigned GET's response
(:class:`FastReader`, the fast path of :class:`~.s3.S3Remote`) or botocore's answer
(:class:`BotoReader`, the fallback). Both say the same things about verifying the body, each read
from its own shape: the full-object checksum S3 stored (``x-amz-checksum-*`` headers or
botocore's ``Checksum*`` fields, :func:`full_object_checksum`) and whether the ETag is the md5 of
the content (not for objects encrypted with KMS or customer keys, :func:`not_content_hashes`).
:mod:`.checksums` turns those into the downloader's verification plan, and the downloader alone
checks the body against them (:func:`no_second_check` keeps botocore from checking it again).

Apart from :mod:`.s3` because reading and vouching for a body is one concern, and choosing the
request (presigned or botocore's, which region, which proxy, listing) another.
"""

from __future__ import annotations

import contextlib
from typing import Any

from epochfs.sidecar.remote.base import Reader
from epochfs.sidecar.remote.errors import Translated, botocore_kind
from epochfs.sidecar.remote.httpget import Response

BOTOCORE = Translated(botocore_kind)
"""botocore's exceptions typed where they arise (:func:`~.librules.botocore_kind`)."""
_OS = Translated()  # the presigned fast path's sockets, TLS and http.client


CHECKSUMS = ("CRC64NVME", "CRC32C", "CRC32", "SHA256", "SHA1")
"""The algorithms of S3's stored checksums, the first one an answer carries taken."""

CHECKSUM_MODE = {"x-amz-checksum-mode": "ENABLED"}
"""The header that asks S3 to send the object's stored checksum with its body (signed into the
presigned URL, so it must be sent as it was signed)."""


def full_object_checksum(kind: object, values: dict[str, object]) -> tuple[str, str] | None:
    """The object's stored checksum of its whole body, ``(algorithm, base64)``, from a GetObject
    answer made with checksum mode enabled (``values``: upper-case algorithm name -> value,
    ``kind``: the checksum type); None for none or a composite one (``...-N``: a checksum of the
    parts' checksums, which the multipart ETag check covers instead)."""
    if str(kind or "FULL_OBJECT").upper() != "FULL_OBJECT":
        return None
    for name in CHECKSUMS:
        value = values.get(name)
        if value and "-" not in str(value):
            return name.lower(), str(value)
    return None


def not_content_hashes(encryption: object, customer_algorithm: object) -> bool:
    """Whether ETags are not md5s of the content: objects encrypted with KMS or customer keys."""
    return str(encryption or "").startswith("aws:kms") or bool(customer_algorithm)


def no_second_check(params: dict[str, Any], **_: Any) -> None:
    """botocore would check a GetObject body against its stored checksum itself when checksum mode
    is enabled (on every read, before the downloader's own check of the same bytes): the
    downloader checks it once, on the blocks it writes, so botocore is told of no algorithm to
    check (``before-call``, after botocore has resolved them into the request context; the S3
    remote registers it on every client it makes)."""
    checksum = params.get("context", {}).get("checksum")
    if isinstance(checksum, dict):
        checksum.pop("response_algorithms", None)


class BotoReader(Reader):
    """A GetObject body from botocore's own connection pool, read on the calling thread (the
    fallback when presigned URLs are refused).

    It also says what can verify the body (:mod:`.checksums`): ``checksum``, the
    full-object checksum S3 stored, and ``etag_is_md5``, False for objects encrypted with KMS or
    customer keys, whose ETags are not md5s of their content."""

    def __init__(self, response: dict[str, Any]) -> None:
        self._body = response["Body"]
        self.size: int | None = response.get("ContentLength")
        self.etag: str | None = response.get("ETag")
        self.checksum = full_object_checksum(
            response.get("ChecksumType"), {name: response.get(f"Checksum{name}") for name in CHECKSUMS})
        self.etag_is_md5 = not not_content_hashes(response.get("ServerSideEncryption"),
                                                  response.get("SSECustomerAlgorithm"))

    def read(self, n: int) -> bytes:
        parts: list[bytes] = []
        got = 0
        with BOTOCORE:
            while got < n:
                chunk: bytes = self._body.read(n - got)
                if not chunk:
                    break
                parts.append(chunk)
                got += len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._body.close()


class FastReader(Reader):
    """A presigned GET's body (:class:`.httpget.Response`), read into the
    downloader's buffer; the socket's, TLS's and ``http.client``'s errors come out typed. Like
    :class:`BotoReader` it says what can verify the body, read from the response's headers."""

    def __init__(self, response: Response) -> None:
        self._response = response
        self.size = response.size
        self.etag = response.etag
        header = response.header
        self.checksum = full_object_checksum(
            header("x-amz-checksum-type"),
            {name: header(f"x-amz-checksum-{name.lower()}") for name in CHECKSUMS})
        self.etag_is_md5 = not not_content_hashes(
            header("x-amz-server-side-encryption"),
            header("x-amz-server-side-encryption-customer-algorithm"))

    def readinto(self, buf: memoryview) -> int:
        with _OS:
            return self._response.readinto(buf)

    def read(self, n: int) -> bytes:
        with _OS:
            return self._response.read(n)

    def close(self) -> None:
        self._response.close()


__all__ = ["BOTOCORE", "CHECKSUMS", "CHECKSUM_MODE", "BotoReader", "FastReader", "full_object_checksum",
           "no_second_check", "not_content_hashes"]
