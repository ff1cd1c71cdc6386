"""Servers for the tests of credentials that stop working on ``gs://`` and ``az://``: a front for a
store's own server that refuses requests by a rule (the bearer token a request carries, the object
it names), and an OAuth token endpoint whose refresh tokens can be revoked.

fake-gcs-server checks no credentials and Azurite cannot be made to answer as Azure does to a
revoked key (``AuthenticationFailed``): :class:`RefusingFront` answers those itself, each as the
store writes it, so the client library parses a real answer off the wire. :class:`TokenEndpoint`
is where google-auth renews a service account's token (its key file's ``token_uri``): it hands out
an access token per key, and answers ``invalid_grant`` (Google's answer to a deleted key) to a
revoked one.
"""

from __future__ import annotations

import base64
import functools
import json
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from proxy_helpers import _Base, _Handler
from remote.answering_front import ANSWERS, Answer

Rule = Callable[[str, str, str], "Answer | None"]
"""What the front answers a request itself: ``(method, path, bearer token or "")`` -> the answer,
or None to pass it on."""


def azure_answer(status: int, reason: str, code: str, message: str) -> Answer:
    """An Azure Storage error answer: its XML error document and ``x-ms-error-code``."""
    body = (f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>{message}\n'
            "RequestId:00000000-0000-0000-0000-000000000000\nTime:2026-01-01T00:00:00.0000000Z"
            "</Message></Error>").encode()
    return Answer(status, reason, (("Content-Type", "application/xml"), ("x-ms-error-code", code)), body)


AZURE_REVOKED_KEY = azure_answer(
    403, "Server failed to authenticate the request.", "AuthenticationFailed",
    "Server failed to authenticate the request. Make sure the value of Authorization header is "
    "formed correctly including the signature.")
"""Azure's answer to a request signed with a key that is no longer the account's (rotated)."""
AZURE_EXPIRED_SAS = azure_answer(
    403, "Server failed to authenticate the request.", "AuthenticationFailed",
    "Server failed to authenticate the request. Make sure the value of Authorization header is "
    "formed correctly including the signature.\nAuthenticationErrorDetail:Signed expiry time "
    "[Mon, 01 Jan 2026 00:00:00 GMT] must be after signed start time [Tue, 02 Jan 2026 00:00:00 GMT]")
"""Azure's answer to a SAS past its expiry."""
AZURE_EXPIRED_TOKEN = azure_answer(
    401, "Server failed to authenticate the request.", "InvalidAuthenticationInfo",
    "Server failed to authenticate the request. Please refer to the information in the "
    "www-authenticate header.\nAuthenticationErrorDetail:Lifetime validation failed. The token "
    "is expired.")
"""Azure's answer to an expired or revoked bearer token (workload or managed identity)."""
AZURE_NO_PERMISSION = azure_answer(
    403, "This request is not authorized to perform this operation using this permission.",
    "AuthorizationPermissionMismatch",
    "This request is not authorized to perform this operation using this permission.")
"""Azure's answer to known credentials without the right to one blob (a role scoped elsewhere)."""
GCS_INVALID_CREDENTIALS = ANSWERS["gcs-401"]
"""GCS's answer to a revoked or expired access token."""
GCS_NO_OBJECT_ACCESS = ANSWERS["gcs-403"]
"""GCS's answer to known credentials without ``storage.objects.get`` on one object."""


def pass_all(_method: str, _path: str, _token: str) -> Answer | None:
    """The rule that answers nothing itself: every request reaches the store."""
    return None


@dataclass
class RefusingFront(_Base):
    """Passes every request on to ``upstream`` (``http://host:port``) but those :attr:`rule`
    answers; :attr:`answers` counts ``(bearer token or "", status)`` of every request, answered
    here or passed on."""

    upstream: str
    rule: Rule = field(default_factory=lambda: pass_all)
    answers: Counter[tuple[str, int]] = field(default_factory=Counter)
    _count_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        owner = self
        host, _, port = self.upstream.removeprefix("http://").partition("/")[0].partition(":")

        class Handler(_Handler):
            def _front(self) -> None:
                auth = self.headers.get("Authorization", "")
                token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else ""
                answer = owner.rule(self.command, self.path, token)
                if answer is None:
                    self.pass_on(host, int(port or 80), self.path,
                                 record=lambda _port: owner.count(token, 0))
                    return
                owner.count(token, answer.status)
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)  # a request body left unread would garble the next request
                self.send_response(answer.status, answer.reason)
                for name, value in answer.headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(answer.body)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _front

        Handler.owner = owner
        self._serve(Handler, None)

    def count(self, token: str, status: int) -> None:
        """Count one request of ``token`` answered ``status`` (0: passed on to the store)."""
        with self._count_lock:
            self.answers[(token, status)] += 1

    def seen(self, token: str, status: int) -> int:
        """Requests of ``token`` answered ``status`` so far (0: passed on to the store)."""
        with self._count_lock:
            return self.answers[(token, status)]

    def __enter__(self) -> RefusingFront:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TokenEndpoint(_Base):
    """An OAuth 2.0 token endpoint for google-auth's service-account credentials (the JWT grant
    their key signs): the key ``K`` (the ``kid`` of the assertion's header, the credentials file's
    ``private_key_id``) is answered the access token ``tok-K``, unless revoked (:meth:`revoke`: the
    key deleted from the service account), which is answered ``400 invalid_grant`` as Google
    answers it. :attr:`grants` counts each key's requests. The assertion's signature is not
    checked: the key's id says which key signed it."""

    def __init__(self) -> None:
        self.revoked: set[str] = set()
        self.grants: Counter[str] = Counter()
        owner = self

        class Handler(_Handler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                key = signing_key((form.get("assertion") or [""])[0])
                with owner.lock:
                    owner.grants[key] += 1
                    revoked = key in owner.revoked
                answer = ({"error": "invalid_grant", "error_description": "Invalid JWT Signature."} if revoked
                          else {"access_token": f"tok-{key}", "expires_in": 3600, "token_type": "Bearer"})
                status = 400 if revoked else 200
                body = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        Handler.owner = owner
        self._serve(Handler, None)

    def revoke(self, key: str) -> None:
        with self.lock:
            self.revoked.add(key)

    def __enter__(self) -> TokenEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def signing_key(assertion: str) -> str:
    """The key id (``kid``) of a JWT's header, "" when it has none."""
    header = assertion.split(".", 1)[0]
    try:
        return str(json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4))).get("kid", ""))
    except ValueError:
        return ""


@functools.cache
def private_key() -> str:
    """An RSA private key (PEM) for the service accounts of the tests: made once a process."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def service_account(key_id: str, token_uri: str) -> str:
    """A service account's key file (``gcloud iam service-accounts keys create``'s shape) whose
    key is ``key_id`` and whose tokens come from ``token_uri``."""
    return json.dumps({"type": "service_account", "project_id": "epochfs-test", "private_key_id": key_id,
                       "private_key": private_key(), "client_id": "1",
                       "client_email": "reader@epochfs-test.iam.gserviceaccount.com", "token_uri": token_uri})


__all__ = ["AZURE_EXPIRED_SAS", "AZURE_EXPIRED_TOKEN", "AZURE_NO_PERMISSION", "AZURE_REVOKED_KEY",
           "GCS_INVALID_CREDENTIALS", "GCS_NO_OBJECT_ACCESS", "RefusingFront", "Rule", "TokenEndpoint",
           "pass_all", "service_account", "signing_key"]
