"""A synthetic S3 endpoint: millions of procedural keys in no memory, for scale benchmarks and tests.

moto stores every object it is given, so a bucket of 10M keys would cost hours of uploads and
gigabytes of memory; this server computes everything from the key's position instead. It speaks
the part of the S3 REST protocol that epochfs's remote code uses (:mod:`epochfs.sidecar.remote.s3`
through botocore, and the presigned GETs of :mod:`epochfs.sidecar.remote.httpget`):

- ``HEAD /bucket`` (the region probe), ``GET /bucket?location``;
- ``GET /bucket?list-type=2`` (ListObjectsV2) with ``prefix``, ``delimiter`` (CommonPrefixes),
  ``start-after``, ``continuation-token`` and ``max-keys`` (at most 1,000, as S3), each page
  answered after ``list_latency`` seconds (20 ms by default, about what S3 takes per page);
- ``HEAD`` and ``GET /bucket/key``, with ``Range: bytes=a-b`` (206, Content-Range);
- ``GET /_stats``: the request counters as JSON (``POST /_stats/reset`` zeroes them);
- throttling on demand: the listing requests numbered in ``server.throttle_pages`` are answered
  ``503 SlowDown`` (object GETs are throttled by tests/faultproxy.py in front); every listing
  request's query is kept in ``server.list_log`` (where a listing resumed after a throttled page).

Path-style and virtual-hosted requests are both accepted; signatures are not checked.

The bucket (keys and bodies computed from a position, class folders, md5 ETags) is
``_synthetic_data.Dataset``, or a shaped key space of ``_keyspaces`` (``--keyspace``: skewed,
nested, many or mixed folders, flat); the listing pages, their XML and ranges are ``_synthetic_xml`` (both
re-exported here; the leading underscore keeps them out of ``epochfs bench``'s list). This module
is the HTTP server and its counters. ``python -m epochfs.benchmarks.synthetic_s3 --help`` runs it
as a process; :class:`SyntheticS3` runs it on threads of the caller (tests).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from epochfs.benchmarks._keyspaces import SHAPES, KeySpace, parse_spec
from epochfs.benchmarks._synthetic_data import Bucket, Dataset
from epochfs.benchmarks._synthetic_xml import (
    MAX_KEYS,
    byte_range,
    error_xml,
    list_page,
    list_xml,
    resume_point,
)


@dataclass
class Stats:
    """Request counters (thread-safe through :attr:`lock`)."""

    list_pages: int = 0
    gets: int = 0
    range_gets: int = 0
    heads: int = 0
    bucket_heads: int = 0
    errors: int = 0
    bytes_sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return {k: v for k, v in vars(self).items() if k != "lock"}

    def reset(self) -> None:
        with self.lock:
            for k in self.snapshot_names():
                setattr(self, k, 0)

    @staticmethod
    def snapshot_names() -> list[str]:
        return ["list_pages", "gets", "range_gets", "heads", "bucket_heads", "errors", "bytes_sent"]



# ---------------------------------------------------------------------------------- server
class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    """The headers and the body go out in two writes: with Nagle's algorithm the body waited for
    the client's delayed ACK of the headers, 40 ms an answer of under a segment (a 100-key list
    page took 65 ms at a list latency of 20 ms, a 1,000-key one 32 ms; S3 has no such stall)."""

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None, *,
              head: bool = False, length: int | None = None, counted: bool = True) -> None:
        self.send_response(status)
        self.send_header("x-amz-request-id", "synthetic")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)
            if counted:  # S3's answers only, not the counters' own
                self.server.stats.add(bytes_sent=len(body))

    def _error(self, status: int, code: str, message: str, *, head: bool = False) -> None:
        self.server.stats.add(errors=1)
        self._send(status, b"" if head else error_xml(code, message, self.path),
                   {"Content-Type": "application/xml"}, head=head)

    def _target(self) -> tuple[str, str, dict[str, str]]:
        """(bucket, key, query) of a path-style or virtual-hosted request."""
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        path = unquote(parts.path)
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        bucket = self.server.data.bucket
        if host.startswith(bucket + "."):
            return bucket, path.lstrip("/"), query
        name, _, key = path.lstrip("/").partition("/")
        return name, key, query

    def _serve(self, head: bool) -> None:
        if self.path.startswith("/_stats"):
            self._send(200, json.dumps(self.server.stats.snapshot()).encode(),
                       {"Content-Type": "application/json"}, head=head, counted=False)
            return
        data = self.server.data
        bucket, key, query = self._target()
        if bucket != data.bucket:
            self._error(404, "NoSuchBucket", "The specified bucket does not exist", head=head)
            return
        if not key:
            self._bucket(head, query)
            return
        if data.position(key) is None:
            self._error(404, "NoSuchKey", "The specified key does not exist.", head=head)
            return
        headers = {"ETag": f'"{data.etag(key)}"', "Last-Modified": formatdate(1704067200, usegmt=True),
                   "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if self.server.get_latency:
            time.sleep(self.server.get_latency)
        if head:
            self.server.stats.add(heads=1)
            self._send(200, headers=headers, head=True, length=data.size)
            return
        body = data.body(key)
        wanted = byte_range(self.headers.get("Range"), len(body))
        if wanted == "unsatisfiable":
            self._error(416, "InvalidRange", "The requested range is not satisfiable")
            return
        if isinstance(wanted, tuple):
            first, last = wanted
            headers["Content-Range"] = f"bytes {first}-{last}/{len(body)}"
            self.server.stats.add(gets=1, range_gets=1)
            self._send(206, body[first:last + 1], headers)
            return
        self.server.stats.add(gets=1)
        self._send(200, body, headers)

    def _bucket(self, head: bool, query: dict[str, str]) -> None:
        region = {"x-amz-bucket-region": "us-east-1"}
        if head:
            self.server.stats.add(bucket_heads=1)
            self._send(200, headers=region, head=True)
        elif "location" in query:
            self._send(200, b'<?xml version="1.0" encoding="UTF-8"?><LocationConstraint '
                            b'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"/>',
                       {"Content-Type": "application/xml", **region})
        elif query.get("list-type") == "2":
            if self.server.list_latency:
                time.sleep(self.server.list_latency)
            if self.server.take_throttled_list(query):
                self.server.stats.add(list_pages=1)
                self._error(503, "SlowDown", "Please reduce your request rate.")
                return
            try:
                body = list_xml(self.server.data, query)
            except ValueError:  # a bad max-keys or continuation token
                self._error(400, "InvalidArgument", "Invalid argument")
                return
            self.server.stats.add(list_pages=1)
            self._send(200, body, {"Content-Type": "application/xml", **region})
        else:
            self._error(501, "NotImplemented", "only ListObjectsV2 (list-type=2) is served here")

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_POST(self) -> None:
        if self.path.startswith("/_stats/reset"):
            self.server.stats.reset()
            self._send(204)
        else:
            self._error(405, "MethodNotAllowed", "read-only endpoint")

    do_PUT = do_DELETE = do_POST


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], data: Bucket, list_latency: float,
                 get_latency: float) -> None:
        super().__init__(address, _Handler)
        self.data = data
        self.list_latency = list_latency
        self.get_latency = get_latency
        self.stats = Stats()
        self.throttle_pages: set[int] = set()
        """Listing requests (numbered from 1 in arrival order) answered 503 SlowDown, as S3
        throttles; each still counts in ``list_pages``."""
        self.list_log: list[tuple[dict[str, str], bool]] = []
        """Every listing request in arrival order: its query and whether it was throttled (what
        a test reads to see where a listing resumed)."""
        self._throttle_lock = threading.Lock()

    def take_throttled_list(self, query: dict[str, str]) -> bool:
        with self._throttle_lock:
            throttled = len(self.list_log) + 1 in self.throttle_pages
            self.list_log.append((query, throttled))
            return throttled


class SyntheticS3:
    """The endpoint on threads of this process, for a ``with`` block (tests)."""

    def __init__(self, data: Bucket, *, host: str = "127.0.0.1", port: int = 0, list_latency: float = 0.02,
                 get_latency: float = 0.0) -> None:
        self.data = data
        self.server = _Server((host, port), data, list_latency, get_latency)
        self.endpoint = f"http://{host}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="synthetic-s3", daemon=True)

    @property
    def stats(self) -> Stats:
        return self.server.stats

    @property
    def url(self) -> str:
        """The dataset's ``s3://`` URL (its prefix, less a trailing slash, included)."""
        return f"s3://{self.data.bucket}/{self.data.prefix.rstrip('/')}".rstrip("/")

    def __enter__(self) -> SyntheticS3:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m epochfs.benchmarks.synthetic_s3", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=10_000, help="number of objects (default 10000)")
    p.add_argument("--size", type=int, default=16 * 1024, help="bytes per object (default 16384)")
    p.add_argument("--classes", type=int, default=0, help="class folders (default 0: flat keys)")
    p.add_argument("--prefix", default="", help="before every key, e.g. train/")
    p.add_argument("--bucket", default="bench")
    p.add_argument("--keyspace", metavar="SPEC",
                   help=f"a shaped key space instead of --keys/--classes/--prefix/--size, e.g. "
                   f"skewed:keys=100000,folders=100,seed=0 (shapes: {', '.join(SHAPES)}; "
                   "benchmarks/_keyspaces.py)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    p.add_argument("--list-latency", type=float, default=0.02, help="seconds per listing page (0.02)")
    p.add_argument("--get-latency", type=float, default=0.0, help="seconds before each object answer (0)")
    ns = p.parse_args(argv)
    data: Bucket
    if ns.keyspace:
        try:
            data = KeySpace(parse_spec(ns.keyspace), bucket=ns.bucket)
        except ValueError as e:
            p.error(f"--keyspace: {e}")
    else:
        data = Dataset(ns.keys, ns.size, ns.classes, ns.prefix, ns.bucket)
    with SyntheticS3(data, host=ns.host, port=ns.port, list_latency=ns.list_latency,
                     get_latency=ns.get_latency) as s3:
        print(f"synthetic S3 at {s3.endpoint}: {s3.url} ({data.count} keys of {data.size} B)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):  # SIGINT; SIGTERM ends it at once
            threading.Event().wait()
    return 0


__all__ = ["MAX_KEYS", "Dataset", "Stats", "SyntheticS3", "byte_range", "list_page", "main", "resume_point"]


if __name__ == "__main__":
    sys.exit(main())

