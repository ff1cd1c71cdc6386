"""What ``epochfs sample`` imports before its first GET (docs/performance.md, "Fetch").

Every module imported on the way to the first GET delays it: prometheus-client (~0.05 s with the
http.server it pulls in), botocore (~0.3 s), fsspec, and (listing on threads) the listing process's
multiprocessing are not needed before the first page is asked for, and are imported where they
are first used. A
fresh process runs the real command against the S3 server and stops at its first GET (the
listing page after the bucket's HEAD), reporting which of them it had imported by then.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from common import S3Server

SCRIPT = """
import http.client, json, os, sys

HEAVY = json.loads(sys.argv[1])
send = http.client.HTTPConnection.putrequest

def first_get(self, method, url, *args, **kwargs):
    if method == "GET":
        print(json.dumps({"url": url, "imported": sorted(m for m in HEAVY if m in sys.modules)}), flush=True)
        os._exit(0)  # the first GET is where this test ends (a test-only process, nothing to clean)
    return send(self, method, url, *args, **kwargs)

http.client.HTTPConnection.putrequest = first_get
from epochfs.sidecar.cli import main
sys.exit(main(sys.argv[2:]))
"""

HEAVY = ["prometheus_client", "botocore", "boto3", "fsspec", "aiohttp", "http.server",
         "epochfs.sidecar.remote.fsspec", "epochfs.sidecar.remote.httpindex", "multiprocessing",
         "epochfs.sidecar.listing.process", "epochfs.sidecar.listing.child"]
"""Modules the sampler must not import before its first GET."""


@pytest.fixture
def bucket(s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """A bucket of three objects, and an environment where the URLs are signed without botocore
    (keys in the environment, no AWS config file: remote/sigv4.py)."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    client = s3.client()
    client.create_bucket(Bucket="bkt")
    for i in range(3):
        client.put_object(Bucket="bkt", Key=f"ds/{i}.bin", Body=b"x" * 100, ChecksumAlgorithm="CRC64NVME")
    return "s3://bkt/ds"


def first_get_imports(s3: S3Server, url: str, cache: Path, *flags: str) -> dict[str, object]:
    argv = ["--log-level", "WARNING", "sample", "--remote", url, "--cache", str(cache),
            "--endpoint-url", s3.endpoint, "--capacity", "1Mi", *flags]
    out = subprocess.run([sys.executable, "-P", "-c", SCRIPT, json.dumps(HEAVY), *argv],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout, out.stderr
    seen: dict[str, object] = json.loads(out.stdout)
    return seen


def test_nothing_heavy_before_the_first_get(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    """Listing on threads (``--list-process 0``): not even the listing process's modules."""
    seen = first_get_imports(s3, bucket, tmp_path / "cache", "--list-process", "0")
    assert str(seen["url"]).startswith("/bkt?") and "list-type=2" in str(seen["url"])  # the listing page
    assert seen["imported"] == []


def test_the_listing_process_brings_only_its_own(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    """With the listing process (the default) the child's own module comes before the first GET
    (the child is forked first thing, so that its start overlaps the first pages), and nothing
    else on the list: the parent's side of it comes after the first LIST is sent."""
    seen = first_get_imports(s3, bucket, tmp_path / "cache")
    assert seen["imported"] == ["epochfs.sidecar.listing.child", "multiprocessing"]


CHILDREN_AT_SAMPLER = """
import glob, json, os, sys
from epochfs.sidecar.sampler import loop

def children():
    pids = []
    for path in glob.glob("/proc/self/task/*/children"):
        with open(path) as f:
            pids += f.read().split()
    return pids

def made(self, *args, **kwargs):
    print(json.dumps({"children": children()}), flush=True)
    os._exit(0)  # the sampler's making is where this test ends

loop.Sampler.__init__ = made
from epochfs.sidecar.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_one_page_listing_ends_its_process_before_the_sampler_is_made(
        s3: S3Server, bucket: str, tmp_path: Path) -> None:
    """The listing process is spawned before the discovery (its start-up overlaps it); when the
    discovery's one page is the whole listing it is not needed, and is ended before the sampler
    is made, so that its start-up does not compete with the sampler's on the way to the first
    object GET."""
    argv = ["--log-level", "WARNING", "sample", "--remote", bucket, "--cache", str(tmp_path / "cache"),
            "--endpoint-url", s3.endpoint, "--capacity", "1Mi"]
    out = subprocess.run([sys.executable, "-P", "-c", CHILDREN_AT_SAMPLER, *argv],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout, out.stderr
    assert json.loads(out.stdout) == {"children": []}
