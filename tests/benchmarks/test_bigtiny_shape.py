"""The fairness benchmark's ``bigtiny`` key space (benchmarks/_keyspaces.py): one folder holding
most keys between many folders of three, the layout whose big folder an epoch missed while the
listing's first round had not reached it (docs/sampler.md, "A fair sample while the listing runs",
point 5). Served by the synthetic endpoint as S3 lists it, each folder a prefix of its own."""

from __future__ import annotations

import itertools

from epochfs.benchmarks._keyspaces import SHAPES, TINY_FILES, Shape, build, parse_spec, with_defaults
from epochfs.benchmarks.synthetic_s3 import SyntheticS3


def test_one_big_folder_between_the_tiny_ones() -> None:
    space = build("bigtiny", 10_900, folders=300)
    names, bounds = space.strata()
    sizes = dict(zip(names, (b - a for a, b in itertools.pairwise(bounds)), strict=True))
    assert len(names) == 301 and sizes.pop("m-big/") == 10_000
    assert set(sizes.values()) == {TINY_FILES}
    assert names[:150] == [f"a-tiny-{i:04d}/" for i in range(150)]
    assert names[151:] == [f"z-tiny-{i:04d}/" for i in range(150, 300)]
    assert space.key(450) == "m-big/s-000000.bin" and space.position("m-big/s-009999.bin") == 10_449


def test_the_default_run_covers_it_and_small_key_counts_keep_a_big_folder() -> None:
    assert "bigtiny" in SHAPES
    assert with_defaults(Shape("bigtiny", 10_900)).spec() == "bigtiny:keys=10900,folders=300,seed=0,size=4096"
    assert parse_spec("bigtiny:keys=2000,folders=300") == Shape("bigtiny", 2000, folders=300)
    small = build("bigtiny", 10, folders=300)  # too few keys for 300 folders: 3 of them, 1 key left
    assert [f.files for f in small.folders] == [3, 1, 3, 3] and small.count == 10


def test_the_endpoint_lists_each_folder_as_a_prefix() -> None:
    import boto3

    space = build("bigtiny", 1_000, folders=20)
    with SyntheticS3(space) as s3:
        client = boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")
        page = client.list_objects_v2(Bucket="bench", Delimiter="/")
        prefixes = [p["Prefix"] for p in page["CommonPrefixes"]]
        big = client.list_objects_v2(Bucket="bench", Prefix="m-big/", MaxKeys=1000)
    assert len(prefixes) == 21 and prefixes[10] == "m-big/"
    assert big["KeyCount"] == 1_000 - 20 * TINY_FILES and not big["IsTruncated"]
