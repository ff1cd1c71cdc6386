"""Issue 21, fail fast with the reason: a remote that refuses the first listing ends the real
``epochfs sample`` (and ``epochfs sidecar``) at once with exit 2 and one line that names the flag,
the store's answer and what to check; a remote that cannot answer *now* exits 75
(``config.EXIT_RETRY``) instead. Run as a user would: the console script in a process of its own.

The S3 store is moto in server mode with authentication on (``/moto-api/reset-auth``), where IAM
users are real: an unknown key, a wrong secret, a known key without permission. moto checks only
the ``Authorization`` header, so a presigned URL (the remote's fast path) gets a 500 from it; real
S3 answers such a URL with a 403, after which the remote asks again through botocore. A small
proxy in front of moto gives that 403 to presigned URLs and passes everything else on, so the
refusal the sampler reports is moto's own answer to botocore's signed request.

Before the fix each line said the store's answer only ("... AccessDenied ...: Access Denied"), and
an unknown ``--endpoint-url`` host named ``--remote`` and neither the host nor what to do.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from common import S3Server, free_port, port_open, stop_process, wait_until

from epochfs.fuse.mounting import find_mount
from epochfs.sidecar.config import EXIT_RETRY, SamplerSettings
from epochfs.sidecar.remote import RemoteError
from epochfs.sidecar.remote.errors import may_answer_later
from epochfs.sidecar.remote.refusal import refusal_cause
from epochfs.sidecar.sampler.refusals import refusal_message
from epochfs.sidecar.store import INDEX_NAME, Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
PROMPT = 30.0
"""Seconds within which a refusal ends the command (0.5 s measured; a loaded 2-core machine)."""


@dataclass(frozen=True)
class AuthS3:
    """moto with authentication on, behind the presign-refusing proxy (:attr:`endpoint`)."""

    endpoint: str
    allowed: tuple[str, str]
    """A key whose user may do anything in S3."""
    powerless: tuple[str, str]
    """A key whose user has no policy: every S3 request is AccessDenied."""


class _PresignRefused(BaseHTTPRequestHandler):
    """Answers a presigned URL with S3's 403 (as S3 does for credentials it refuses), forwards
    the rest to moto."""

    protocol_version = "HTTP/1.1"
    upstream: tuple[str, int] = ("127.0.0.1", 0)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if "X-Amz-Signature=" in self.path:
            status, headers = 403, [("Content-Type", "application/xml")]
            data = (b"<Error><Code>InvalidAccessKeyId</Code><Message>The AWS Access Key Id you "
                    b"provided does not exist in our records.</Message></Error>")
        else:
            conn = http.client.HTTPConnection(*self.upstream, timeout=30)
            try:
                conn.request(self.command, self.path, body=body,
                             headers={k: v for k, v in self.headers.items() if k.lower() != "connection"})
                resp = conn.getresponse()
                status, data = resp.status, resp.read()
                headers = [(k, v) for k, v in resp.getheaders()
                           if k.lower() not in ("connection", "transfer-encoding", "content-length")]
            finally:
                conn.close()
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _answer


@pytest.fixture(scope="module")
def auth_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthS3]:
    port = free_port()
    log = tmp_path_factory.mktemp("moto-auth") / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    handler = type("Handler", (_PresignRefused,), {"upstream": ("127.0.0.1", port)})
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    proxy.daemon_threads = True
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        wait_until(lambda: port_open(port) or proc.poll() is not None, what="moto server")
        assert proc.poll() is None, log.read_text()[-2000:]
        import boto3

        direct = f"http://127.0.0.1:{port}"
        kw = {"endpoint_url": direct, "aws_access_key_id": "testing", "aws_secret_access_key": "testing",
              "region_name": "us-east-1"}
        s3, iam = boto3.client("s3", **kw), boto3.client("iam", **kw)
        s3.create_bucket(Bucket="bkt")
        s3.put_object(Bucket="bkt", Key="train/0.bin", Body=b"x" * 64)
        keys = {}
        for user, policy in (("allowed", {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}),
                             ("powerless", None)):
            iam.create_user(UserName=user)
            if policy is not None:
                document = {"Version": "2012-10-17", "Statement": [policy]}
                iam.put_user_policy(UserName=user, PolicyName="all", PolicyDocument=json.dumps(document))
            key = iam.create_access_key(UserName=user)["AccessKey"]
            keys[user] = (key["AccessKeyId"], key["SecretAccessKey"])
        # From here on every request is authenticated (moto counts 0 free requests).
        urllib.request.urlopen(urllib.request.Request(
            f"{direct}/moto-api/reset-auth", data=b"0", method="POST",
            headers={"Content-Type": "text/plain"}), timeout=10).read()
        yield AuthS3(f"http://127.0.0.1:{proxy.server_address[1]}", keys["allowed"], keys["powerless"])
    finally:
        proxy.shutdown()
        proxy.server_close()
        stop_process(proc)


def _env(key: tuple[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("EPOCHFS_", "AWS_"))}
    env.update(AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
               AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    if key is not None:
        env.update(AWS_ACCESS_KEY_ID=key[0], AWS_SECRET_ACCESS_KEY=key[1])
    return env


def sample(args: list[str], *, key: tuple[str, str] | None, cache: Path
           ) -> tuple[int, str, float]:
    """Run ``epochfs sample``; (exit status, its last stderr line, seconds it ran)."""
    started = time.monotonic()
    r = subprocess.run([EPOCHFS, "sample", "--cache", str(cache), *args], capture_output=True,
                       text=True, env=_env(key), timeout=120)
    took = time.monotonic() - started
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines, f"exit {r.returncode} said nothing"
    return r.returncode, lines[-1], took


CASES = {
    # case: (bucket, whose key, the store's answer, the fix the line must give)
    "unknown key": ("bkt", "unknown", "InvalidAccessKeyId",
                    "; check the credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
    "wrong secret": ("bkt", "allowed-wrong-secret", "SignatureDoesNotMatch",
                     "; check the credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
    "no credentials": ("bkt", "none", "Unable to locate credentials",
                       "; check the credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
    "access denied": ("bkt", "powerless", "AccessDenied",
                      "; check that these credentials may list and read s3://bkt/train (s3:ListBucket"),
    "no such bucket": ("no-such-bucket", "allowed", "NoSuchBucket",
                       "; check the bucket name in --remote (s3://BUCKET/prefix) and that --endpoint-url "
                       "is the store that holds it"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_first_listing_exits_2_at_once_naming_the_fix(
        case: str, auth_s3: AuthS3, tmp_path: Path) -> None:
    bucket, who, answer, fix = CASES[case]
    key = {"unknown": ("AKIANOSUCHKEY0000000", "x"), "none": None, "powerless": auth_s3.powerless,
           "allowed": auth_s3.allowed, "allowed-wrong-secret": (auth_s3.allowed[0], "not-the-secret")}[who]
    code, line, took = sample(["--remote", f"s3://{bucket}/train", "--endpoint-url", auth_s3.endpoint],
                              key=key, cache=tmp_path / "cache")
    assert code == 2, line
    assert line.startswith(f"epochfs sample: --remote: cannot list s3://{bucket}/train: "), line
    assert answer in line and fix in line, line
    assert took < PROMPT, f"{took:.1f} s"


def test_no_such_bucket_on_the_presigned_path_names_the_bucket(s3: S3Server, tmp_path: Path) -> None:
    """Without the proxy (the shared moto, no authentication) the listing's presigned request
    gets the 404 itself: the fix still comes from S3's code (NoSuchBucket), not the status alone."""
    code, line, _ = sample(["--remote", "s3://no-such-bucket/train", "--endpoint-url", s3.endpoint],
                           key=("testing", "testing"), cache=tmp_path / "cache")
    assert code == 2, line
    assert "NoSuchBucket" in line, line
    assert line.endswith("; check the bucket name in --remote (s3://BUCKET/prefix) and that "
                         "--endpoint-url is the store that holds it"), line


def fetched(cache: Path) -> bool:
    if not (cache / INDEX_NAME).exists():
        return False
    with Store(cache) as store:
        return store.stats().fetched_total >= 1


def test_the_right_key_is_not_refused(auth_s3: AuthS3, tmp_path: Path) -> None:
    """The other side: the allowed key lists and fetches through the same proxy and moto (the
    refusals above are the credentials', not the set-up's)."""
    cache = tmp_path / "cache"
    proc = subprocess.Popen([EPOCHFS, "sample", "--cache", str(cache), "--remote", "s3://bkt/train",
                             "--endpoint-url", auth_s3.endpoint], env=_env(auth_s3.allowed),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: fetched(cache) or proc.poll() is not None, timeout=60,
                   what="the first object fetched")
        assert proc.poll() is None, proc.communicate()[1]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]


def _resolver_says(host: str) -> int:
    with pytest.raises(socket.gaierror) as info:
        socket.getaddrinfo(host, 80)
    return int(info.value.errno or 0)


def test_an_unknown_endpoint_host_exits_2_naming_the_endpoint(tmp_path: Path) -> None:
    """A host name that does not exist (``.invalid`` never does) is a typo: exit 2, the line names
    ``--endpoint-url`` and the host (it named ``--remote``). Where this machine's resolver cannot
    answer at all (no DNS server: EAI_AGAIN), the same run is a transient failure: exit 75."""
    host = "no-such-host.invalid"
    code, line, took = sample(["--remote", "s3://bkt/train", "--endpoint-url", f"http://{host}"],
                              key=("x", "x"), cache=tmp_path / "cache")
    assert took < PROMPT, f"{took:.1f} s"
    if _resolver_says(host) == socket.EAI_AGAIN:
        assert code == EXIT_RETRY, line
        assert line.startswith("epochfs sample: the remote cannot be reached now: "), line
        return
    assert code == 2, line
    assert line.startswith("epochfs sample: --endpoint-url: cannot list s3://bkt/train: "), line
    assert line.endswith(f"; check the host name in --endpoint-url: {host} does not resolve from this "
                         "node (a typo, or a name only another network knows)"), line


def test_a_missing_folder_names_the_path_to_check(tmp_path: Path) -> None:
    code, line, _ = sample(["--remote", f"file://{tmp_path / 'no-such-folder'}"], key=None,
                           cache=tmp_path / "cache")
    assert code == 2, line
    assert line.endswith("is not a folder; check the path in --remote: the folder must exist on this "
                         "node"), line


def test_a_resolver_that_cannot_answer_now_is_transient_and_a_missing_name_is_not() -> None:
    """EAI_AGAIN (the node's DNS server down or slow: a pod whose cluster DNS is starting) may
    answer later; EAI_NONAME (no such name) never does. Both are the host's cause for the fix."""
    for errno, later in ((socket.EAI_AGAIN, True), (socket.EAI_NONAME, False)):
        try:
            try:
                raise socket.gaierror(errno, "resolver")
            except socket.gaierror as e:
                raise RemoteError("cannot list s3://bkt") from e
        except RemoteError as failure:
            assert may_answer_later(failure) is later, errno
            assert refusal_cause(failure) == "host"


def test_an_aws_endpoint_that_does_not_resolve_names_the_nodes_dns_not_the_bucket(tmp_path: Path) -> None:
    """``s3://BUCKET`` with no ``--endpoint-url``: S3 resolves every bucket name (wildcard DNS),
    so a name that does not resolve is AWS's endpoint, and the fix is the node's DNS or egress,
    or the region; with an endpoint the line still names the endpoint's host. Built from the
    error the resolver raises (EAI_NONAME), as no test may depend on reaching AWS."""
    try:
        try:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        except socket.gaierror as e:
            raise RemoteError("cannot list s3://bkt/train: [Errno -2] Name or service not known") from e
    except RemoteError as failure:
        aws = refusal_message(SamplerSettings(remote="s3://bkt/train", cache=tmp_path), failure)
        endpoint = refusal_message(SamplerSettings(remote="s3://bkt/train", cache=tmp_path,
                                                   endpoint_url="http://minio.invalid:9000"), failure)
    assert aws == ("--remote: cannot list s3://bkt/train: [Errno -2] Name or service not known; AWS's "
                   "S3 endpoint for bucket bkt does not resolve from this node (S3 resolves every "
                   "bucket name: not a typo in --remote): check the node's DNS and egress (or "
                   "AWS_DEFAULT_REGION / --endpoint-url)"), aws
    assert endpoint.startswith("--endpoint-url: "), endpoint
    assert endpoint.endswith("; check the host name in --endpoint-url: minio.invalid does not resolve "
                             "from this node (a typo, or a name only another network knows)"), endpoint


@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE")
def test_the_sidecar_stops_with_the_fix_in_its_termination_message(auth_s3: AuthS3, tmp_path: Path) -> None:
    """``epochfs sidecar`` with credentials the store does not accept: exit 2, the sampler's line
    (with the fix) last on stderr and in the termination message ``kubectl describe pod`` shows."""
    term = tmp_path / "termination-log"
    term.write_text("")
    mount = tmp_path / "view"
    argv = [EPOCHFS, "sidecar", "--remote", "s3://bkt/train", "--endpoint-url", auth_s3.endpoint,
            "--cache", str(tmp_path / "cache"), "--mount", str(mount), "--health-port", str(free_port()),
            "--termination-log", str(term)]
    started = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                       env=_env((auth_s3.allowed[0], "not-the-secret")))
    assert r.returncode == 2, r.stderr[-3000:]
    assert time.monotonic() - started < 60
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("epochfs sidecar: the sampler refused its settings"), last
    fix = "check the credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    assert "SignatureDoesNotMatch" in last and fix in last, last
    assert fix in term.read_text()
    assert "restarting" not in r.stderr
    assert find_mount(mount) is None
