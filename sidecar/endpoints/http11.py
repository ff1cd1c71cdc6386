"""HTTP/1.1 as the sidecar's endpoints speak it: the limits, a request head parsed, a reply written.

Plain functions over bytes, with no socket and no state, so that what a request may look like, and
which status refuses what (400, 414, 417, 431, 501, 505), can be read in one place and tested
without a connection; :mod:`.connections` feeds them what it reads and sends what they write.
"""

from __future__ import annotations

import re
import resource
import time
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import NamedTuple

from epochfs.sidecar.endpoints.report import MAX_REPORT_BYTES

_HEAD_END = re.compile(rb"\r?\n\r?\n")
_LINE = re.compile(rb"\r?\n")
_ABSOLUTE = re.compile(rb"https?://[^/?#]*", re.IGNORECASE)
"""The scheme and authority of an absolute-form request target (``GET http://host:8080/v1/status``),
which a server must accept (RFC 9112, 3.2.2) and a proxy sends: the rest is routed as usual."""
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION = re.compile(rb"HTTP/(\d)\.(\d)")


def _default_max_connections() -> int:
    """1,024, or a quarter of the soft descriptor limit when that is lower (at least 32)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1024
    return max(32, min(1024, soft // 4))


@dataclass(frozen=True)
class Limits:
    """What one listener accepts; the defaults are the sidecar's (docs/sidecar.md)."""

    max_connections: int = field(default_factory=_default_max_connections)
    """Open connections at most; at the cap the oldest idle one is closed for a new one."""
    request_timeout: float = 10.0
    """Seconds from the connection (or the previous response) to a complete request, and to read
    a response; also how long a closing connection waits for the client's FIN."""
    check_timeout: float = 10.0
    """Seconds a check or a metrics collection may run before its waiters get 503."""
    max_head_bytes: int = 8192
    """Request line and headers (414 when the request line alone is longer, else 431)."""
    max_headers: int = 64
    max_body_bytes: int = MAX_REPORT_BYTES
    """A client report's body (413 above)."""
    max_requests_per_connection: int = 100
    report_queue: int = 1024
    """Reports waiting for the report thread; more get 503 with Retry-After."""
    backlog: int = 1024
    """The listen queue (the kernel caps it at net.core.somaxconn)."""


class Reply(NamedTuple):
    code: int
    body: bytes = b""
    ctype: str = "text/plain"
    headers: tuple[tuple[str, str], ...] = ()


def text_reply(code: int, message: str, *headers: tuple[str, str]) -> Reply:
    return Reply(code, message.encode() + b"\n", "text/plain", headers)


class Refusal(NamedTuple):
    """A request refused before it is routed: the metrics' reason and the reply (then close)."""

    reason: str
    reply: Reply


@dataclass(frozen=True)
class Request:
    """A request head that passed the limits: what routing needs of it."""

    method: bytes
    path: str
    query: str
    length: int
    """Content-Length (0 without one)."""
    keep_alive: bool
    expect: list[bytes]
    cache: bytes | None = None
    """The ``X-Epochfs-Cache`` header's raw value: the cache the client reads (:mod:`.cacheid`)."""


def split_head(buf: bytearray, limit: int) -> bytes | Refusal | None:
    """Take a complete head (request line and headers) off the front of ``buf``: None while it is
    incomplete and within ``limit`` bytes, a :class:`Refusal` (414 or 431) once it cannot be."""
    end = _HEAD_END.search(buf, 0, limit + 4)
    if end is None:
        if len(buf) > limit:
            line_ends = buf.find(b"\n", 0, limit) >= 0
            what = "request headers" if line_ends else "request line"
            return Refusal("too_large", text_reply(431 if line_ends else 414, f"{what} over {limit} bytes"))
        return None
    head = bytes(buf[: end.start()])
    del buf[: end.end()]
    return head


def parse_head(head: bytes, max_headers: int) -> Request | Refusal:
    """Parse a request head; no transfer encodings, at most one Content-Length value."""
    lines = _LINE.split(head)
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]):
        return Refusal("bad_request", text_reply(400, "malformed request line"))
    method, target, version = parts
    v = _VERSION.fullmatch(version)
    if v is None:
        return Refusal("bad_request", text_reply(400, "malformed request line"))
    if v.group(1) != b"1":
        return Refusal("bad_request", text_reply(505, "HTTP/1.x only"))
    if len(lines) - 1 > max_headers:
        return Refusal("too_large", text_reply(431, f"more than {max_headers} headers"))
    headers: dict[bytes, list[bytes]] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):  # also obsolete line folding
            return Refusal("bad_request", text_reply(400, "malformed header"))
        headers.setdefault(name.lower(), []).append(value.strip(b" \t"))
    if b"transfer-encoding" in headers:
        return Refusal("bad_request", text_reply(501, "transfer encodings are not supported"))
    lengths = set(headers.get(b"content-length", []))
    length = 0
    if lengths:
        value = lengths.pop()
        if lengths or not value.isdigit():
            return Refusal("bad_request", text_reply(400, "invalid Content-Length"))
        length = int(value) if len(value) <= 18 else 1 << 62
    tokens = {t.strip().lower() for v in headers.get(b"connection", []) for t in v.split(b",")}
    caches = set(headers.get(b"x-epochfs-cache", []))
    if len(caches) > 1:
        return Refusal("bad_request", text_reply(400, "X-Epochfs-Cache names more than one cache"))
    if absolute := _ABSOLUTE.match(target):
        target = target[absolute.end():]
        target = target if target.startswith(b"/") else b"/" + target
    path, _, query = target.decode("latin-1").partition("?")
    return Request(method=method, path=path, query=query, length=length,
                   keep_alive=v.group(2) != b"0" and b"close" not in tokens,
                   expect=headers.get(b"expect", []), cache=caches.pop() if caches else None)


class HttpDate:
    """The Date header's value, formatted once a second."""

    def __init__(self) -> None:
        self._date = (0, "")

    def __call__(self) -> str:
        now = int(time.time())
        if self._date[0] != now:
            self._date = (now, formatdate(now, usegmt=True))
        return self._date[1]


def encode_response(reply: Reply, *, keep_alive: bool, date: str) -> bytes:
    """The response's bytes: status line, headers (no body length for 204), body."""
    try:
        phrase = HTTPStatus(reply.code).phrase
    except ValueError:
        phrase = ""
    lines = [f"HTTP/1.1 {reply.code} {phrase}", "Server: epochfs", f"Date: {date}"]
    if reply.code != 204:
        lines += [f"Content-Type: {reply.ctype}", f"Content-Length: {len(reply.body)}"]
    if not keep_alive:
        lines.append("Connection: close")
    lines += [f"{k}: {v}" for k, v in reply.headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + reply.body
