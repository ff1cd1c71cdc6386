"""The S3 remote's first request is the LIST (sidecar/remote/s3.py): no HEAD of the bucket first.

A HEAD of the bucket before the first LIST is a round trip on the way to the first GET that adds
nothing the LIST does not say: a missing bucket or denied access comes back from the LIST itself,
typed. The region of a bucket signed for the wrong one is learned when S3 refuses a presigned
request (301 with ``x-amz-bucket-region``, as AWS answers): the bucket's HEAD is asked then, and
the refused request made again, signed for the bucket's region, without botocore.

A recording front stands before the moto server: the real ``epochfs sample`` process (and a
real :class:`S3Remote`) talk to it, and it keeps every request's method and path in order.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from common import S3Server, stop_process
from proxy_helpers import _Base, _Handler

from epochfs.sidecar.remote.s3 import S3Remote

REDIRECT = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>PermanentRedirect</Code><Message>The '
            b"bucket you are attempting to access must be addressed using the specified endpoint."
            b"</Message><RequestId>0123456789ABCDEF</RequestId></Error>")


@dataclass
class RecordingFront(_Base):
    """Passes every request on to ``upstream`` and records ``(method, path)`` in order; a
    presigned GET of a bucket in ``regions`` signed for another region is answered as AWS does
    (301 ``PermanentRedirect`` with ``x-amz-bucket-region``), not passed on."""

    upstream: str
    regions: dict[str, str] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        owner = self
        up = urlsplit(self.upstream)

        class Handler(_Handler):
            def _front(self) -> None:
                with owner.lock:
                    owner.requests.append((self.command, self.path))
                parsed = urlsplit(self.path)
                region = owner.regions.get(parsed.path.strip("/").partition("/")[0])
                credential = parse_qs(parsed.query).get("X-Amz-Credential", [""])[0]
                if self.command == "GET" and region and f"/{region}/" not in credential:
                    self.send_response(301, "Moved Permanently")
                    self.send_header("x-amz-bucket-region", region)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(REDIRECT)))
                    self.end_headers()
                    self.wfile.write(REDIRECT)
                    return
                self.pass_on(up.hostname or "127.0.0.1", up.port or 80, self.path)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _front

        Handler.owner = owner
        self._serve(Handler, None)

    def seen(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.requests)


@pytest.fixture
def front(s3: S3Server) -> Iterator[RecordingFront]:
    f = RecordingFront(s3.endpoint)
    try:
        yield f
    finally:
        f.close()


def _object_get(path: str) -> bool:
    return urlsplit(path).path.endswith(".bin")


def test_epochfs_samples_first_request_is_the_list(s3: S3Server, signed_here: None,
                                                    front: RecordingFront, tmp_path: Path) -> None:
    client = s3.client()
    client.create_bucket(Bucket="bkt")
    for i in range(3):
        client.put_object(Bucket="bkt", Key=f"ds/{i}.bin", Body=b"x" * 100, ChecksumAlgorithm="CRC64NVME")
    argv = ["--log-level", "WARNING", "sample", "--remote", "s3://bkt/ds", "--cache", str(tmp_path / "c"),
            "--endpoint-url", front.url, "--capacity", "1Mi"]
    proc = subprocess.Popen([sys.executable, "-P", "-c", "import sys; from epochfs.sidecar.cli import main; "
                             "sys.exit(main(sys.argv[1:]))", *argv])
    try:
        deadline = time.monotonic() + 60
        while not any(_object_get(path) for method, path in front.seen() if method == "GET"):
            assert proc.poll() is None, "epochfs sample exited before its first object GET"
            assert time.monotonic() < deadline, front.seen()
            time.sleep(0.02)  # polling the front's log for the condition, with a deadline
    finally:
        stop_process(proc)
    seen = front.seen()
    first_object = next(i for i, (m, p) in enumerate(seen) if m == "GET" and _object_get(p))
    before = seen[:first_object]
    assert [m for m, _ in before] == ["GET"] * len(before), before  # no HEAD on the way
    assert before and "list-type=2" in before[0][1]


def test_a_bucket_of_another_region_is_signed_for_it_after_the_refusal(
        s3: S3Server, signed_here: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    client = s3.client()
    client.create_bucket(Bucket="far", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    client.put_object(Bucket="far", Key="x.bin", Body=b"x", ChecksumAlgorithm="CRC64NVME")
    f = RecordingFront(s3.endpoint, regions={"far": "eu-west-1"})
    remote = S3Remote(url="s3://far", endpoint_url=f.url)
    try:
        assert f.seen() == []  # nothing asked before the listing
        assert [o.key for o in remote.list_page("")[0]] == ["x.bin"]
        assert remote._signer is not None and remote._signer.region == "eu-west-1"
        reader = remote.open("x.bin")
        try:
            assert reader.read(10) == b"x"
        finally:
            reader.close()
        assert remote._boto is None  # botocore not made for any of it
        methods = [m for m, _ in f.seen()]
        assert methods == ["GET", "HEAD", "GET", "GET"]  # refused LIST, the HEAD, LIST, object
    finally:
        remote.close()
        f.close()
