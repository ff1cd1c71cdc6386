"""Whose a cache is includes the store's endpoint: one bucket name at two S3-compatible stores is two
datasets, and ``file://localhost/abs`` is the folder ``file:///abs``.

Two real moto servers hold the bucket ``data`` with the same keys; every object of store A begins
with ``A`` and every object of store B with ``B``. Without the endpoint among the identity keys, a
restart at B's ``--endpoint-url`` sampled on from A's complete catalog and cut epochs of A's bytes
under B's settings, then epochs mixing both stores. Real ``epochfs sample``, ``cut`` and ``mount``.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import S3Server, moto_server, put_objects, wait_until
from fuse_helpers import mounted
from sampler_helpers import index_rows, start_sampler

from epochfs.sidecar.remote.urls import same_endpoint, same_remote
from epochfs.sidecar.sampler.identity import store_endpoint
from epochfs.sidecar.store import INDEX_NAME, Meta

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
COUNT = 12
REMOTE = "s3://data/train"


@pytest.fixture
def two_stores(tmp_path: Path) -> Iterator[tuple[S3Server, S3Server]]:
    """Stores A and B: the same bucket and keys, bodies beginning with their store's letter."""
    with moto_server(tmp_path / "moto-a.log") as a, moto_server(tmp_path / "moto-b.log") as b:
        for server, tag in ((a, b"A"), (b, b"B")):
            objects = {f"train/{i:05d}.bin": tag * 16 + os.urandom(500) for i in range(COUNT)}
            put_objects(server, "data", objects)
        yield a, b


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EPOCHFS_", "AWS_"))}
    return {**env, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1"}


def _samples(cache: Path) -> int:
    if not (cache / INDEX_NAME).exists():
        return 0
    rows = index_rows(cache, "SELECT value FROM counters WHERE name='cache_samples'")
    return int(str(rows[0][0])) if rows else 0


def _meta(cache: Path, key: Meta) -> str | None:
    rows = index_rows(cache, "SELECT value FROM meta WHERE name=?", (key.value,))
    return str(rows[0][0]) if rows else None


def _fill_and_cut(cache: Path, remote: str, *flags: str, env: dict[str, str] | None = None) -> None:
    """Sample every object of ``remote``, cut an epoch, stop cleanly."""
    sampler = start_sampler(cache, remote, "--capacity", "1Mi", *flags, env=env)
    try:
        wait_until(lambda: _samples(cache) == COUNT or not sampler.alive(), timeout=60, what="every sample")
        assert sampler.alive(), sampler.log_text()[-3000:]
        cut = subprocess.run([EPOCHFS, "cut", "--cache", str(cache)], env=env or _env(), capture_output=True,
                             text=True, timeout=60)
        assert cut.returncode == 0, cut.stderr
    finally:
        assert sampler.stop() == 0, sampler.log_text()[-3000:]


def _epochs_through_mount(cache: Path, mount: Path) -> dict[str, bytes]:
    """Every file of every live epoch, and its manifest, read through a real ``epochfs mount``."""
    with mounted(cache, mount) as m:
        names = sorted(name for name in os.listdir(m.path) if name.startswith("epoch-"))
        out = {}
        for name in names:
            for dirpath, _dirs, files in os.walk(m.path / name):
                for file in files:
                    path = Path(dirpath) / file
                    out[str(path.relative_to(m.path))] = path.read_bytes()
            manifest = m.path / ".epochfs" / f"{name}.manifest"
            out[str(manifest.relative_to(m.path))] = manifest.read_bytes()
    return out


def _sample_once(cache: Path, remote: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """A start expected to exit at once (refused); one still sampling after a minute was not."""
    try:
        argv = [EPOCHFS, "sample", "--cache", str(cache), "--remote", remote, "--capacity", "1Mi", *flags]
        return subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"epochfs sample {' '.join(flags)} was not refused: still sampling after {e.timeout}s")


def test_the_same_bucket_at_another_endpoint_is_refused(tmp_path: Path,
                                                        two_stores: tuple[S3Server, S3Server]) -> None:
    a, b = two_stores
    cache = tmp_path / "cache"
    _fill_and_cut(cache, REMOTE, "--endpoint-url", a.endpoint, env=_env())
    before = _epochs_through_mount(cache, tmp_path / "mnt")
    served = [body[:1] for path, body in before.items() if path.startswith("epoch-")]
    assert served and set(served) == {b"A"}, sorted(before)
    refused = _sample_once(cache, REMOTE, "--endpoint-url", b.endpoint)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr[-3000:]
    assert lines[0].startswith("epochfs sample: --endpoint-url: the cache"), lines
    assert a.endpoint in lines[0] and b.endpoint in lines[0] and "another --cache" in lines[0], lines
    assert _epochs_through_mount(cache, tmp_path / "mnt") == before
    # Another spelling of A's endpoint is A: it starts, and cuts on from A's samples.
    _fill_and_cut(cache, REMOTE, "--endpoint-url", f"{a.endpoint}/", env=_env())
    assert _meta(cache, Meta.SAMPLER_ENDPOINT) == a.endpoint


def test_a_cache_recorded_without_an_endpoint_takes_the_current_one(
        tmp_path: Path, two_stores: tuple[S3Server, S3Server]) -> None:
    """As an older epochfs left it: remote, seed and shard recorded, the endpoint not."""
    a, b = two_stores
    cache = tmp_path / "cache"
    _fill_and_cut(cache, REMOTE, "--endpoint-url", a.endpoint, env=_env())
    with sqlite3.connect(cache / INDEX_NAME) as db:
        db.execute("DELETE FROM meta WHERE name=?", (Meta.SAMPLER_ENDPOINT.value,))
    db.close()
    sampler = start_sampler(cache, REMOTE, "--capacity", "1Mi", "--endpoint-url", b.endpoint, env=_env())
    assert sampler.stop() == 0, sampler.log_text()[-3000:]
    assert _meta(cache, Meta.SAMPLER_ENDPOINT) == b.endpoint


def test_an_endpoint_that_made_nothing_leaves_the_cache_to_the_next(
        tmp_path: Path, two_stores: tuple[S3Server, S3Server]) -> None:
    """A bucket missing at the first endpoint (the wrong store) makes nothing: the right one takes it."""
    a, b = two_stores
    put_objects(b, "only-b", {f"train/{i:05d}.bin": b"B" + os.urandom(100) for i in range(COUNT)})
    cache = tmp_path / "cache"
    wrong = _sample_once(cache, "s3://only-b/train", "--endpoint-url", a.endpoint)
    assert wrong.returncode == 2 and "--endpoint-url: the cache" not in wrong.stderr, wrong.stderr[-3000:]
    assert _meta(cache, Meta.SAMPLER_ENDPOINT) == a.endpoint
    _fill_and_cut(cache, "s3://only-b/train", "--endpoint-url", b.endpoint, env=_env())
    assert _meta(cache, Meta.SAMPLER_ENDPOINT) == b.endpoint


def test_file_localhost_is_the_folder_of_the_empty_host(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(COUNT):
        (data / f"{i:05d}.bin").write_bytes(os.urandom(64))
    cache = tmp_path / "cache"
    _fill_and_cut(cache, f"file://{data}")
    sampler = start_sampler(cache, f"file://localhost{data}", "--capacity", "1Mi")
    assert sampler.alive(), sampler.log_text()[-3000:]
    assert sampler.stop() == 0, sampler.log_text()[-3000:]
    assert same_remote(f"file://LOCALHOST{data}/") == same_remote(f"file://{data}")


@pytest.mark.parametrize(("one", "other", "same"), [
    ("http://127.0.0.1:9000", "HTTP://127.0.0.1:9000/", True), ("https://minio:443", "https://MinIO", True),
    ("http://minio:80/", "http://minio", True), ("http://minio:9000", "http://minio:9001", False),
    ("http://minio:9000", "https://minio:9000", False),
    ("http://h:10000/acct1", "http://h:10000/acct2", False),
    ("http://h:1/acct/?sig=secret", "http://h:1/acct", True), ("", "", True), ("", "http://minio", False),
])
def test_two_spellings_of_one_endpoint(one: str, other: str, same: bool) -> None:
    assert (same_endpoint(one) == same_endpoint(other)) is same
    assert "secret" not in same_endpoint(one)


@pytest.mark.parametrize(("remote", "endpoint", "environ", "recorded"), [
    ("s3://b/p", None, {}, ""),
    ("s3://b/p", "http://Minio:9000/", {"AWS_ENDPOINT_URL": "http://other:1"}, "http://minio:9000"),
    ("s3://b/p", None, {"AWS_ENDPOINT_URL": "http://other:1"}, "http://other:1"),
    ("s3://b/p", None, {"AWS_ENDPOINT_URL_S3": "http://s3only:2", "AWS_ENDPOINT_URL": "http://other:1"},
     "http://s3only:2"),
    ("s3://b/p", None, {"AWS_ENDPOINT_URL": "http://other:1", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"},
     ""),
    ("gs://b", None, {"STORAGE_EMULATOR_HOST": "localhost:4443"}, "http://localhost:4443"),
    ("gs://b", None, {"STORAGE_EMULATOR_HOST": "default"}, ""),
    ("az://c/p", None, {"AZURE_STORAGE_ACCOUNT_NAME": "acct"}, "https://acct.blob.core.windows.net"),
    ("az://c@acct.blob.core.windows.net/p", None, {"AZURE_STORAGE_ACCOUNT_NAME": "other"}, ""),
    ("az://c/p", None, {"AZURE_STORAGE_CONNECTION_STRING": "AccountName=dev;AccountKey=k==;"
                        "BlobEndpoint=http://127.0.0.1:10000/dev;"}, "http://127.0.0.1:10000/dev"),
    ("file:///d", "http://minio:9000", {}, ""), ("https://h/base/", "http://minio:9000", {}, ""),
])
def test_the_endpoint_recorded_is_the_one_the_backend_reaches(remote: str, endpoint: str | None,
                                                              environ: dict[str, str], recorded: str) -> None:
    assert store_endpoint(remote, endpoint, environ) == recorded


CONFIG = """[default]
endpoint_url = http://global-default:9000

[profile train]
endpoint_url = http://global-train:9000
services = stores

[profile flat]
endpoint_url = http://flat:9000
ignore_configured_endpoint_urls = true

[services stores]
s3 =
  endpoint_url = http://s3-service:9000
"""


@pytest.mark.parametrize(("environ", "recorded"), [
    ({}, "http://global-default:9000"),
    ({"AWS_PROFILE": "train"}, "http://s3-service:9000"),
    ({"AWS_PROFILE": "train", "AWS_ENDPOINT_URL": "http://env:1"}, "http://env:1"),
    ({"AWS_ENDPOINT_URL_S3": "http://env-s3:1", "AWS_PROFILE": "train"}, "http://env-s3:1"),
    ({"AWS_ENDPOINT_URL": "http://env:1"}, "http://env:1"),
    ({"AWS_PROFILE": "flat"}, ""),
    ({"AWS_PROFILE": "absent"}, ""),
])
def test_an_endpoint_the_aws_config_file_sets_is_recorded(tmp_path: Path, environ: dict[str, str],
                                                          recorded: str) -> None:
    """botocore takes the S3 endpoint from the AWS config file too (a profile's ``endpoint_url``,
    or its ``services`` section's ``s3``): a cache filled so recorded "" and took a start at
    another store in silence, its epochs then mixing both stores' samples."""
    config = tmp_path / "config"
    config.write_text(CONFIG)
    env = {"AWS_CONFIG_FILE": str(config), "HOME": str(tmp_path), **environ}
    assert store_endpoint("s3://b/p", None, env) == recorded
