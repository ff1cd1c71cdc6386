"""The synthetic S3 endpoint (benchmarks/synthetic_s3.py) answers botocore as S3 would: listing
pages of 1,000 keys in byte order, prefixes, delimiters, start-after, continuation tokens, ranged
GETs with md5 ETags, counters in process and over HTTP; and the real ``epochfs sample`` fetches a
verified cache from it. The scale benchmark's numbers are only as good as this server's answers."""

from __future__ import annotations

import hashlib
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from sampler_helpers import index_rows, running_sampler, s3_env, verify_cache

from epochfs.benchmarks.synthetic_s3 import MAX_KEYS, Dataset, SyntheticS3


@pytest.fixture
def classes() -> Iterator[SyntheticS3]:
    """2,500 keys in 7 class folders under ``train/`` (uneven classes: 2,500 = 7 x 357 + 1)."""
    with SyntheticS3(Dataset(2500, 1000, classes=7, prefix="train/"), list_latency=0) as s3:
        yield s3


def client(s3: SyntheticS3):
    import boto3

    return boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id="testing",
                        aws_secret_access_key="testing", region_name="us-east-1")


def all_keys(s3: SyntheticS3, **kwargs: str) -> tuple[list[str], int]:
    keys: list[str] = []
    pages = 0
    for page in client(s3).get_paginator("list_objects_v2").paginate(Bucket="bench", **kwargs):
        pages += 1
        keys += [o["Key"] for o in page.get("Contents", ())]
    return keys, pages


def test_a_listing_is_every_key_once_in_byte_order_in_pages_of_1000(classes: SyntheticS3) -> None:
    keys, pages = all_keys(classes, Prefix="train/")
    assert len(keys) == 2500 and len(set(keys)) == 2500
    assert keys == sorted(keys, key=lambda k: k.encode())
    assert pages == 3 and classes.stats.list_pages == 3  # 1000 + 1000 + 500
    # One class per folder: the first page holds the first classes only (what sampling while
    # listing must not be fooled by).
    first = client(classes).list_objects_v2(Bucket="bench", Prefix="train/")
    assert len(first["Contents"]) == MAX_KEYS
    assert {o["Key"].split("/")[1] for o in first["Contents"]} == {"class-0000", "class-0001", "class-0002"}
    # Class c holds the samples i with i % 7 == c; the uneven one is class 0.
    per_class = [sum(1 for k in keys if k.startswith(f"train/class-{c:04d}/")) for c in range(7)]
    assert per_class == [358, *[357] * 6]
    assert all(int(k[-12:-4]) % 7 == int(k[12:16]) for k in keys)


def test_a_delimiter_gives_the_class_folders_and_pages_over_them(classes: SyntheticS3) -> None:
    c = client(classes)
    page = c.list_objects_v2(Bucket="bench", Prefix="train/", Delimiter="/")
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == [f"train/class-{i:04d}/" for i in range(7)]
    assert "Contents" not in page and page["IsTruncated"] is False
    # Common prefixes count against max-keys and the token resumes after the last one.
    first = c.list_objects_v2(Bucket="bench", Prefix="train/", Delimiter="/", MaxKeys=3)
    assert [p["Prefix"] for p in first["CommonPrefixes"]] == [f"train/class-{i:04d}/" for i in range(3)]
    rest = c.list_objects_v2(Bucket="bench", Prefix="train/", Delimiter="/", MaxKeys=1000,
                             ContinuationToken=first["NextContinuationToken"])
    assert [p["Prefix"] for p in rest["CommonPrefixes"]] == [f"train/class-{i:04d}/" for i in range(3, 7)]
    # Inside one folder, keys; a prefix nothing has lists nothing.
    inside = c.list_objects_v2(Bucket="bench", Prefix="train/class-0003/", Delimiter="/")
    assert inside["KeyCount"] == 357 and "CommonPrefixes" not in inside
    assert c.list_objects_v2(Bucket="bench", Prefix="nothing/")["KeyCount"] == 0


def test_start_after_lists_only_later_keys(classes: SyntheticS3) -> None:
    keys, _ = all_keys(classes)
    later, pages = all_keys(classes, StartAfter=keys[1234])
    assert later == keys[1235:] and pages == 2
    # A start-after that is no key resumes at the next key; one before the prefix changes nothing.
    between, _ = all_keys(classes, StartAfter=keys[10] + "a")
    assert between == keys[11:]
    folder, _ = all_keys(classes, Prefix="train/class-0004/", StartAfter="train/class-0001/")
    assert folder == [k for k in keys if k.startswith("train/class-0004/")]


def test_objects_have_md5_etags_ranges_and_heads(classes: SyntheticS3) -> None:
    c = client(classes)
    keys = [o["Key"] for o in c.list_objects_v2(Bucket="bench", MaxKeys=5)["Contents"]]
    listed = {o["Key"]: o["ETag"] for o in c.list_objects_v2(Bucket="bench", MaxKeys=5)["Contents"]}
    bodies = [c.get_object(Bucket="bench", Key=k)["Body"].read() for k in keys]
    assert len({hashlib.md5(b).hexdigest() for b in bodies}) == 5  # every object differs
    for key, body in zip(keys, bodies, strict=True):
        assert len(body) == 1000 and body == classes.data.body(key)
        assert listed[key] == f'"{hashlib.md5(body).hexdigest()}"'
    got = c.get_object(Bucket="bench", Key=keys[0], Range="bytes=10-19")
    assert got["ContentRange"] == "bytes 10-19/1000" and got["Body"].read() == bodies[0][10:20]
    tail = c.get_object(Bucket="bench", Key=keys[0], Range="bytes=-16")
    assert tail["Body"].read() == bodies[0][-16:]
    rest = c.get_object(Bucket="bench", Key=keys[0], Range="bytes=990-")
    assert rest["Body"].read() == bodies[0][990:]
    head = c.head_object(Bucket="bench", Key=keys[1])
    assert head["ContentLength"] == 1000 and head["ETag"] == listed[keys[1]]
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError, match="NoSuchKey"):
        c.get_object(Bucket="bench", Key="train/class-0000/nope.bin")
    with pytest.raises(ClientError, match="InvalidRange"):
        c.get_object(Bucket="bench", Key=keys[0], Range="bytes=5000-")


def test_counters_in_process_and_over_http(classes: SyntheticS3) -> None:
    c = client(classes)
    c.list_objects_v2(Bucket="bench")
    key = classes.data.key(42)
    c.get_object(Bucket="bench", Key=key)["Body"].read()
    c.get_object(Bucket="bench", Key=key, Range="bytes=0-9")["Body"].read()
    c.head_object(Bucket="bench", Key=key)
    with urllib.request.urlopen(classes.endpoint + "/_stats", timeout=10) as r:
        over_http = json.load(r)
    assert over_http == classes.stats.snapshot()
    counts = (over_http["list_pages"], over_http["gets"], over_http["range_gets"], over_http["heads"])
    assert counts == (1, 2, 1, 1)
    urllib.request.urlopen(urllib.request.Request(classes.endpoint + "/_stats/reset", method="POST"),
                           timeout=10).read()
    assert classes.stats.snapshot()["gets"] == 0


def test_ten_million_keys_cost_nothing_to_serve() -> None:
    """The last page of a 10M-key bucket is found by bisection, not by walking 10M keys."""
    data = Dataset(10_000_000, 16, classes=1000)
    with SyntheticS3(data, list_latency=0) as s3:
        c = client(s3)
        last = data.key(data.count - 1)
        page = c.list_objects_v2(Bucket="bench", StartAfter=data.key(data.count - 3))
        assert [o["Key"] for o in page["Contents"]] == [data.key(data.count - 2), last]
        assert last == "class-0999/sample-09999999.bin"
        assert c.get_object(Bucket="bench", Key=last)["Body"].read() == data.body(last)


def test_the_real_sampler_fetches_a_verified_cache_from_it(tmp_path: Path) -> None:
    data = Dataset(300, 4096, classes=5, prefix="train/")
    with SyntheticS3(data) as s3:
        cache = tmp_path / "cache"
        with running_sampler(cache, s3.url, "--endpoint-url", s3.endpoint, "--capacity", "64Mi",
                             env=s3_env(s3.endpoint)) as sp:
            wait_until(lambda: sp.stats()["samples"] == 300, what="every object fetched")
        stats = s3.stats.snapshot()
    source = {k[len("train/"):]: data.body(k) for k in (data.key(i) for i in range(data.count))}
    assert verify_cache(cache, source) == 300
    # Verified against the listed md5 ETag, fetched once each on the presigned fast path.
    assert index_rows(cache, "SELECT DISTINCT verified FROM samples") == [("etag-md5",)]
    assert stats["gets"] == 300 and stats["list_pages"] >= 1 and stats["errors"] == 0
