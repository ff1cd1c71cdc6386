"""A folder whose listing the remote refuses for good is passed over; the rest is sampled.

A bucket policy that denies ``ListObjectsV2`` under one prefix: every page of that folder's span
is answered 403 AccessDenied. Raised, the refusal ended the listing run and the run resumed with
the span still unreached, for ever: the pace held every epoch at the skew's floor (3 samples) and
the cache at 3 samples of 10 GiB while 99% of the keys were listed (sidecar/listing/refused.py).

The real ``epochfs sample`` over moto, behind a small real HTTP proxy that answers S3's
AccessDenied error document to a listing of one prefix and forwards everything else.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from common import S3Server, serving_http, wait_until
from sampler_helpers import index_rows, running_sampler, s3_env

from epochfs.sidecar.listing.refused import refusal
from epochfs.sidecar.remote import RemoteError

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
ENV = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
FOLDERS = 150
KEYS = 7
"""1,050 keys: more than a page (1,000), so the listing is cut into spans by folder (a bucket
that fits in one page is listed by that page alone, and no folder's listing is asked)."""
DENIED = "f075/"
DENIED_XML = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
              b"<Message>Access Denied</Message><RequestId>r</RequestId></Error>")


def _handler(upstream: str, denied: set[str]) -> type[http.server.BaseHTTPRequestHandler]:
    """Forwards every request to ``upstream``, but a ListObjectsV2 under a prefix of ``denied``
    (read at each request): 403 AccessDenied."""

    class Proxy(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
            self.send_response(status)
            for k, v in headers:
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _forward(self) -> None:
            query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
            if "list-type" in query and query.get("prefix", [""])[0].startswith(tuple(denied)):
                self._send(403, [("Content-Type", "application/xml")], DENIED_XML)
                return
            size = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(size) if size else None
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            req = urllib.request.Request(upstream + self.path, data=body, method=self.command,
                                         headers=headers)
            req.add_header("Host", self.headers.get("Host") or "")
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    self._send(r.status, list(r.headers.items()), r.read())
            except urllib.error.HTTPError as e:
                self._send(e.code, list(e.headers.items()), e.read())

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

    return Proxy


def _put(s3: S3Server, bucket: str, objects: dict[str, bytes]) -> None:
    """``put_objects``, eight uploads at a time (the client's pool holds 10 connections)."""
    client = s3.client()
    client.create_bucket(Bucket=bucket)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda kv: client.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), objects.items()))


def _denying_proxy(upstream: str, denied: set[str]) -> contextlib.AbstractContextManager[str]:
    """The proxy's endpoint, on a port the system picks, for the duration of a block."""
    return serving_http(_handler(upstream, denied))


def _samples(cache: Path) -> int:
    try:
        return int(index_rows(cache, "SELECT count(*) FROM samples")[0][0])
    except Exception:  # the index not created yet
        return 0


@pytest.mark.long
def test_a_folder_whose_listing_is_refused_is_passed_over(s3: S3Server, tmp_path: Path) -> None:
    _put(s3, "bkt", {f"f{f:03d}/{k}.bin": bytes([f % 256]) * 64
                            for f in range(FOLDERS) for k in range(KEYS)})
    others = (FOLDERS - 1) * KEYS
    cache = tmp_path / "cache"
    denied = {DENIED}
    with _denying_proxy(s3.endpoint, denied) as endpoint, \
            running_sampler(cache, "s3://bkt", "--endpoint-url", endpoint, "--capacity", "10Mi",
                            env=s3_env(endpoint)) as sp:
        # A quarter: far above the skew's floor (3 samples) the refusal held the cache at.
        wait_until(lambda: _samples(cache) >= others // 4 or sp.proc.poll() is not None, timeout=60,
                   what=f"a quarter of the {others} keys outside {DENIED} sampled")
        assert sp.proc.poll() is None, sp.log_text()[-3000:]
        wait_until(lambda: "epochfs.catalog INFO catalog: " in sp.log_text(), timeout=60,
                   what="the listing's end")
        log = sp.log_text()
        refused = [line for line in log.splitlines() if f"listing of '{DENIED}' refused" in line]
        assert len(refused) == 1 and "WARNING" in refused[0] and "Denied" in refused[0], log[-3000:]
        assert "listing failed: " not in log, "the refusal is passed over, not a failed run"
        assert _held(cache) == 0, "the refused folder's keys are not cataloged"
        denied.clear()  # the policy lifted: a relist lists the folder
        relist = subprocess.run([EPOCHFS, "relist", "--cache", str(cache)], env=ENV, capture_output=True,
                                text=True, timeout=60)
        assert relist.returncode == 0, relist.stderr
        wait_until(lambda: _held(cache) == KEYS, timeout=60, what=f"{DENIED} cataloged by the relist")
        # Refused again in a relist: the run fails and is tried again, and the catalog keeps the
        # folder's keys (the relist's end would drop the rows it did not see).
        failed = sp.log_text().count("listing failed: ")
        denied.add(DENIED)
        relist = subprocess.run([EPOCHFS, "relist", "--cache", str(cache)], env=ENV, capture_output=True,
                                text=True, timeout=60)
        assert relist.returncode == 0, relist.stderr
        wait_until(lambda: sp.log_text().count("listing failed: ") > failed, timeout=60,
                   what="the relist's refusal")
        assert _held(cache) == KEYS and sp.log_text().count(f"listing of '{DENIED}' refused") == 1


def _held(cache: Path) -> int:
    """Keys of the refused folder in the catalog."""
    return int(index_rows(cache, "SELECT count(*) FROM catalog WHERE key LIKE ?",
                          (f"{DENIED}%",))[0][0])


@pytest.mark.parametrize(("status", "code", "for_good"), [
    (403, "AccessDenied", True), (404, "NoSuchBucket", True), (503, "SlowDown", False),
    (500, "InternalError", False), (503, "ServiceUnavailable", False), (429, "TooManyRequests", False)])
def test_only_a_refusal_is_for_good(status: int, code: str, for_good: bool) -> None:
    """A listing's page failure as the S3 remote raises it (botocore's error under a RemoteError):
    denied and missing pass a span over; throttling and the store's 5xx are tried again."""
    answer = {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
    try:
        try:
            raise ClientError(answer, "ListObjectsV2")
        except ClientError as e:
            raise RemoteError(f"cannot list s3://bkt: {e}") from e
    except RemoteError as e:
        assert (refusal(e) is not None) is for_good
