"""Credentials that stop working mid-run are the remote's as a whole: the keys are kept, and the
new credentials are read and used.

The chart's files mode mounts the credentials Secret and points ``AWS_SHARED_CREDENTIALS_FILE`` at
it; the kubelet rewrites the file in place when the Secret is rotated, and the store refuses the old
key from then on (S3's ``403 InvalidAccessKeyId``). Typed as a denial of one object, that refusal
had every key not yet fetched skipped for good within seconds, and botocore, which reads a shared
credentials file only as it makes a client, never read the new key (a reviewer's sidecar: 252 of
300 keys skipped, 0 requests signed with the new key).

Real parts: ``epochfs sample`` against moto behind a small proxy that refuses, as S3 does for a
deleted key, every request signed with a revoked access key (header or presigned query), and
counts what each key was answered.
"""

from __future__ import annotations

import http.client
import os
import re
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from common import S3Server, put_objects, wait_until
from sampler_helpers import running_sampler

OLD, NEW = "AKIAOLDKEY0000000001", "AKIANEWKEY0000000002"
COUNT = 30
_SIGNED_BY = re.compile(r"Credential=([A-Z0-9]+)(?:/|%2F)")
_REFUSAL = (b"<Error><Code>InvalidAccessKeyId</Code><Message>The AWS Access Key Id you provided does "
            b"not exist in our records.</Message></Error>")


class KeyRevokingProxy(ThreadingHTTPServer):
    """Forwards to the S3 server, but answers 403 ``InvalidAccessKeyId`` to a request signed with
    a key in :attr:`revoked`; :attr:`answers` counts (access key, operation, status)."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream = urlsplit(upstream).netloc
        self.revoked: set[str] = set()
        self.answers: Counter[tuple[str | None, str, int]] = Counter()
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def count(self, key: str | None, op: str, status: int = 0) -> int:
        """Answers so far to ``key``'s ``op`` requests (GET of an object, LIST), of ``status`` (0: any)."""
        with self.lock:
            return sum(n for (k, o, s), n in self.answers.items()
                       if k == key and o == op and status in (0, s))


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: KeyRevokingProxy

    def log_message(self, *_: object) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        signed = _SIGNED_BY.search(self.path) or _SIGNED_BY.search(self.headers.get("Authorization", ""))
        key = signed.group(1) if signed else None
        on_object = self.path.split("?")[0].count("/") > 1  # /bucket/key, not /bucket
        op = "LIST" if "list-type=2" in self.path else f"{self.command} object" if on_object else self.command
        headers: list[tuple[str, str]] = [("Content-Type", "application/xml")]
        if key in self.server.revoked:
            status, data = 403, _REFUSAL
        else:
            conn = http.client.HTTPConnection(self.server.upstream, timeout=30)
            try:
                conn.request(self.command, self.path, body=body,
                             headers={k: v for k, v in self.headers.items() if k.lower() != "connection"})
                response = conn.getresponse()
                status, data = response.status, response.read()
                headers = [(k, v) for k, v in response.getheaders()
                           if k.lower() not in ("connection", "transfer-encoding", "content-length")]
            finally:
                conn.close()
        with self.server.lock:
            self.server.answers[(key, op, status)] += 1
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST = _answer


@contextmanager
def key_revoking_proxy(upstream: str) -> Iterator[KeyRevokingProxy]:
    proxy = KeyRevokingProxy(upstream)
    thread = threading.Thread(target=proxy.serve_forever, name="key-revoking-proxy", daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join(timeout=10)


def write_credentials(path: Path, access_key: str, secret: str) -> None:
    """Replace the credentials file whole, as the kubelet swaps a Secret volume's files."""
    temp = path.with_name(path.name + ".new")
    temp.write_text(f"[default]\naws_access_key_id = {access_key}\naws_secret_access_key = {secret}\n")
    os.replace(temp, path)


@pytest.fixture
def files_mode(s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The chart's files mode: credentials in a shared credentials file only (none in the
    environment, no AWS config file)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    credentials = tmp_path / "secret" / "credentials"
    credentials.parent.mkdir()
    write_credentials(credentials, OLD, "old")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return credentials


@pytest.mark.long
def test_a_rotated_credentials_file_is_read_again_and_no_key_is_skipped(
        s3: S3Server, files_mode: Path, tmp_path: Path) -> None:
    """The old key is revoked mid-run and the file then holds a new one: while the store refuses
    the credentials no key is skipped; the new key is read and every key is fetched with it."""
    objects = {f"train/{i:05d}.bin": os.urandom(20_000) for i in range(COUNT)}
    put_objects(s3, "rot", objects)
    cache = tmp_path / "cache"
    with key_revoking_proxy(s3.endpoint) as proxy, running_sampler(
            cache, "s3://rot/train", "--endpoint-url", proxy.url, "--capacity", "100Mi",
            "--max-rate", "100Ki", "--concurrency", "4") as sp:
        wait_until(lambda: proxy.count(OLD, "GET object", 200) >= 8, what="GETs with the old key")
        proxy.revoked.add(OLD)
        # Refused for a while before the file is rewritten (the kubelet's sync comes later).
        wait_until(lambda: proxy.count(OLD, "GET object", 403) >= 12 or sp.stats()["skipped_total"],
                   what="GETs refused with the old key")
        write_credentials(files_mode, NEW, "new")
        wait_until(lambda: sp.stats()["samples"] + int(sp.stats()["skipped_total"]) >= COUNT,
                   timeout=90, what="every key cached or skipped")
        stats = sp.stats()
        log = sp.log_text()
    assert stats["skipped_total"] == 0, f"keys skipped on a credentials refusal:\n{log[-3000:]}"
    assert stats["samples"] == COUNT
    fetched_new = proxy.count(NEW, "GET object", 200)
    assert fetched_new >= COUNT - proxy.count(OLD, "GET object", 200), "the rest fetched with the new key"
    assert proxy.count(NEW, "GET object", 403) == 0
    assert "the store refuses the credentials" in log and "the store accepts the credentials again" in log
