"""One CA bundle for all of an ``s3://`` remote's TLS (sidecar/remote/trust.py), the real
``epochfs sample`` against moto behind a TLS front whose certificate a private CA signed:

- ``ca_bundle`` in the AWS profile (``aws configure set ca_bundle``) is trusted by the presigned
  fast path as by botocore: every object is cached, the multipart ones (their part sizes come from
  botocore's HEAD) among them, where the fast path refused the start (exit 2, certificate);
- ``SSL_CERT_FILE`` alone (read by OpenSSL's defaults, not by botocore) gives one answer for small
  and multipart objects: a refusal at the start naming AWS_CA_BUNDLE, where the fast path cached
  the small objects and every multipart one was skipped after 5 attempts;
- a bundle setting that names no usable file is refused at the start in one line naming the
  setting and the path, not as a bare ``FileNotFoundError`` with "check --remote".

The CA, the server's certificate and its key are made with openssl here; the TLS front is
tests/proxy_helpers.py's ``ReverseFront``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from common import S3Server, wait_until
from proxy_helpers import ReverseFront
from sampler_helpers import running_sampler, verify_cache

from epochfs.sidecar.store import INDEX_NAME, Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
PART = 5 << 20
"""S3's smallest part but the last: a multipart object needs one of this size."""
CLEARED = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
"""Variables of the machine that could trust (or name) a bundle: each test sets its own."""
NEW_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")
"""P-256 keys: made at once, where an RSA key's primes take a tenth of a second or more each;
what is trusted (which CA signed the certificate) is the question here, not the key type."""


@dataclass(frozen=True)
class PrivateCA:
    """A CA made for the test, and a certificate it signed for 127.0.0.1 with its key."""

    ca: Path
    cert: Path
    key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def private_ca(tmp_path_factory: pytest.TempPathFactory) -> PrivateCA:
    folder = tmp_path_factory.mktemp("ca")
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    key, csr, cert, ext = folder / "srv.key", folder / "srv.csr", folder / "srv.pem", folder / "ext.cnf"
    _openssl("req", "-x509", *NEW_KEY, "-nodes", "-days", "1", "-subj", "/CN=epochfs test CA",
             "-keyout", str(ca_key), "-out", str(ca))
    _openssl("req", *NEW_KEY, "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(csr))
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                   "extendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-days", "1", "-out", str(cert), "-extfile", str(ext))
    return PrivateCA(ca, cert, key)


@pytest.fixture
def front(s3: S3Server, private_ca: PrivateCA, monkeypatch: pytest.MonkeyPatch) -> Iterator[ReverseFront]:
    """moto behind TLS, with the certificate the private CA signed; no AWS setting or CA variable
    of the machine (its own AWS_CA_BUNDLE among them) in this process or its children."""
    for name in [k for k in os.environ if k.startswith("AWS_") or k in CLEARED]:
        monkeypatch.delenv(name)
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(private_ca.cert, private_ca.key)
    server = ReverseFront(upstream=s3.endpoint, tls=context)
    try:
        yield server
    finally:
        server.close()


def _put_mixed(s3: S3Server) -> dict[str, bytes]:
    """Bucket ``bkt`` under ``ds/``: 2 multipart objects (a 5 MiB part and a 1000-byte one, no
    stored checksum: an md5-of-parts ETag, checked with the part sizes) and 3 small ones."""
    client = s3.client()
    client.create_bucket(Bucket="bkt")
    objects: dict[str, bytes] = {}
    for n in range(2):
        key = f"big{n}.bin"
        parts = [os.urandom(PART), os.urandom(1000)]
        upload = client.create_multipart_upload(Bucket="bkt", Key=f"ds/{key}")["UploadId"]
        done = [{"ETag": client.upload_part(Bucket="bkt", Key=f"ds/{key}", UploadId=upload, PartNumber=i + 1,
                                            Body=body)["ETag"], "PartNumber": i + 1}
                for i, body in enumerate(parts)]
        client.complete_multipart_upload(Bucket="bkt", Key=f"ds/{key}", UploadId=upload,
                                         MultipartUpload={"Parts": done})
        objects[key] = b"".join(parts)
    for n in range(3):
        objects[f"small{n}.bin"] = os.urandom(1000)
        client.put_object(Bucket="bkt", Key=f"ds/small{n}.bin", Body=objects[f"small{n}.bin"])
    return objects


def _clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The machine's environment without its AWS settings or CA variables, ``HOME`` in the test
    (no ~/.aws/config of the machine), and ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "EPOCHFS_")) and k not in CLEARED}
    home.mkdir(parents=True, exist_ok=True)
    return {**env, "HOME": str(home), "AWS_EC2_METADATA_DISABLED": "true", **extra}


def _keys_env(home: Path, **extra: str) -> dict[str, str]:
    """Keys in the environment, no AWS config file: the URLs are signed without botocore."""
    return _clean_env(home, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                      AWS_DEFAULT_REGION="us-east-1", **extra)


def _profile_env(tmp_path: Path, config: str, **extra: str) -> dict[str, str]:
    """Profile ``train`` of an AWS config file (``config`` its settings besides the region) and
    its keys in a shared credentials file: botocore makes the client, as in the chart's files mode."""
    (tmp_path / "config").write_text(f"[profile train]\nregion = us-east-1\n{config}")
    (tmp_path / "credentials").write_text("[train]\naws_access_key_id = testing\n"
                                          "aws_secret_access_key = testing\n")
    return _clean_env(tmp_path / "home", AWS_PROFILE="train", AWS_CONFIG_FILE=str(tmp_path / "config"),
                      AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"), **extra)


def _samples(cache: Path) -> tuple[int, int]:
    """(samples cached, objects skipped) of a cache; (0, 0) before its index exists."""
    if not (cache / INDEX_NAME).exists():
        return 0, 0
    with Store(cache) as store:
        stats = store.stats()
    return stats.samples, stats.skipped_total


def _refused(cache: Path, front: ReverseFront, env: dict[str, str]) -> tuple[int | None, str]:
    """Run ``epochfs sample`` until it exits or caches or skips an object: (exit status or None
    while it runs, its output). A sampler the remote did not refuse is stopped."""
    log = cache.parent / "sample.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([EPOCHFS, "sample", "--remote", "s3://bkt/ds", "--endpoint-url", front.url,
                                 "--cache", str(cache), "--capacity", "1Gi", "--read-timeout", "10"],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(lambda: proc.poll() is not None or any(_samples(cache)),
                   timeout=60, what="the sampler exits, or caches or skips an object")
    finally:
        running = proc.poll() is None
        if running:
            proc.terminate()
        proc.wait(timeout=30)
    return None if running else proc.returncode, log.read_text(errors="replace")


def _last_line(said: str) -> str:
    assert "Traceback" not in said, said
    [line] = [line for line in said.splitlines() if line.startswith("epochfs sample:")]
    return line


def _boto3_key_count(env: dict[str, str], url: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """Keys stock boto3 lists through ``url`` with the AWS settings of ``env`` (a profile whose
    ca_bundle it must read): the premise, that the profile alone lets botocore trust the front.
    Asked in this process (the ``front`` fixture cleared its AWS and CA variables), not in a new
    interpreter that imports boto3 again."""
    import boto3

    for name, value in env.items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    client = boto3.session.Session().client("s3", endpoint_url=url)
    return int(client.list_objects_v2(Bucket="bkt")["KeyCount"])


def test_a_profiles_ca_bundle_is_trusted_by_the_fast_path_and_botocore(
        s3: S3Server, front: ReverseFront, private_ca: PrivateCA, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    objects = _put_mixed(s3)
    env = _profile_env(tmp_path, f"ca_bundle = {private_ca.ca}\n")
    assert _boto3_key_count(env, front.url, monkeypatch) == len(objects)
    cache = tmp_path / "cache"
    with running_sampler(cache, "s3://bkt/ds", "--endpoint-url", front.url, "--capacity", "1Gi",
                         env=env) as sp:
        wait_until(lambda: sp.stats()["samples"] >= len(objects) and sp.stats()["inflight_bytes"] == 0,
                   what="every object cached")
    assert verify_cache(cache, objects) == len(objects)
    assert _samples(cache) == (len(objects), 0)
    assert f"S3 TLS certificates are checked against {private_ca.ca} (ca_bundle of AWS profile 'train'" \
        in sp.log_text()
    assert any(path.startswith("/bkt/ds/big0.bin?partNumber=1") for _port, method, path in front.requests
               if method == "HEAD"), "the part's size came from botocore's HEAD, through the front"


@pytest.mark.parametrize("signer", ["keys in the environment", "an AWS profile"])
def test_ssl_cert_file_alone_is_refused_at_the_start_for_small_and_multipart_alike(
        s3: S3Server, front: ReverseFront, private_ca: PrivateCA, tmp_path: Path, signer: str) -> None:
    """``SSL_CERT_FILE`` trusts the CA for OpenSSL's defaults, not for botocore: neither path reads
    it now, so the start is refused once (before: small objects cached, multipart ones skipped)."""
    _put_mixed(s3)
    trusted = {"SSL_CERT_FILE": str(private_ca.ca)}
    env = (_keys_env(tmp_path / "home", **trusted) if signer.startswith("keys")
           else _profile_env(tmp_path, "", **trusted))
    cache = tmp_path / "cache"
    status, said = _refused(cache, front, env)
    assert _samples(cache) == (0, 0), f"no object cached, none skipped:\n{said[-3000:]}"
    assert status == 2, said[-3000:]
    line = _last_line(said)
    assert "CERTIFICATE_VERIFY_FAILED" in line and "a private CA's bundle goes in AWS_CA_BUNDLE" in line
    assert "SSL_CERT_FILE is set, but S3 requests do not read it" in said


@pytest.mark.parametrize("missing", ["no such file", "a folder, not a file", "no PEM certificate in it"])
def test_an_aws_ca_bundle_that_is_not_a_bundle_is_refused_naming_it(
        s3: S3Server, front: ReverseFront, tmp_path: Path, missing: str) -> None:
    bundle = {"no such file": tmp_path / "secrets" / "ca.pem", "a folder, not a file": tmp_path,
              "no PEM certificate in it": tmp_path / "empty.pem"}[missing]
    if missing.startswith("no PEM"):
        bundle.write_text("")
    _put_mixed(s3)
    cache = tmp_path / "cache"
    status, said = _refused(cache, front, _keys_env(tmp_path / "home", AWS_CA_BUNDLE=str(bundle)))
    assert status == 2, said[-3000:]
    line = _last_line(said)
    assert line.startswith(f"epochfs sample: --remote: AWS_CA_BUNDLE: {bundle}: {missing}"), line
    assert line.endswith("; point it at the CA's PEM file, or unset it for botocore's default bundle"), line


def test_a_profiles_missing_ca_bundle_is_refused_naming_the_profile_and_the_path(
        s3: S3Server, front: ReverseFront, tmp_path: Path) -> None:
    bundle = tmp_path / "secrets" / "ca.pem"
    _put_mixed(s3)
    cache = tmp_path / "cache"
    status, said = _refused(cache, front, _profile_env(tmp_path, f"ca_bundle = {bundle}\n"))
    assert status == 2, said[-3000:]
    line = _last_line(said)
    assert f"ca_bundle of AWS profile 'train' in {tmp_path / 'config'}: {bundle}: no such file" in line
    assert "check --remote" not in line, "the setting is named: not --remote's URL"


@pytest.mark.parametrize("settings", [
    {"AWS_CA_BUNDLE": "CA"},
    {"REQUESTS_CA_BUNDLE": "CA"},
    {"AWS_CA_BUNDLE": "", "REQUESTS_CA_BUNDLE": "CA"},
], ids=["AWS_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "an empty AWS_CA_BUNDLE"])
def test_the_fast_path_and_botocore_verify_against_the_same_bundle(
        s3: S3Server, front: ReverseFront, private_ca: PrivateCA, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, settings: dict[str, str]) -> None:
    """Each setting botocore reads reaches both clients: the presigned listing and GET, and
    botocore's HEAD of a part (an empty value counts as unset for both)."""
    from epochfs.sidecar.remote.s3 import S3Remote

    _put_mixed(s3)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    for name, value in settings.items():
        monkeypatch.setenv(name, value.replace("CA", str(private_ca.ca)))
    remote = S3Remote(url="s3://bkt/ds", endpoint_url=front.url, concurrency=2, read_timeout=10)
    try:
        listed = remote.list_page("")
        reader = remote.open("small0.bin")
        reader.close()
        assert remote.part_size("big0.bin", 1) == PART
    finally:
        remote.close()
    assert sorted(o.key for o in listed[0]) == ["big0.bin", "big1.bin", "small0.bin", "small1.bin",
                                                     "small2.bin"]
    assert any(method == "HEAD" and "partNumber=1" in path for _port, method, path in front.requests)
