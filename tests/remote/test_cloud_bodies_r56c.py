"""Bodies of ``gs://`` and ``az://`` objects are read as stored, and as one version.

- An Azure blob written as a block list has no Content-MD5, so nothing but its size checks the
  body. Read a range at a time, a blob overwritten (a new block list committed at once) between
  two ranges gave the old version's first bytes and the new one's last, admitted under the old
  ETag. Every range must carry the ETag the blob had when opened, and a change must fail the read
  (retried) rather than join two versions.
- An object stored with ``Content-Encoding: gzip`` (``gsutil cp -Z``, an Azure blob uploaded
  with that content setting) was inflated by the client library as it was read: more bytes than
  the listed size, a ``ValueError`` from the reader, never cached. Its body is the stored bytes,
  which the listed size and the stored CRC32C (GCS) or Content-MD5 (Azure) describe.
- A gs:// ``--endpoint-url`` with a trailing ``/`` made gcsfs ask for ``//storage/v1/...``, a 404
  reported as "no bucket": the same endpoint with or without the slash reaches the same store.
- A gs:// object's fetch cost four requests, one of them a billed objects.list (gcsfs's ``info``
  looks for a folder of the object's name too): one metadata request and the body are enough.

Against the real servers: fake-gcs-server and Azurite (tests/emulators.py).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from emulators import ACCOUNT, KEY, running_azurite, running_fake_gcs
from proxy_helpers import ReverseFront

from epochfs.sidecar.remote import open_remote
from epochfs.sidecar.remote.base import BLOCK, Reader, Transient
from epochfs.sidecar.store import digests

RAW = b"".join(b"line %d of a text sample\n" % i for i in range(2000))
GZ = gzip.compress(RAW, mtime=0)
"""A text body as ``gsutil cp -Z`` stores it: far smaller than what it inflates to."""


def read_as_the_downloader_does(reader: Reader, size: int) -> bytes:
    """The downloader's reads (tempwrite's): ``readinto`` slices of at most a block, up to one
    byte past the listed size (a longer body is seen)."""
    buf = memoryview(bytearray(size + 1))
    got = 0
    while got < size + 1 and (n := reader.readinto(buf[got:min(got + BLOCK, size + 1)])):
        got += n
    return bytes(buf[:got])


@pytest.fixture
def azurite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Azurite's blob endpoint, its account's key in the environment as a user gives it."""
    for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", KEY)
    with running_azurite(tmp_path) as endpoint:
        yield endpoint


def _service(endpoint: str) -> object:
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient(endpoint, credential={"account_name": ACCOUNT, "account_key": KEY})


def _gcs_call(endpoint: str, path: str, body: bytes, ctype: str = "application/json") -> bytes:
    request = urllib.request.Request(endpoint + path, data=body, method="POST",
                                     headers={"Content-Type": ctype})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return bytes(answer.read())


def _gcs_put(endpoint: str, bucket: str, name: str, body: bytes, **metadata: str) -> None:
    """An object written as ``gsutil`` writes it: a multipart upload with its metadata."""
    meta = json.dumps({"name": name, **metadata})
    b = "B0UNDARY"
    upload = (f"--{b}\r\nContent-Type: application/json\r\n\r\n{meta}\r\n--{b}\r\n"
              "Content-Type: application/octet-stream\r\n\r\n").encode() + body + f"\r\n--{b}--\r\n".encode()
    _gcs_call(endpoint, f"/upload/storage/v1/b/{bucket}/o?uploadType=multipart", upload,
              f"multipart/related; boundary={b}")


def test_an_azure_blob_overwritten_between_two_ranges_fails_the_read_not_joined(azurite: str) -> None:
    """The blob is a block list (no Content-MD5); after the first block is read a new body of the
    same size is committed. The next read fails as Transient (the downloader reads it again);
    opened again, the blob reads whole as its new version, under its new ETag."""
    from azure.storage.blob import BlobBlock

    blob = _service(azurite).create_container("torn").get_blob_client("data/big.bin")  # type: ignore[attr-defined]
    size = 3 * BLOCK

    def write(body: bytes, ids: list[str]) -> None:
        for block_id, part in zip(ids, (body[:size // 2], body[size // 2:]), strict=True):
            blob.stage_block(block_id, part)
        blob.commit_block_list([BlobBlock(block_id) for block_id in ids])

    write(b"A" * size, ["YTA=", "YTE="])
    remote = open_remote("az://torn/data", endpoint_url=azurite, read_timeout=10)
    reader = remote.open("big.bin", checksum=True)
    first_etag = reader.etag
    assert reader.content_md5 is None and reader.size == size
    buf = memoryview(bytearray(size))
    got = reader.readinto(buf[:BLOCK])
    assert bytes(buf[:got]) == b"A" * BLOCK

    write(b"B" * size, ["YjA=", "YjE="])
    with pytest.raises(Transient, match="overwritten while it was read"):
        while got < size and (n := reader.readinto(buf[got:got + BLOCK])):
            got += n
    assert b"B" not in bytes(buf[:got])

    again = remote.open("big.bin", checksum=True)
    assert again.etag != first_etag
    assert read_as_the_downloader_does(again, size) == b"B" * size


def test_an_azure_blob_stored_gzip_encoded_is_read_as_stored_and_checked_by_its_md5(azurite: str) -> None:
    """Written in one request (Azure computes its Content-MD5) with ``Content-Encoding: gzip``:
    the body, a range of it and the md5 are the stored bytes'."""
    from azure.storage.blob import ContentSettings

    container = _service(azurite).create_container("gzc")  # type: ignore[attr-defined]
    container.upload_blob("data/t.txt", GZ, content_settings=ContentSettings(content_encoding="gzip"))
    remote = open_remote("az://gzc/data", endpoint_url=azurite, read_timeout=10)
    [listed] = list(remote.list())
    assert listed.size == len(GZ)
    reader = remote.open("t.txt", checksum=True)
    assert read_as_the_downloader_does(reader, listed.size) == GZ
    assert reader.content_md5 == hashlib.md5(GZ).hexdigest()
    assert remote.read_range("t.txt", 0, 2) == b"\x1f\x8b"
    assert remote.read_range("t.txt", len(GZ), 10) == b""


def test_a_gcs_object_stored_gzip_encoded_is_read_as_stored_and_checked_by_its_crc32c(tmp_path: Path) -> None:
    """``gsutil cp -Z``'s object: the listed size, the body and the stored CRC32C agree."""
    with running_fake_gcs(tmp_path) as endpoint:
        _gcs_call(endpoint, "/storage/v1/b?project=t", json.dumps({"name": "gz"}).encode())
        _gcs_put(endpoint, "gz", "data/t.txt", GZ, contentEncoding="gzip")
        remote = open_remote("gs://gz/data", endpoint_url=endpoint, read_timeout=10)
        [listed] = list(remote.list())
        assert listed.size == len(GZ)
        reader = remote.open("t.txt", checksum=True)
        body = read_as_the_downloader_does(reader, listed.size)
        assert body == GZ
        hasher = digests.new_hasher("crc32c")
        hasher.update(body)
        assert reader.checksum == ("crc32c", digests.value("crc32c", hasher))
        assert reader.content_md5 == hashlib.md5(GZ).hexdigest()
        assert remote.read_range("t.txt", 0, 2) == b"\x1f\x8b"


def test_a_gcs_endpoint_with_a_trailing_slash_reaches_the_same_store(tmp_path: Path) -> None:
    with running_fake_gcs(tmp_path) as endpoint:
        _gcs_call(endpoint, "/storage/v1/b?project=t", json.dumps({"name": "bkt"}).encode())
        for i in range(3):
            _gcs_put(endpoint, "bkt", f"data/{i}.bin", bytes([i]) * 100)
        plain = sorted(o.key for o in open_remote("gs://bkt/data", endpoint_url=endpoint).list())
        slashed = open_remote("gs://bkt/data", endpoint_url=endpoint + "/", read_timeout=10)
        slashed.probe()
        assert sorted(o.key for o in slashed.list()) == plain == ["0.bin", "1.bin", "2.bin"]
        reader = slashed.open("1.bin", checksum=True)
        assert reader.read(1000) == b"\x01" * 100
        assert reader.checksum is not None and reader.checksum[0] == "crc32c"


def test_a_gcs_fetch_asks_for_the_object_and_its_body_alone(tmp_path: Path) -> None:
    """Counted by a front that passes every request on to fake-gcs-server: no objects.list, and
    two requests (the object's resource, its body), the stored CRC32C still read."""
    with running_fake_gcs(tmp_path) as endpoint:
        _gcs_call(endpoint, "/storage/v1/b?project=t", json.dumps({"name": "bkt"}).encode())
        _gcs_put(endpoint, "bkt", "data/one.bin", b"z" * 5000)
        front = ReverseFront(upstream=endpoint)
        try:
            remote = open_remote("gs://bkt/data", endpoint_url=front.url, read_timeout=10)
            with front.lock:
                front.requests.clear()
            reader = remote.open("one.bin", checksum=True)
            assert read_as_the_downloader_does(reader, 5000) == b"z" * 5000
            with front.lock:
                asked = [path for _port, _method, path in front.requests]
        finally:
            front.close()
    assert reader.checksum is not None and reader.checksum[0] == "crc32c" and reader.etag
    assert not [path for path in asked if "/o?" in path], asked  # no objects.list
    assert len(asked) == 2, asked
