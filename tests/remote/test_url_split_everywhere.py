"""Every remote URL is split one way (sidecar/remote/urls.py): "#" and "?" are legal in an S3 key,
so an ``--index`` at ``s3://bkt/idx#2.txt``, an S3 Inventory under ``s3://dest/inv?x/`` and an
inventory of a remote ``s3://src/run#1`` read the objects they name, not the part before the
character (urllib takes it for a fragment or a query and read ``idx``, ``inv``, ``run``). And a
``--remote`` or ``--index`` that cannot be a remote URL ends ``epochfs sidecar`` at start with
exit status 2 and one line saying why (``check_url``), instead of failing later or listing
something else.

Against the real S3 server of the remote tests (moto) and real folders.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from common import S3Server

from epochfs.sidecar.catalog import build_catalog
from epochfs.sidecar.listing.indexfile import FORMAT_VERSION, IndexSource, object_record
from epochfs.sidecar.listing.inventory import InventorySource
from epochfs.sidecar.remote import RemoteObject
from epochfs.sidecar.remote.registry import check_url
from epochfs.sidecar.remote.urls import split_url
from epochfs.sidecar.store import Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))


def index_body(keys: list[str]) -> bytes:
    body = json.dumps({"epochfs_index": FORMAT_VERSION, "sorted": False}).encode() + b"\n"
    body += b"".join(object_record(RemoteObject(k, 1, "v")) for k in keys)
    return gzip.compress(body + json.dumps({"end": True, "count": len(keys)}).encode() + b"\n")


def catalog_keys(tmp_path: Path, source: IndexSource | InventorySource) -> set[str]:
    store = Store(tmp_path / "cache", create=True)
    try:
        report = build_catalog(store, None, seed=0, shard_index=0, shard_count=1, object_limit=10**6,
                               source=source)
        assert report.complete
        return {c.key for _, c in store.candidates(after_rank=None, limit=10**9)}
    finally:
        store.close()


@pytest.mark.parametrize("key", ["idx#2.txt", "v?1/idx.gz", "run#1/a?b#c.jsonl.gz"])
def test_an_s3_index_url_keeps_hash_and_question_mark(s3: S3Server, tmp_path: Path, key: str) -> None:
    """The index named is read, not the object named by the URL less its "fragment"/"query"
    (here a decoy index of other keys, so a wrong read cannot pass by failing)."""
    client = s3.client()
    client.create_bucket(Bucket="bkt")
    client.put_object(Bucket="bkt", Key=key, Body=index_body(["right/a.bin", "right/b.bin"]))
    for decoy in {key.split("#")[0], key.split("?")[0], key.split("#")[0].split("?")[0]} - {key}:
        client.put_object(Bucket="bkt", Key=decoy, Body=index_body(["wrong/x.bin"]))
    source = IndexSource(f"s3://bkt/{key}", endpoint_url=s3.endpoint)
    assert catalog_keys(tmp_path, source) == {"right/a.bin", "right/b.bin"}


def put_inventory(s3: S3Server, root: str, rows: list[str]) -> str:
    """A CSV S3 Inventory of bucket ``src`` in bucket ``dest`` under the key prefix ``root``, as
    Amazon lays it out (two data files); returns the manifest's URL."""
    client = s3.client()
    client.create_bucket(Bucket="dest")
    files = []
    for n, chunk in enumerate((rows[: len(rows) // 2], rows[len(rows) // 2:])):
        text = io.StringIO()
        csv.writer(text).writerows(["src", quote(k, safe="/"), "3", "2026-01-01T00:00:00.000Z", "e"]
                                   for k in chunk)
        key = f"{root}src/cfg/data/{n}#part.csv.gz"
        client.put_object(Bucket="dest", Key=key, Body=gzip.compress(text.getvalue().encode()))
        files.append({"key": key, "size": 1, "MD5checksum": "x"})
    manifest = {"sourceBucket": "src", "destinationBucket": "arn:aws:s3:::dest", "fileFormat": "CSV",
                "fileSchema": "Bucket, Key, Size, LastModifiedDate, ETag", "files": files}
    key = f"{root}src/cfg/2026-01-01T00-00Z/manifest.json"
    client.put_object(Bucket="dest", Key=key, Body=json.dumps(manifest).encode())
    return f"s3://dest/{key}"


@pytest.mark.parametrize("root", ["inv?x/", "inv#1/"])
def test_an_s3_inventory_under_hash_and_question_mark_lists_its_remotes_prefix(
        s3: S3Server, tmp_path: Path, root: str) -> None:
    """The manifest, its data files (a "#" in their names) and the remote's prefix ``run#1`` are
    all read as named: before, the manifest was read from ``inv`` (no such key) and the rows were
    matched against the prefix ``run/``."""
    rows = [f"run#1/c{i % 2}/{i}.bin" for i in range(10)] + ["run/other.bin", "run#10/near.bin"]
    url = put_inventory(s3, root, rows)
    source = InventorySource(url, remote_url="s3://src/run#1", endpoint_url=s3.endpoint)
    assert catalog_keys(tmp_path, source) == {k[len("run#1/"):] for k in rows[:10]}


def test_a_file_inventory_lists_a_remote_prefix_with_a_question_mark(tmp_path: Path) -> None:
    """A copy of the inventory on a file system, for a remote whose prefix holds "?"."""
    data = tmp_path / "inv" / "src" / "cfg" / "data"
    data.mkdir(parents=True)
    (data / "0.csv").write_text("src,v%3F1/a.bin,3,t,e\nsrc,v/b.bin,3,t,e\n")
    manifest = tmp_path / "inv" / "src" / "cfg" / "2026-01-01T00-00Z" / "manifest.json"
    manifest.parent.mkdir()
    manifest.write_text(json.dumps({"sourceBucket": "src", "fileFormat": "CSV", "fileSchema":
                                    "Bucket, Key, Size, LastModifiedDate, ETag",
                                    "files": [{"key": "src/cfg/data/0.csv"}]}))
    source = InventorySource(f"file://{manifest}", remote_url="s3://src/v?1")
    assert catalog_keys(tmp_path, source) == {"a.bin"}


def test_split_url_keeps_object_keys_whole_and_http_queries_in_the_path() -> None:
    assert split_url("s3://bkt/run#1/x?y") == ("s3", "bkt", "/run#1/x?y")
    assert split_url("S3://bkt") == ("s3", "bkt", "")
    assert split_url("file:///data/run#1") == ("file", "", "/data/run#1")
    assert split_url("abfss://c@acct.dfs.core.windows.net/v?1") == ("abfss", "c@acct.dfs.core.windows.net",
                                                                    "/v?1")
    # http(s): the query is part of what is asked for; a fragment is never sent.
    assert split_url("https://h:8443/d/index.txt?sig=a/b#top") == ("https", "h:8443", "/d/index.txt?sig=a/b")
    assert split_url("/data/index.txt") == ("", "", "/data/index.txt")


@pytest.mark.parametrize(("url", "said"), [
    ("bkt/prefix", "needs a scheme"),
    ("file:/data", "needs a scheme"),
    ("nope://x/y", "unknown URL scheme 'nope'"),
    ("s3://", "no bucket"),
    ("s3:///prefix", "no bucket"),
    ("s3://my bucket/p", "'my bucket' is not an S3 bucket name"),
    ("s3://minio:9000/bkt", "'minio:9000' is not an S3 bucket name"),
    ("gs:///p", "no bucket"),
    ("az:///p", "no container"),
    ("abfss://@acct.dfs.core.windows.net/p", "no container"),
    ("https:///index.txt", "no host"),
    ("file://", "no folder"),
])
def test_check_url_says_what_is_wrong(url: str, said: str) -> None:
    with pytest.raises(ValueError, match=said) as e:
        check_url(url)
    if "scheme" in said:  # the known ones named
        assert all(s in str(e.value) for s in ("s3", "gs", "gcs", "az", "abfs", "https", "http", "file"))


@pytest.mark.parametrize("url", ["s3://bkt", "s3://Legacy_Bucket.1/run#1/", "gs://b/p", "az://c/p",
                                 "abfss://c@acct.dfs.core.windows.net/p", "https://h/d?x", "http://h:1",
                                 "file:///data", "file://localhost/data"])
def test_check_url_passes_good_urls(url: str) -> None:
    check_url(url)


def sidecar(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """The real ``epochfs sidecar`` (its own process), stopped by its settings before it starts
    anything (no mount is made)."""
    return subprocess.run(
        [EPOCHFS, "sidecar", "--cache", str(tmp_path / "cache"), "--mount", str(tmp_path / "mnt"),
         "--health-port", "0", *flags], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("flags", "line"), [
    (("--remote", "s3://"), "epochfs sidecar: --remote: 's3://': no bucket (s3://bucket/prefix)"),
    (("--remote", "s3://minio:9000/bkt"), "epochfs sidecar: --remote: 's3://minio:9000/bkt': "
                                          "'minio:9000' is not an S3 bucket name"),
    (("--remote", "az:///p"), "epochfs sidecar: --remote: 'az:///p': no container"),
    (("--remote", "file://"), "epochfs sidecar: --remote: 'file://': no folder"),
    (("--remote", "s3://bkt/p", "--index", "s3:///idx.gz"),
     "epochfs sidecar: --index: 's3:///idx.gz': no bucket"),
    (("--remote", "s3://bkt/p", "--index", "nope://i"),
     "epochfs sidecar: --index: unknown URL scheme 'nope'"),
])
def test_a_bad_remote_or_index_ends_the_sidecar_with_exit_2_and_the_reason(
        tmp_path: Path, flags: tuple[str, ...], line: str) -> None:
    r = sidecar(tmp_path, *flags)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.strip().splitlines()[-1].startswith(line), r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "cache").exists() and not (tmp_path / "mnt").exists()
