"""A multipart object whose parts' sizes cannot be had is admitted checked by its size, not
skipped as corrupt; one whose known part sizes do not hash to its ETag is still refused.

Before: 257 parts of uneven sizes (more than the 256 whose sizes are asked) failed verification
as a Transient, were fetched again and skipped: a correct object never cached ("gave up after 2
attempts: Transient: the parts of the body do not hash to the multipart ETag …-257"). moto's
real S3 protocol, a server of this module's own started with small parts allowed
(``S3_UPLOAD_PART_MIN_SIZE``), so 257 parts are not 1.3 GB."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import S3Server, moto_server
from test_checksum_kinds import candidate, downloader


@pytest.fixture(scope="module")
def small_parts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with moto_server(log, {"S3_UPLOAD_PART_MIN_SIZE": "1"}) as server:
        yield server


@pytest.fixture
def s3(small_parts: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    small_parts.reset()
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    return small_parts


def _upload(s3: S3Server, key: str, sizes: list[int]) -> bytes:
    client = s3.client()
    client.create_bucket(Bucket="bkt")
    body = os.urandom(sum(sizes))
    upload = client.create_multipart_upload(Bucket="bkt", Key=key)
    parts, at = [], 0
    for number, size in enumerate(sizes, start=1):
        r = client.upload_part(Bucket="bkt", Key=key, UploadId=upload["UploadId"], PartNumber=number,
                               Body=body[at:at + size])
        parts.append({"ETag": r["ETag"], "PartNumber": number})
        at += size
    client.complete_multipart_upload(Bucket="bkt", Key=key, UploadId=upload["UploadId"],
                                     MultipartUpload={"Parts": parts})
    assert client.head_object(Bucket="bkt", Key=key)["ETag"].endswith(f'-{len(sizes)}"')
    return body


def test_more_uneven_parts_than_are_asked_are_admitted_by_size(
        s3: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    body = _upload(s3, "mp/varied257.bin", [100, 200] * 128 + [50])
    with caplog.at_level(logging.WARNING, logger="epochfs.download"), \
            downloader(tmp_path, s3.endpoint) as (d, _store):
        result = d.fetch(candidate(s3, "mp/varied257.bin"))
        assert result.admission is not None and result.error is None, result
        assert result.admission.verified == "size-only"
        assert result.admission.temp.read_bytes() == body
    assert any("257 parts of uneven sizes" in r.message for r in caplog.records), caplog.text


def test_uneven_parts_whose_total_fits_the_first_s_size_are_admitted_by_size(
        s3: S3Server, tmp_path: Path) -> None:
    """300 parts of 100, 99 … 99, 300 bytes add up to a total the first part's size explains (299
    parts of 100 and a last of 2): the guess does not hash, and only the last part's own size shows
    it was a guess, not a wrong body."""
    body = _upload(s3, "mp/fits300.bin", [100] + [99] * 298 + [300])
    with downloader(tmp_path, s3.endpoint) as (d, _store):
        result = d.fetch(candidate(s3, "mp/fits300.bin"))
        assert result.admission is not None and result.error is None, result
        assert result.admission.verified == "size-only"
        assert result.admission.temp.read_bytes() == body


def test_uneven_parts_within_the_asked_are_checked_against_the_etag(s3: S3Server, tmp_path: Path) -> None:
    body = _upload(s3, "mp/varied3.bin", [100, 200, 50])
    with downloader(tmp_path, s3.endpoint) as (d, _store):
        result = d.fetch(candidate(s3, "mp/varied3.bin"))
        assert result.admission is not None and result.admission.verified == "etag-multipart", result
        assert result.admission.temp.read_bytes() == body
