"""S3 Inventory Parquet manifests as an index (sidecar/listing/parquet.py): a real ``epochfs
sample`` against moto reads the inventory from the destination bucket in ranged GETs and lists
nothing; keys are taken as written (not URL-decoded, unlike CSV); old versions and delete markers
are passed over; hostile keys are skipped and counted. Without pyarrow the sampler stops at
start with a line naming the extra."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
from common import S3Server, put_objects, wait_until
from faultproxy import FaultProxy
from sampler_helpers import EPOCHFS, index_rows, running_sampler, s3_env

from epochfs.sidecar.listing.inventory import InventorySource

MANIFEST = "src/cfg/2026-01-01T00-00Z/manifest.json"
# Amazon's Parquet schema for an inventory of all versions (the fields used, in its order).
SCHEMA = ("message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); optional "
          "binary version_id (UTF8); optional boolean is_latest; optional boolean is_delete_marker; "
          "optional int64 size; optional binary e_tag (UTF8); }")
# Put first on sys.path (PYTHONPATH), this makes pyarrow look absent to the process.
HIDE = """
import sys

class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "pyarrow":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Hide())
"""

Row = tuple[str | bytes, bool, bool]  # key, is_latest, is_delete_marker


def body(key: str | bytes) -> bytes:
    return (key.encode() if isinstance(key, str) else key) * 10


def parquet_file(rows: list[Row], *, key_type: pa.DataType) -> bytes:
    """A data file as Amazon writes it (the sizes and ETags of :func:`body`); small row groups,
    so that batches span several."""
    table = pa.table({
        "bucket": pa.array(["src"] * len(rows)),
        "key": pa.array([k for k, _, _ in rows], key_type),
        "version_id": pa.array([f"v{i}" for i in range(len(rows))]),
        "is_latest": pa.array([latest for _, latest, _ in rows], pa.bool_()),
        "is_delete_marker": pa.array([marker for _, _, marker in rows], pa.bool_()),
        "size": pa.array([None if marker else len(body(k)) for k, _, marker in rows], pa.int64()),
        "e_tag": pa.array([None if marker else hashlib.md5(body(k)).hexdigest() for k, _, marker in rows]),
    })
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=7)
    return sink.getvalue().to_pybytes()


def inventory_objects(files: list[bytes]) -> dict[str, bytes]:
    """The destination bucket's objects: the data files and the manifest naming them."""
    objects = {f"src/cfg/data/{n}.parquet": body for n, body in enumerate(files)}
    manifest = {"sourceBucket": "src", "destinationBucket": "arn:aws:s3:::dest", "version": "2016-11-30",
                "fileFormat": "Parquet", "fileSchema": SCHEMA,
                "files": [{"key": k, "size": len(b), "MD5checksum": "x"} for k, b in objects.items()]}
    objects[MANIFEST] = json.dumps(manifest).encode()
    return objects


def counting(proxy: FaultProxy) -> list[tuple[str, str, str | None]]:
    """Every request through ``proxy`` as (method, path with query, Range header)."""
    seen: list[tuple[str, str, str | None]] = []
    lock = threading.Lock()
    base = proxy.server.RequestHandlerClass

    class Counting(base):  # type: ignore[valid-type, misc]
        def do_GET(self) -> None:
            with lock:
                seen.append(("GET", self.path, self.headers.get("Range")))
            super().do_GET()

        def do_HEAD(self) -> None:
            with lock:
                seen.append(("HEAD", self.path, None))
            super().do_HEAD()

    proxy.server.RequestHandlerClass = Counting
    return seen


def is_listing(method: str, path: str) -> bool:
    parts = urlsplit(path)
    return method == "GET" and "/" not in parts.path.strip("/") and "location" not in parts.query


def test_a_parquet_inventory_is_an_index_read_in_ranges_without_listing(s3: S3Server,
                                                                       tmp_path: Path) -> None:
    current = ["train/c0/a b.bin", "train/c0/Ünïcode ✓.bin", "train/c1/50%25 off+more.bin",
               *[f"train/c{i % 3}/{i:03d}.bin" for i in range(30)]]
    rows: list[Row] = [(k, True, False) for k in current]
    rows += [("train/old/gone.bin", False, False),  # an older version of a key deleted since
             ("train/deleted.bin", True, True), ("train/deleted.bin", False, False),  # its marker
             ("other/x.bin", True, False),  # outside the remote's prefix: passed over
             ("train/../up", True, False), ("train/a\x00b", True, False)]  # hostile
    half = len(rows) // 2
    files = [parquet_file(rows[:half], key_type=pa.string()),
             # binary without the UTF8 annotation: a key that is not UTF-8 is a key too (hostile)
             parquet_file([*rows[half:], (b"train/\xff\xfe.bin", True, False)], key_type=pa.binary())]
    put_objects(s3, "dest", inventory_objects(files))
    # The source bucket holds the current keys and one the inventory does not name: a listing
    # would find it.
    put_objects(s3, "src", {k: body(k) for k in [*current, "train/not-in-inventory.bin"]})
    cache = tmp_path / "cache"
    with FaultProxy(upstream=s3.endpoint) as proxy:
        seen = counting(proxy)
        with running_sampler(cache, "s3://src/train", "--endpoint-url", proxy.endpoint, "--capacity", "64Mi",
                             "--index", f"s3://dest/{MANIFEST}", env=s3_env(s3.endpoint)) as sp:
            wait_until(lambda: sp.stats()["samples"] == len(current), what="every current key fetched")
            wait_until(lambda: sp.stats()["skipped_total"] >= 3, what="the hostile keys counted")
            stats = sp.stats()
    assert [r for r in seen if is_listing(r[0], r[1])] == []
    data_gets = [r for r in seen if r[0] == "GET" and ".parquet" in r[1]]
    assert data_gets and all(r[2] and r[2].startswith("bytes=") for r in data_gets)  # seeks, not a stream
    assert stats["skipped_total"] == 3
    expected = {k[len("train/"):] for k in current}
    assert {k for (k,) in index_rows(cache, "SELECT key FROM catalog")} == expected
    assert {k for (k,) in index_rows(cache, "SELECT key FROM samples")} == expected  # fetched by name


def test_a_parquet_inventory_without_pyarrow_names_the_extra(tmp_path: Path) -> None:
    root = tmp_path / "inv"
    files = [parquet_file([("train/a.bin", True, False)], key_type=pa.string())]
    for key, body in inventory_objects(files).items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(body)
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text(HIDE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path / "hide"), env.get("PYTHONPATH")]))
    check = subprocess.run([sys.executable, "-c", "import pyarrow"], env=env, capture_output=True)
    assert check.returncode != 0  # the hider works
    (tmp_path / "remote").mkdir()
    result = subprocess.run(
        [EPOCHFS, "sample", "--remote", f"file://{tmp_path / 'remote'}", "--cache", str(tmp_path / "cache"),
         "--index", f"file://{root / MANIFEST}"],
        env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "pip install 'epochfs[parquet]'" in result.stderr.splitlines()[-1]
    assert "Traceback" not in result.stderr


def test_a_parquet_data_file_resumes_at_the_row_it_stopped(tmp_path: Path) -> None:
    """A resume point is rows consumed: row groups before it are skipped, then rows within one."""
    root = tmp_path / "inv"
    rows: list[Row] = [(f"train/{i:02d}.bin", True, False) for i in range(25)]  # row groups of 7
    for key, data in inventory_objects([parquet_file(rows, key_type=pa.string())]).items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    source = InventorySource(f"file://{root / MANIFEST}", remote_url="s3://src/train")
    [span] = source.spans()
    for after in (0, 6, 7, 10, 21, 24, 25):
        pages = list(source.pages(span, str(after)))
        assert [o.key for p in pages for o in p.objects] == [f"{i:02d}.bin" for i in range(after, 25)]
        assert pages[-1].after == "25" and pages[-1].done
