"""The shaped key spaces of the synthetic S3 endpoint (benchmarks/_keyspaces.py): every shape's keys
sorted by UTF-8 bytes, each position and key mapped both ways (1M keys too), strata as runs of
positions, and the endpoint listing them as S3 would (prefixes, delimiters across nested folders,
start-after, continuation tokens). The fairness benchmark's numbers are only as good as these."""

from __future__ import annotations

import hashlib
import itertools
import subprocess
import sys

import pytest

from epochfs.benchmarks._keyspaces import SHAPES, KeySpace, Shape, apportion, build, parse_spec, with_defaults
from epochfs.benchmarks.synthetic_s3 import SyntheticS3


def client(s3: SyntheticS3):
    import boto3

    return boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id="testing",
                        aws_secret_access_key="testing", region_name="us-east-1")


def listing(s3: SyntheticS3, **kwargs) -> tuple[list[str], list[str], int]:
    keys: list[str] = []
    prefixes: list[str] = []
    pages = 0
    for page in client(s3).get_paginator("list_objects_v2").paginate(Bucket="bench", **kwargs):
        pages += 1
        keys += [o["Key"] for o in page.get("Contents", ())]
        prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", ())]
    return keys, prefixes, pages


@pytest.mark.parametrize("name", SHAPES)
def test_every_shape_is_sorted_by_bytes_and_maps_positions_both_ways(name: str) -> None:
    space = build(name, 3000)
    keys = [space.key(i) for i in range(space.count)]
    assert space.count == 3000 and len(set(keys)) == 3000
    assert keys == sorted(keys, key=lambda k: k.encode())
    assert list(space.keys()[:5]) == keys[:5] and space.keys()[-1] == keys[-1]
    assert all(space.position(k) == i for i, k in enumerate(keys))
    last = keys[-1]
    cut = last.rfind("/") + 1
    f = space.folders[-1]
    past = f"{f.path}{f.stem}-{f.files:0{space.width}d}{f.ext}"  # one past the folder's last file
    for junk in ("nope", last + "x", "x" + last, last[:cut] + "sample-99999999.bin", last[:-4] + ".zzz",
                 past, last[:cut] + last[cut:].replace("-", "+"), "zzz/" + last[cut:]):
        assert space.position(junk) is None, junk
    with pytest.raises(IndexError):
        space.key(3000)
    # Strata: runs of positions covering the key space; the leaf level refines the top level.
    for level in ("top", "leaf"):
        names, bounds = space.strata(level)
        assert bounds[0] == 0 and bounds[-1] == 3000 and len(names) == len(bounds) - 1
        assert all(a < b for a, b in itertools.pairwise(bounds))
        assert all(space.stratum(keys[bounds[s]], level) == names[s] for s in range(len(names)))
    assert set(space.strata("top")[1]) <= set(space.strata("leaf")[1])


def test_the_shapes_have_their_shapes() -> None:
    equal = build("equal", 10_050)
    sizes = [f.files for f in equal.folders]
    assert len(sizes) == 100 and set(sizes) == {100, 101} and equal.key(0) == "class-0000/sample-000000.bin"

    skewed = build("skewed", 100_000)
    names, bounds = skewed.strata()
    sizes = [b - a for a, b in itertools.pairwise(bounds)]
    assert len(sizes) == 100 and max(sizes) > 50 * min(sizes)
    biggest = sorted(range(100), key=sizes.__getitem__)[-5:]  # the five largest folders
    assert 0 not in biggest and 99 not in biggest and max(biggest) - min(biggest) > 30, biggest
    assert sorted(sizes) != sizes and build("skewed", 100_000, seed=1).strata()[1] != bounds

    nested = build("nested", 100_000)
    assert nested.key(0) == "class-0000/video-0000/frame-000000.bin"
    top, leaf = nested.strata("top"), nested.strata("leaf")
    assert len(top[0]) == 10 and 10 < len(leaf[0]) < 400
    per_class = [sum(1 for f in nested.folders if f.top == c) for c in top[0]]
    assert min(per_class) >= 1 and len(set(per_class)) > 3  # a varied number of sub-folders
    leaf_sizes = [f.files for f in nested.folders]
    assert max(leaf_sizes) > 10 * min(leaf_sizes)

    many = build("many", 50_000)
    assert len(many.strata()[0]) == 5000 and {f.files for f in many.folders} == {10}
    assert len(build("many", 2000).folders) == 2000  # never an empty folder

    flat = build("flat", 1234)
    assert "/" not in flat.key(5) and flat.strata()[0][0] == "decile-0"
    assert flat.strata()[1] == [1234 * d // 10 for d in range(11)]

    mixed = build("mixed", 110_000)
    names, bounds = mixed.strata()
    assert names == ["arrays/", *[f"train/class-{k}/" for k in range(5)]]
    assert [b - a for a, b in itertools.pairwise(bounds)] == [10_000] + [20_000] * 5
    assert mixed.key(0) == "arrays/array-000000.npy" and mixed.key(10_000) == "train/class-0/img-000000.png"


def test_a_million_keys_cost_no_list_of_keys() -> None:
    for name in SHAPES:
        space = build(name, 1_000_000)
        assert len(space.folders) <= 5000
        for pos in (0, 1, 499_999, 999_999):
            assert space.position(space.key(pos)) == pos


def test_specs_round_trip_and_bad_ones_are_refused() -> None:
    shape = Shape("nested", 5000, folders=4, skew=0.5, subfolders=3, seed=7, size=100)
    assert parse_spec(shape.spec()) == shape
    assert parse_spec("flat:keys=10") == Shape("flat", 10)
    assert with_defaults(Shape("skewed", 10)).spec() == "skewed:keys=10,folders=100,skew=1.1,seed=0,size=4096"
    for bad in ("round:keys=10", "flat", "flat:keys=0", "flat:keys=10,colour=red", "equal:keys=x"):
        with pytest.raises(ValueError):
            parse_spec(bad)
    assert apportion(10, [1, 1, 8]) == [2, 2, 6] and sum(apportion(1000, [0.3, 2, 5])) == 1000
    with pytest.raises(ValueError):
        apportion(2, [1, 1, 1])


def test_the_endpoint_lists_nested_folders_as_s3_does() -> None:
    space = build("nested", 4000, folders=3, subfolders=4, size=256)
    with SyntheticS3(space, list_latency=0) as s3:
        keys, prefixes, pages = listing(s3)
        assert keys == [space.key(i) for i in range(4000)] and prefixes == [] and pages == 4
        # The delimiter: the class folders at the top, their sub-folders one level down.
        _, classes, _ = listing(s3, Delimiter="/")
        assert classes == ["class-0000/", "class-0001/", "class-0002/"]
        _, videos, _ = listing(s3, Prefix="class-0001/", Delimiter="/")
        assert videos == sorted({f.path for f in space.folders if f.top == "class-0001/"})
        leaf = videos[-1]
        inside, none, _ = listing(s3, Prefix=leaf, Delimiter="/")
        assert none == [] and inside == [k for k in keys if k.startswith(leaf)]
        # Pages of 7 across folder boundaries, resumed by continuation tokens; start-after.
        small, _, small_pages = listing(s3, Prefix="class-0002/", PaginationConfig={"PageSize": 7})
        expected = [k for k in keys if k.startswith("class-0002/")]
        assert small == expected and small_pages == -(-len(expected) // 7)
        later, _, _ = listing(s3, StartAfter=keys[1234])
        assert later == keys[1235:]
        # Objects: the bodies and md5 ETags of the plain bucket.
        got = client(s3).get_object(Bucket="bench", Key=keys[17])
        body = got["Body"].read()
        assert body == space.body(keys[17]) and len(body) == 256
        assert got["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'


def test_the_endpoint_lists_mixed_top_folders() -> None:
    space = KeySpace(Shape("mixed", 5500, size=64))
    with SyntheticS3(space, list_latency=0) as s3:
        _, top, _ = listing(s3, Delimiter="/")
        assert top == ["arrays/", "train/"]
        _, classes, _ = listing(s3, Prefix="train/", Delimiter="/")
        assert classes == [f"train/class-{k}/" for k in range(5)]
        arrays, _, _ = listing(s3, Prefix="arrays/")
        assert len(arrays) == 500 and all(k.endswith(".npy") for k in arrays)


def test_the_endpoint_process_takes_a_keyspace_spec() -> None:
    done = subprocess.run([sys.executable, "-P", "-m", "epochfs.benchmarks.synthetic_s3", "--keyspace",
                           "round:keys=5"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--keyspace: unknown key space shape 'round'" in done.stderr
