"""A front for a store's own server that answers the next requests itself, with the answer that
store gives when it throttles or refuses, and passes every other request on untouched.

The servers the conformance suite runs against (moto, fake-gcs-server, Azurite, a plain HTTP
server) cannot be made to throttle, and fake-gcs-server checks no credentials: the front stands
in for those answers, each as the store writes it (:data:`ANSWERS`: status, headers, body), so
every backend's client library parses a real answer off the wire. It is built on the relay of
tests/proxy_helpers.py (``ReverseFront`` passes on every request; this one answers some itself).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from proxy_helpers import _Base, _Handler


@dataclass(frozen=True)
class Answer:
    """An HTTP answer as a store sends it."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


def _s3(status: int, reason: str, code: str, message: str) -> Answer:
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}'
            "</Message><RequestId>0123456789ABCDEF</RequestId></Error>").encode()
    return Answer(status, reason, (("Content-Type", "application/xml"),), body)


def _gcs(status: int, reason: str, why: str, message: str, domain: str = "global") -> Answer:
    error = {"code": status, "message": message,
             "errors": [{"message": message, "domain": domain, "reason": why}]}
    body = json.dumps({"error": error}).encode()
    return Answer(status, reason, (("Content-Type", "application/json; charset=UTF-8"),), body)


def _azure(status: int, reason: str, code: str, message: str) -> Answer:
    body = (f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>{message}\n'
            "RequestId:00000000-0000-0000-0000-000000000000\nTime:2026-01-01T00:00:00.0000000Z"
            "</Message></Error>").encode()
    return Answer(status, reason, (("Content-Type", "application/xml"), ("x-ms-error-code", code)), body)


ANSWERS: dict[str, Answer] = {
    # Throttling, each store in its own words.
    "s3-slowdown": _s3(503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    "gcs-429": _gcs(429, "Too Many Requests", "rateLimitExceeded",
                    "The project exceeded the rate limit for CloudStorage and this operation.",
                    "usageLimits"),
    "gcs-403-rate": _gcs(403, "Forbidden", "rateLimitExceeded", "Rate Limit Exceeded", "usageLimits"),
    "azure-serverbusy": _azure(503, "The server is busy.", "ServerBusy",
                               "Egress is over the account limit."),
    "http-429": Answer(429, "Too Many Requests", (("Retry-After", "1"), ("Content-Type", "text/plain")),
                       b"slow down\n"),
    # Refusals a server of the suite cannot give itself (moto checks credentials only when told,
    # and then answers 500 to every presigned URL, S3Remote's first way to read and list).
    "s3-invalid-key": _s3(403, "Forbidden", "InvalidAccessKeyId",
                          "The AWS Access Key Id you provided does not exist in our records."),
    "s3-access-denied": _s3(403, "Forbidden", "AccessDenied", "Access Denied"),
    "gcs-401": _gcs(401, "Unauthorized", "authError", "Invalid Credentials"),
    "gcs-403": _gcs(403, "Forbidden", "forbidden",
                    "reader@project.iam.gserviceaccount.com does not have storage.objects.get access "
                    "to the Google Cloud Storage object. Permission 'storage.objects.get' denied on "
                    "resource (or it may not exist)."),
    "http-401": Answer(401, "Unauthorized", (("WWW-Authenticate", 'Basic realm="data"'),
                                             ("Content-Type", "text/plain")), b"credentials needed\n"),
    "http-403": Answer(403, "Forbidden", (("Content-Type", "text/plain"),), b"forbidden\n"),
}
"""A store's throttling and refusal answers, by name."""


@dataclass
class AnsweringFront(_Base):
    """Passes every request on to ``upstream`` (``http://host:port``), but those it is told to
    answer itself (:meth:`answer`); ``answered`` counts those and ``passed`` the requests passed
    on (what reached the store)."""

    upstream: str
    answered: int = 0
    passed: int = 0
    _answer: Answer | None = None
    _left: int | None = None
    _only: Callable[[str, str], bool] | None = None
    _count_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        owner = self
        host, _, port = self.upstream.removeprefix("http://").partition("/")[0].partition(":")

        class Handler(_Handler):
            def _front(self) -> None:
                answer = owner._take(self.command, self.path)
                if answer is None:
                    self.pass_on(host, int(port or 80), self.path)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)  # a request body left unread would garble the next request
                self.send_response(answer.status, answer.reason)
                for name, value in answer.headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                try:
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(answer.body)
                except (BrokenPipeError, ConnectionResetError):  # a client that read the status alone
                    self.close_connection = True

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _front

        Handler.owner = owner
        self._serve(Handler, None)

    def answer(self, name: str, count: int | None = None,
               only: Callable[[str, str], bool] | None = None) -> None:
        """Answer the next ``count`` requests (every request until :meth:`pass_all`, when None)
        with :data:`ANSWERS` ``[name]``; ``only(method, path)``: those requests alone (the others
        are passed on and not counted), e.g. the object GETs of a store whose listing is allowed."""
        with self._count_lock:
            self._answer, self._left, self._only = ANSWERS[name], count, only

    def pass_all(self) -> None:
        """Pass every request on from now on."""
        with self._count_lock:
            self._answer = None

    def _take(self, method: str, path: str) -> Answer | None:
        with self._count_lock:
            answer = self._answer
            if answer is None or (self._only is not None and not self._only(method, path)):
                self.passed += 1
                return None
            self.answered += 1
            if self._left is not None:
                self._left -= 1
                if self._left <= 0:
                    self._answer = None
            return answer

    def __enter__(self) -> AnsweringFront:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
