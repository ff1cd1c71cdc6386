"""The botocore-free S3 presigner (sidecar/remote/sigv4.py) gives botocore's own URLs, and the S3
remote reaches its first GET without importing botocore where it is used.

Each URL is compared with botocore's ``generate_presigned_url`` for the same request, signed at the
same second (read back from botocore's URL), byte for byte once the query's order is set aside;
where the plain signer could differ from botocore (a profile, a config file, no explicit endpoint)
it is not used at all.
"""

from __future__ import annotations

import calendar
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from common import S3Server

from epochfs.sidecar.remote.s3 import S3Remote
from epochfs.sidecar.remote.sigv4 import Presigner, environ_proxies, light_settings

ENV = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
       "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
       "AWS_DEFAULT_REGION": "eu-west-3"}

KEYS = ["plain.bin", "a b/c+d~é%x?y", "deep/er/key with spaces", "ünïcödé/ключ.jpg", "amp&eq=semi;.bin",
        "tilde~star*paren(1).bin", "slash//double", "#hash"]

LISTS: list[dict[str, Any]] = [
    {"Prefix": "", "MaxKeys": 1000, "EncodingType": "url"},
    {"Prefix": "a b/", "MaxKeys": 1, "EncodingType": "url", "Delimiter": "/", "StartAfter": "x y+z"},
    {"Prefix": "ds/", "MaxKeys": 1000, "EncodingType": "url", "ContinuationToken": "1/+=abc=="},
]


def botocore_client(endpoint: str, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Any:
    import botocore.session
    from botocore.config import Config

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    session = botocore.session.get_session()
    return session.create_client("s3", endpoint_url=endpoint, config=Config(signature_version="s3v4"))


def same_url(theirs: str, ours: str) -> None:
    """Equal URLs: scheme, host and path alike, the same query parameters (order aside)."""
    assert theirs.split("?")[0] == ours.split("?")[0]
    assert sorted(urlsplit(theirs).query.split("&")) == sorted(urlsplit(ours).query.split("&"))


def signed_at(url: str) -> float:
    stamp = dict(parse_qsl(urlsplit(url).query))["X-Amz-Date"]
    return calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CREDENTIAL_EXPIRATION", "AWS_SESSION_TOKEN",
                 "AWS_SECURITY_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:9000", "https://minio.example:443", "http://s3.local",
                                      "https://[::1]:8443"])
@pytest.mark.parametrize("token", [None, "FQoGZXIvYXdzE+/token=="])
def test_urls_are_botocores(clean_env: None, monkeypatch: pytest.MonkeyPatch, endpoint: str,
                            token: str | None) -> None:
    env = {**ENV, **({"AWS_SESSION_TOKEN": token} if token else {})}
    client = botocore_client(endpoint, monkeypatch, env)
    light = light_settings(endpoint)
    assert light is not None and light.region == client.meta.region_name == "eu-west-3"
    for key in KEYS:
        theirs = client.generate_presigned_url(
            "get_object", Params={"Bucket": "bkt", "Key": key, "ChecksumMode": "ENABLED"}, ExpiresIn=900)
        ours = Presigner(light, clock=lambda u=theirs: signed_at(u)).get_object(
            "bkt", key, {"x-amz-checksum-mode": "ENABLED"})
        same_url(theirs, ours)
    for params in LISTS:
        theirs = client.generate_presigned_url("list_objects_v2", Params={"Bucket": "bkt", **params},
                                               ExpiresIn=900)
        ours = Presigner(light, clock=lambda u=theirs: signed_at(u)).list_objects_v2("bkt", params)
        same_url(theirs, ours)
    theirs = client.generate_presigned_url("head_bucket", Params={"Bucket": "bkt"}, ExpiresIn=900,
                                           HttpMethod="HEAD")
    same_url(theirs, Presigner(light, clock=lambda: signed_at(theirs)).head_bucket("bkt"))


def test_the_region_is_botocores(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """``AWS_DEFAULT_REGION``, else us-east-1: botocore does not read ``AWS_REGION``."""
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    env = {k: v for k, v in ENV.items() if k != "AWS_DEFAULT_REGION"}
    client = botocore_client("http://127.0.0.1:9000", monkeypatch, env)
    light = light_settings("http://127.0.0.1:9000")
    assert light is not None
    theirs = client.generate_presigned_url("get_object", Params={"Bucket": "b", "Key": "k"})
    assert dict(parse_qsl(urlsplit(theirs).query))["X-Amz-Credential"].split("/")[2] == light.region


@pytest.mark.parametrize(("change", "why"), [
    ({"endpoint": None}, "AWS's own endpoints: virtual-hosted and regional addressing"),
    ({"endpoint": "http://127.0.0.1:9000/base"}, "an endpoint with a path"),
    ({"endpoint": "http://user:pw@127.0.0.1:9000"}, "credentials in the endpoint"),
    ({"AWS_PROFILE": "other"}, "a named profile replaces the environment's keys"),
    ({"AWS_CREDENTIAL_EXPIRATION": "2030-01-01T00:00:00Z"}, "refreshable keys"),
    ({"AWS_SECRET_ACCESS_KEY": ""}, "no secret"),
    ({"config": "[default]\nregion = eu-north-1\n"}, "a config file may set the region or addressing"),
])
def test_botocore_signs_where_it_could_differ(clean_env: None, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path, change: dict[str, str | None],
                                              why: str) -> None:
    for name, value in {**ENV, **change}.items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value or "")
    if "config" in change:
        (tmp_path / "no-config").write_text(str(change["config"]))
    endpoint = change.get("endpoint", "http://127.0.0.1:9000")
    assert light_settings(endpoint) is None, why


@pytest.mark.parametrize("env", [{}, {"HTTP_PROXY": "http://proxy:3128"}, {"http_proxy": "http://p:1"},
                                 {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "127.0.0.1"},
                                 {"HTTPS_PROXY": "http://proxy:3128"}])
def test_proxies_are_botocores(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    from botocore.utils import get_environ_proxies

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy",
                 "ALL_PROXY", "all_proxy", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for url in ("http://127.0.0.1:9000", "https://minio.example"):
        assert environ_proxies(url) == dict(get_environ_proxies(url))


SCRIPT = """
import json, sys
from epochfs.sidecar.remote.s3 import S3Remote
remote = S3Remote(url=sys.argv[1], endpoint_url=sys.argv[2])
objects, _, _ = remote.list_page("")
reader = remote.open(objects[0].key)
body = reader.read(1 << 20)
reader.close()
print(json.dumps({"botocore": "botocore" in sys.modules, "body": body.decode(),
                  "checksum": list(reader.checksum or ()), "keys": [o.key for o in objects]}))
remote.close()
"""


def test_the_first_gets_need_no_botocore(s3: S3Server, clean_env: None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing page and an object GET (with its stored checksum) from a fresh process that
    never imports botocore (~0.4 s of start-up): what ``epochfs sample`` does before it fetches."""
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    client = s3.client()
    client.create_bucket(Bucket="bkt")
    client.put_object(Bucket="bkt", Key="ds/one two.txt", Body=b"hello", ChecksumAlgorithm="CRC64NVME")
    out = subprocess.run([sys.executable, "-P", "-c", SCRIPT, "s3://bkt/ds", s3.endpoint],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen == {"botocore": False, "body": "hello", "checksum": ["crc64nvme", seen["checksum"][1]],
                    "keys": ["one two.txt"]}


def test_the_bucket_region_is_signed_for(s3: S3Server, clean_env: None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """As botocore's client does (a HeadBucket, its ``x-amz-bucket-region``): a bucket of another
    region than the environment's is signed for its own."""
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    client = s3.client()
    client.create_bucket(Bucket="far", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    client.put_object(Bucket="far", Key="x.bin", Body=b"x")
    remote = S3Remote(url="s3://far", endpoint_url=s3.endpoint)
    try:
        assert [o.key for o in remote.list_page("")[0]] == ["x.bin"]
        assert remote._boto is None  # botocore not made for any of it
        assert remote._client.meta.region_name == "eu-west-1"  # botocore's own check agrees
    finally:
        remote.close()
