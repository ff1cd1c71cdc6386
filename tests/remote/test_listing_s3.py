"""Listing over the real protocol (the synthetic S3 endpoint counts LIST requests): a restarted
``epochfs sample`` fetches from its catalog without one LIST; ``epochfs index`` lists once and
``--index`` sidecars list nothing; S3 Inventory CSV manifests are indexes too; hostile keys in an
index are skipped and counted like listed ones."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import pytest
from common import wait_until
from sampler_helpers import running_sampler, s3_env

from epochfs.benchmarks.synthetic_s3 import Dataset, SyntheticS3
from epochfs.sidecar.catalog import build_catalog
from epochfs.sidecar.cli import main
from epochfs.sidecar.listing.indexfile import FORMAT_VERSION, IndexSource, object_record
from epochfs.sidecar.listing.inventory import InventorySource
from epochfs.sidecar.remote import RemoteError, RemoteObject
from epochfs.sidecar.store import Store


def catalog_keys(store: Store) -> set[str]:
    return {c.key for _, c in store.candidates(after_rank=None, limit=10**9)}


def test_a_restarted_sampler_fetches_from_its_catalog_without_listing(tmp_path: Path) -> None:
    data = Dataset(2500, 1024, classes=5, prefix="train/")
    with SyntheticS3(data, list_latency=0) as s3:
        cache = tmp_path / "cache"
        args = ("--endpoint-url", s3.endpoint, "--capacity", "1Mi", "--cut-interval", "0")
        with running_sampler(cache, s3.url, *args, env=s3_env(s3.endpoint)) as sp:
            wait_until(lambda: sp.stats()["catalog_objects"] == 2500, what="the listing")
        first = s3.stats.snapshot()
        assert first["list_pages"] > 5  # a probe, the folders, then the spans of five classes
        s3.stats.reset()
        with running_sampler(cache, s3.url, *args, env=s3_env(s3.endpoint)) as sp:
            wait_until(lambda: s3.stats.snapshot()["gets"] >= 50, what="fetches after the restart")
        assert s3.stats.snapshot()["list_pages"] == 0


def test_epochfs_index_once_then_sidecars_list_nothing(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    data = Dataset(2100, 512, classes=3, prefix="train/")
    for name, value in s3_env("").items():
        monkeypatch.setenv(name, value)
    with SyntheticS3(data, list_latency=0) as s3:
        out = tmp_path / "keys.jsonl.gz"
        assert main(["index", s3.url, "--endpoint-url", s3.endpoint, "--out", f"file://{out}"]) == 0
        lines = gzip.decompress(out.read_bytes()).splitlines()
        assert json.loads(lines[0])["epochfs_index"] == FORMAT_VERSION
        assert json.loads(lines[-1]) == {"end": True, "count": 2100}
        keys = [json.loads(x)["k"] for x in lines[1:-1]]
        assert sorted(keys) == sorted(data.key(i)[len("train/"):] for i in range(2100))  # once each
        # Shuffled (every prefix a uniform sample): the first 300 records hold each class about
        # equally (100 each; a key-ordered index's first 300 were one class).
        assert json.loads(lines[0])["order"] == "shuffled" and not json.loads(lines[0])["sorted"]
        first = Counter(k.split("/")[0] for k in keys[:300])
        assert len(first) == 3 and min(first.values()) >= 60, first
        s3.stats.reset()
        cache = tmp_path / "cache"
        with running_sampler(cache, s3.url, "--endpoint-url", s3.endpoint, "--capacity", "64Mi",
                             "--index", f"file://{out}", env=s3_env(s3.endpoint)) as sp:
            wait_until(lambda: sp.stats()["samples"] == 2100, what="every key fetched")
        stats = s3.stats.snapshot()
    assert stats["list_pages"] == 0 and stats["gets"] == 2100


def test_epochfs_index_reads_throttled_pages_again_and_writes_every_key_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SlowDown while ``epochfs index`` finds the folders, and one on a page of a span: each is
    asked again (the discovery page in place, the span from its last written page) and the index
    is whole, every key once; it failed with exit 2 before."""
    data = Dataset(2100, 512, classes=3, prefix="train/")
    for name, value in s3_env("").items():
        monkeypatch.setenv(name, value)
    with SyntheticS3(data, list_latency=0) as s3:
        # The remote is s3://bench/train: 1 the probe, 2 the folders, 3-5 a look into each class
        # (files: no folders inside), 6-8 a page per class.
        s3.server.throttle_pages = {2, 7}
        out = tmp_path / "keys.jsonl.gz"
        assert main(["index", s3.url, "--endpoint-url", s3.endpoint, "--out", f"file://{out}"]) == 0
        lines = gzip.decompress(out.read_bytes()).splitlines()
        assert json.loads(lines[-1]) == {"end": True, "count": 2100}
        keys = [json.loads(x)["k"] for x in lines[1:-1]]
        assert sorted(keys) == sorted(data.key(i)[len("train/"):] for i in range(2100))
        assert s3.stats.snapshot()["list_pages"] == 8 + 2  # the two throttled pages asked again


def write_index(path: Path, objects: list[RemoteObject], *, trailer: bool = True) -> str:
    body = json.dumps({"epochfs_index": FORMAT_VERSION, "sorted": False}).encode() + b"\n"
    body += b"".join(object_record(o) for o in objects)
    if trailer:
        body += json.dumps({"end": True, "count": len(objects)}).encode() + b"\n"
    path.write_bytes(gzip.compress(body))
    return f"file://{path}"


def test_hostile_keys_in_an_index_are_skipped_and_counted(tmp_path: Path) -> None:
    objects = [RemoteObject("ok/a.bin", 3, "v"), RemoteObject("../escape", 3, "v"),
               RemoteObject("ok/\x00nul", 3, "v"), RemoteObject(b"ok/\xff\xfe", 3, "v"),
               RemoteObject("ok/b.bin", 3, "v")]
    url = write_index(tmp_path / "i.gz", objects)
    store = Store(tmp_path / "c", create=True)
    report = build_catalog(store, None, seed=0, shard_index=0, shard_count=1, object_limit=100,
                           source=IndexSource(url))
    assert report.complete and report.hostile == 3
    assert catalog_keys(store) == {"ok/a.bin", "ok/b.bin"}
    assert store.stats().skipped_total == 3
    store.close()


def test_a_truncated_index_never_finishes_a_listing(tmp_path: Path) -> None:
    url = write_index(tmp_path / "i.gz", [RemoteObject(f"k{i}", 1, "v") for i in range(5)], trailer=False)
    store = Store(tmp_path / "c", create=True)
    with pytest.raises(RemoteError, match="truncated"):
        build_catalog(store, None, seed=0, shard_index=0, shard_count=1, object_limit=100,
                      source=IndexSource(url))
    assert store.listings().state().complete is None
    store.close()


def inventory(root: Path, rows: list[tuple[str, int, str]], *, fmt: str = "CSV") -> str:
    """An S3 Inventory as Amazon lays it out in the destination bucket (two data files)."""
    data_dir = root / "src" / "cfg" / "data"
    data_dir.mkdir(parents=True)
    files = []
    for n, chunk in enumerate((rows[: len(rows) // 2], rows[len(rows) // 2:])):
        text = io.StringIO()
        w = csv.writer(text)
        for key, size, etag in chunk:
            w.writerow(["src", quote(key, safe="/"), str(size), "2026-01-01T00:00:00.000Z", etag])
        (data_dir / f"{n}.csv.gz").write_bytes(gzip.compress(text.getvalue().encode()))
        files.append({"key": f"src/cfg/data/{n}.csv.gz", "size": 1, "MD5checksum": "x"})
    manifest_dir = root / "src" / "cfg" / "2026-01-01T00-00Z"
    manifest_dir.mkdir(parents=True)
    manifest = {"sourceBucket": "src", "destinationBucket": "arn:aws:s3:::dest", "fileFormat": fmt,
                "fileSchema": "Bucket, Key, Size, LastModifiedDate, ETag", "files": files}
    (manifest_dir / "manifest.json").write_text(json.dumps(manifest))
    return f"file://{manifest_dir / 'manifest.json'}"


def test_an_s3_inventory_csv_manifest_is_an_index(tmp_path: Path) -> None:
    rows = [(f"train/c{i % 3}/{i:03d} x.bin", 10 + i, f"etag{i}") for i in range(40)]
    rows += [("other/zzz.bin", 1, "e"), ("train/../up", 1, "e")]
    url = inventory(tmp_path / "inv", rows)
    store = Store(tmp_path / "c", create=True)
    source = InventorySource(url, remote_url="s3://src/train")
    assert len(source.spans()) == 2
    report = build_catalog(store, None, seed=0, shard_index=0, shard_count=1, object_limit=10**6,
                           source=source)
    assert report.complete and report.hostile == 1
    assert catalog_keys(store) == {k[len("train/"):] for k, _, _ in rows[:40]}
    store.close()
