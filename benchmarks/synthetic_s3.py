"""A synthetic S3 endpoint: millions of procedural keys in no memory, for scale benchmarks and tests.

moto stores every object it is given, so a bucket of 10M keys would cost hours of uploads and
gigabytes of memory; this server computes everything from the key's position instead. It speaks
the part of the S3 REST protocol that epochfs's remote code uses (:mod:`epochfs.sidecar.remote_s3`
through botocore, and the presigned GETs of :mod:`epochfs.sidecar.httpget`):

- ``HEAD /bucket`` (the region probe), ``GET /bucket?location``;
- ``GET /bucket?list-type=2`` (ListObjectsV2) with ``prefix``, ``delimiter`` (CommonPrefixes),
  ``start-after``, ``continuation-token`` and ``max-keys`` (at most 1,000, as S3), each page
  answered after ``list_latency`` seconds (20 ms by default, about what S3 takes per page);
- ``HEAD`` and ``GET /bucket/key``, with ``Range: bytes=a-b`` (206, Content-Range);
- ``GET /_stats``: the request counters as JSON (``POST /_stats/reset`` zeroes them);
- throttling on demand: the listing requests numbered in ``server.throttle_pages`` are answered
  ``503 SlowDown`` (object GETs are throttled by tests/faultproxy.py in front).

Path-style and virtual-hosted requests are both accepted; signatures are not checked.

**Keys.** ``count`` keys, flat (``{prefix}sample-00000042.bin``) or in ``classes`` class folders
(``{prefix}class-0007/sample-00012345.bin``, sample ``i`` in class ``i % classes``, as datasets
keep one class per folder so that the first pages of a listing hold one class). The key at each
position of the sorted listing is a formula, so a page is found by bisection over positions.

**Bodies.** ``size`` bytes: a fixed random filler followed by 16 bytes of ``blake2b(key)``, so every
object differs, and its ETag (the md5 of the body, as S3's for a single-part upload) costs an md5
state copy and one 16-byte update, not an md5 of the whole body: a listing page of 1,000 keys costs
the server about as much as the XML. ``python -m epochfs.benchmarks.synthetic_s3 --help`` runs it
as a process; :class:`SyntheticS3` runs it on threads of the caller (tests).
"""

from __future__ import annotations

import argparse
import base64
import bisect
import contextlib
import hashlib
import json
import random
import re
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit
from xml.sax.saxutils import escape

MAX_KEYS = 1000
"""S3 answers at most 1,000 keys (and common prefixes) per ListObjectsV2 page."""
LAST_MODIFIED = "2024-01-01T00:00:00.000Z"
_TAIL = 16  # bytes of blake2b(key) at the end of each body
_TOP = "\U0010ffff"  # above every character of a key: cp + _TOP is past every key under cp


@dataclass(frozen=True)
class Dataset:
    """The procedural bucket: ``count`` keys of ``size`` bytes under ``prefix``."""

    count: int
    size: int = 16 * 1024
    classes: int = 0
    """Class folders (0: flat keys)."""
    prefix: str = ""
    """Before every key, e.g. ``train/`` (a folder) or empty."""
    bucket: str = "bench"
    _filler: bytes = field(default=b"", repr=False, compare=False)
    _md5: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.count < 0 or self.size < 0 or self.classes < 0:
            raise ValueError("count, size and classes must not be negative")
        filler = random.Random(1234).randbytes(max(0, self.size - _TAIL))
        object.__setattr__(self, "_filler", filler)
        object.__setattr__(self, "_md5", hashlib.md5(filler))

    # ------------------------------------------------------------------ keys
    def key(self, pos: int) -> str:
        """The key at position ``pos`` (0-based) of the sorted listing."""
        if not self.classes:
            return f"{self.prefix}sample-{pos:08d}.bin"
        per, extra = divmod(self.count, self.classes)
        # Classes below ``extra`` hold per + 1 samples; class c starts at c * per + min(c, extra).
        big = extra * (per + 1)
        if pos < big:
            cls, m = divmod(pos, per + 1)
        else:
            cls, m = divmod(pos - big, per) if per else (extra, 0)
            cls += extra
        return f"{self.prefix}class-{cls:04d}/sample-{m * self.classes + cls:08d}.bin"

    def keys(self) -> _Keys:
        """The sorted keys as a sequence (computed on access), for bisection."""
        return _Keys(self)

    def position(self, key: str) -> int | None:
        """The position of ``key``, or None when the bucket has no such key."""
        keys = self.keys()
        pos = bisect.bisect_left(keys, key)
        return pos if pos < self.count and keys[pos] == key else None

    # ------------------------------------------------------------------ bodies
    def body(self, key: str) -> bytes:
        tail = hashlib.blake2b(key.encode(), digest_size=_TAIL).digest()
        return (self._filler + tail)[-self.size:] if self.size else b""

    def etag(self, key: str) -> str:
        """The md5 of :meth:`body` (from the filler's precomputed md5 state)."""
        if self.size < _TAIL:
            return hashlib.md5(self.body(key)).hexdigest()
        md5 = self._md5.copy()
        md5.update(hashlib.blake2b(key.encode(), digest_size=_TAIL).digest())
        return str(md5.hexdigest())


class _Keys(Sequence[str]):
    """The dataset's sorted keys as a read-only sequence (``bisect`` works on it)."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return self.dataset.count

    def __getitem__(self, pos: Any) -> Any:
        if isinstance(pos, slice):
            return [self.dataset.key(i) for i in range(*pos.indices(len(self)))]
        if pos < 0:
            pos += len(self)
        if not 0 <= pos < len(self):
            raise IndexError(pos)
        return self.dataset.key(pos)


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


# ---------------------------------------------------------------------------------- listing
def list_page(data: Dataset, *, prefix: str = "", delimiter: str = "", resume: str = "",
              max_keys: int = MAX_KEYS) -> tuple[list[str], list[str], str | None]:
    """One ListObjectsV2 page: (keys, common prefixes, where the next page resumes or None).

    ``resume`` is the smallest string the page may list (inclusive); keys and common prefixes
    count together against ``max_keys``, as in S3.
    """
    keys_seq = data.keys()
    keys: list[str] = []
    prefixes: list[str] = []
    pos = bisect.bisect_left(keys_seq, max(prefix, resume))
    last = ""
    while pos < data.count and len(keys) + len(prefixes) < max_keys:
        key = keys_seq[pos]
        if not key.startswith(prefix):
            return keys, prefixes, None
        cut = key.find(delimiter, len(prefix)) if delimiter else -1
        if cut >= 0:
            common = key[:cut + len(delimiter)]
            prefixes.append(common)
            last = common + _TOP
            pos = bisect.bisect_left(keys_seq, last, lo=pos)
        else:
            keys.append(key)
            last = key + "\x00"
            pos += 1
    more = pos < data.count and keys_seq[pos].startswith(prefix)
    return keys, prefixes, (last if more else None)


def _token(resume: str) -> str:
    return base64.urlsafe_b64encode(resume.encode("utf-8", "surrogatepass")).decode()


def _untoken(token: str) -> str:
    return base64.urlsafe_b64decode(token.encode()).decode("utf-8", "surrogatepass")


def _list_xml(data: Dataset, query: dict[str, str]) -> bytes:
    prefix = query.get("prefix", "")
    delimiter = query.get("delimiter", "")
    start_after = query.get("start-after", "")
    token = query.get("continuation-token")
    max_keys = max(0, min(MAX_KEYS, int(query.get("max-keys", MAX_KEYS))))
    resume = _untoken(token) if token else (start_after + "\x00" if start_after else "")
    keys, prefixes, nxt = list_page(data, prefix=prefix, delimiter=delimiter, resume=resume,
                                    max_keys=max_keys)
    url = query.get("encoding-type") == "url"

    def enc(s: str) -> str:
        return escape(quote(s, safe="/") if url else s)

    out = ['<?xml version="1.0" encoding="UTF-8"?>\n'
           '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
           f"<Name>{escape(data.bucket)}</Name><Prefix>{enc(prefix)}</Prefix>",
           f"<KeyCount>{len(keys) + len(prefixes)}</KeyCount><MaxKeys>{max_keys}</MaxKeys>"]
    if delimiter:
        out.append(f"<Delimiter>{enc(delimiter)}</Delimiter>")
    if url:
        out.append("<EncodingType>url</EncodingType>")
    if start_after:
        out.append(f"<StartAfter>{enc(start_after)}</StartAfter>")
    if token:
        out.append(f"<ContinuationToken>{escape(token)}</ContinuationToken>")
    out.append(f"<IsTruncated>{'true' if nxt is not None else 'false'}</IsTruncated>")
    if nxt is not None:
        out.append(f"<NextContinuationToken>{_token(nxt)}</NextContinuationToken>")
    size = data.size
    for key in keys:
        out.append(f"<Contents><Key>{enc(key)}</Key><LastModified>{LAST_MODIFIED}</LastModified>"
                   f"<ETag>&quot;{data.etag(key)}&quot;</ETag><Size>{size}</Size>"
                   "<StorageClass>STANDARD</StorageClass></Contents>")
    for common in prefixes:
        out.append(f"<CommonPrefixes><Prefix>{enc(common)}</Prefix></CommonPrefixes>")
    out.append("</ListBucketResult>")
    return "".join(out).encode()


def _error_xml(code: str, message: str, resource: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>{escape(message)}</Message><Resource>{escape(resource)}</Resource>"
            "<RequestId>synthetic</RequestId></Error>").encode()


_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


def byte_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """``(first, last)`` of a ``Range`` header for an object of ``size`` bytes; None for no (or an
    ignorable) header; ``"unsatisfiable"`` for a range past the end (416)."""
    if not header:
        return None
    m = _RANGE.match(header.strip())
    if m is None or not (m.group(1) or m.group(2)):
        return None  # S3 ignores a Range it cannot read
    if not m.group(1):  # the last n bytes
        n = int(m.group(2))
        return (max(0, size - n), size - 1) if n and size else "unsatisfiable"
    first = int(m.group(1))
    last = int(m.group(2)) if m.group(2) else size - 1
    if first >= size or last < first:
        return "unsatisfiable"
    return first, min(last, size - 1)


# ---------------------------------------------------------------------------------- server
class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

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
        self._send(status, b"" if head else _error_xml(code, message, self.path),
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
            if self.server.take_throttled_list():
                self.server.stats.add(list_pages=1)
                self._error(503, "SlowDown", "Please reduce your request rate.")
                return
            try:
                body = _list_xml(self.server.data, query)
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

    def __init__(self, address: tuple[str, int], data: Dataset, list_latency: float,
                 get_latency: float) -> None:
        super().__init__(address, _Handler)
        self.data = data
        self.list_latency = list_latency
        self.get_latency = get_latency
        self.stats = Stats()
        self.throttle_pages: set[int] = set()
        """Listing requests (numbered from 1 in arrival order) answered 503 SlowDown, as S3
        throttles; each still counts in ``list_pages``."""
        self._pages_seen = 0
        self._throttle_lock = threading.Lock()

    def take_throttled_list(self) -> bool:
        with self._throttle_lock:
            self._pages_seen += 1
            return self._pages_seen in self.throttle_pages


class SyntheticS3:
    """The endpoint on threads of this process, for a ``with`` block (tests)."""

    def __init__(self, data: Dataset, *, host: str = "127.0.0.1", port: int = 0, list_latency: float = 0.02,
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
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    p.add_argument("--list-latency", type=float, default=0.02, help="seconds per listing page (0.02)")
    p.add_argument("--get-latency", type=float, default=0.0, help="seconds before each object answer (0)")
    ns = p.parse_args(argv)
    data = Dataset(ns.keys, ns.size, ns.classes, ns.prefix, ns.bucket)
    with SyntheticS3(data, host=ns.host, port=ns.port, list_latency=ns.list_latency,
                     get_latency=ns.get_latency) as s3:
        print(f"synthetic S3 at {s3.endpoint}: {s3.url} ({data.count} keys of {data.size} B)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):  # SIGINT; SIGTERM ends it at once
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
