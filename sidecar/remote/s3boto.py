"""The S3 operations that go through botocore's client alone: a ranged read, a HEAD, an upload.

None of them is on the way to a sample's bytes (:class:`~.s3.S3Remote` presigns its listing pages
and GETs): a ranged read serves an index's header or a Parquet footer, a HEAD a Parquet file's size
or a multipart object's part, an upload ``epochfs index --out s3://``. Each takes the client, the
bucket and the object's whole key (the remote's prefix included), so that :mod:`.s3`, which makes
the client on first need, keeps only the choice of path. Failures come out typed as the other
botocore calls' (:data:`~.s3read.BOTOCORE`).
"""

from __future__ import annotations

from typing import Any

from epochfs.sidecar.remote.base import RemoteError
from epochfs.sidecar.remote.librules import botocore_error_code
from epochfs.sidecar.remote.s3read import BOTOCORE


def read_range(client: Any, bucket: str, key: str, start: int, length: int) -> bytes:
    """One ``GetObject`` with a ``Range``: ``length`` bytes from ``start`` (fewer at the end, none
    from past it)."""
    if length <= 0:
        return b""
    with BOTOCORE:
        try:
            response = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{start + length - 1}")
        except Exception as e:
            if botocore_error_code(e) == "InvalidRange":  # starts at or past the end
                return b""
            raise
        body = response["Body"]
        try:
            data: bytes = body.read()
        finally:
            body.close()
    return data


def head_size(client: Any, bucket: str, key: str, part: int | None = None) -> int:
    """``HeadObject``'s ContentLength: of the object, or of its part ``part`` (1-based)."""
    extra = {} if part is None else {"PartNumber": part}
    with BOTOCORE:
        head = client.head_object(Bucket=bucket, Key=key, **extra)
    return int(head["ContentLength"])


def put_file(client: Any, bucket: str, key: str, path: str) -> None:
    """Upload the file at ``path`` as ``key`` (one PutObject)."""
    with open(path, "rb") as body:
        try:
            client.put_object(Bucket=bucket, Key=key, Body=body)
        except Exception as e:
            raise RemoteError(f"cannot write s3://{bucket}/{key}: {e}") from e


__all__ = ["head_size", "put_file", "read_range"]
