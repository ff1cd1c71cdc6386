"""Records of an ``--index`` file or of an S3 Inventory data file that cannot be read (not JSON,
not an object, no key, a key that is not a string, no size, a size that is not a whole number of
bytes) are skipped, counted and logged with the index's URL and the line (or row): the listing
goes on and completes with the good records. A raw Python error instead failed the listing,
which the listing beside the sampler tried again for ever, never complete.

An epochfs index whose header names other keys before ``epochfs_index`` (written with
``sort_keys``) is still an index on an ``http(s)://`` remote, not a plain key list."""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from epochfs.sidecar.catalog import build_catalog
from epochfs.sidecar.listing.indexfile import FORMAT_VERSION, IndexSource, is_index, listing_source
from epochfs.sidecar.listing.inventory import InventorySource
from epochfs.sidecar.remote import RemoteError, open_remote
from epochfs.sidecar.store import Store

HEADER = json.dumps({"epochfs_index": FORMAT_VERSION, "sorted": False, "order": "shuffled"})

BAD = [  # (the record's line, what the warning says of it)
    ('{"k": "bad/json.bin", "s": 3, BROKEN', "not JSON"),
    ("42", "not a JSON object"),
    ("[1, 2, 3]", "not a JSON object"),
    ('{"s": 4, "v": ""}', 'no key ("k" or "kb")'),
    ('{"k": 12345, "s": 4, "v": ""}', '"k" is not a string'),
    ('{"kb": "not base64!", "s": 4, "v": ""}', '"kb" is not base64'),
    ('{"k": "bad/nosize.bin", "v": ""}', 'no size ("s")'),
    ('{"k": "bad/strsize.bin", "s": "abc", "v": ""}', '"s" is not a whole number of bytes'),
    ('{"k": "bad/negative.bin", "s": -100000, "v": ""}', '"s" is not a whole number of bytes'),
    ('{"k": "bad/float.bin", "s": 3.0, "v": ""}', '"s" is not a whole number of bytes'),
    ('{"k": "bad/bool.bin", "s": true, "v": ""}', '"s" is not a whole number of bytes'),
    ('{"k": "bad/version.bin", "s": 3, "v": 7}', '"v" is not a string'),
]


def good(i: int) -> str:
    return json.dumps({"k": f"ok/{i:02d}.bin", "s": i, "v": f"v{i}"})


def index_lines(*, blank: bool = True) -> tuple[list[str], dict[int, str]]:
    """A header, 24 good records with a bad one after every other, a blank line, the trailer
    counting every record (bad ones too: they are records the writer wrote); and the file line
    number of each bad record with its reason."""
    lines, bad_at = [HEADER], {}
    for i in range(24):
        lines.append(good(i))
        if i % 2 == 1:
            line, why = BAD[i // 2]
            lines.append(line)
            bad_at[len(lines)] = why
    if blank:
        lines.insert(5, "")  # not a record: passed over, not counted
        bad_at = {n + 1 if n >= 6 else n: why for n, why in bad_at.items()}
    records = sum(1 for line in lines[1:] if line.strip())
    lines.append(json.dumps({"end": True, "count": records}))
    return lines, bad_at


def write(path: Path, lines: list[str]) -> str:
    body = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(body) if path.name.endswith(".gz") else body)
    return f"file://{path}"


def read_all(source: IndexSource | InventorySource) -> list[tuple[str, int, str]]:
    return [(str(o.key), o.size, o.version) for span in source.spans()
            for page in source.pages(span, "") for o in page.objects]


@pytest.mark.parametrize("name", ["index.jsonl", "index.jsonl.gz"])
def test_unreadable_index_records_are_skipped_counted_and_named(
    tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    lines, bad_at = index_lines()
    url = write(tmp_path / name, lines)
    source = IndexSource(url)

    with caplog.at_level(logging.WARNING, logger="epochfs.catalog"):
        listed = read_all(source)

    assert listed == [(f"ok/{i:02d}.bin", i, f"v{i}") for i in range(24)]
    assert source.unreadable.count == len(BAD)
    messages = [r.getMessage() for r in caplog.records]
    for number, why in bad_at.items():
        assert any(m.startswith(f"index {url} line {number}: {why}") for m in messages), (number, messages)
    assert messages[-1] == (f"index {url}: {len(BAD)} unreadable record(s) skipped (first: line "
                            f"{min(bad_at)})"), messages


def test_an_index_with_unreadable_records_completes_a_listing(tmp_path: Path) -> None:
    url = write(tmp_path / "index.jsonl", index_lines()[0])
    store = Store(tmp_path / "cache", create=True)
    try:
        report = build_catalog(store, None, seed=0, shard_index=0, shard_count=1, object_limit=100,
                               source=IndexSource(url, page=3))
        assert report.complete
        keys = {c.key: c.size for _, c in store.candidates(after_rank=None, limit=10**9)}
        assert keys == {f"ok/{i:02d}.bin": i for i in range(24)}
        assert store.stats().skipped_total == len(BAD), "the unreadable records are the status's skips"
    finally:
        store.close()


def test_a_resumed_index_skips_what_it_consumed_and_checks_the_trailer(tmp_path: Path) -> None:
    url = write(tmp_path / "index.jsonl", index_lines()[0])
    source = IndexSource(url, page=4)
    pages = list(source.pages(source.spans()[0], ""))
    whole = [str(o.key) for p in pages for o in p.objects]
    for cut in range(1, len(pages)):
        again = IndexSource(url, page=4)
        rest = [str(o.key) for p in again.pages(again.spans()[0], pages[cut - 1].after) for o in p.objects]
        assert [str(o.key) for p in pages[:cut] for o in p.objects] + rest == whole


def test_the_trailer_still_counts_skipped_records(tmp_path: Path) -> None:
    """A bad record is a record the writer wrote: one lost (the trailer counting one more than
    the file holds) is still found, whatever else was skipped."""
    lines, _ = index_lines()
    lines.pop(2)  # a good record gone
    source = IndexSource(write(tmp_path / "index.jsonl", lines))
    with pytest.raises(RemoteError, match=r"the trailer counts 36 record\(s\), the file holds 35"):
        read_all(source)


def test_a_trailer_whose_count_is_not_a_number_is_a_clear_error(tmp_path: Path) -> None:
    lines, _ = index_lines()
    lines[-1] = '{"end": true, "count": "many"}'
    source = IndexSource(write(tmp_path / "index.jsonl", lines))
    with pytest.raises(RemoteError, match="the trailer's count 'many' is not a number"):
        read_all(source)


def test_only_the_first_unreadable_records_are_logged(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    lines = [HEADER] + ["not json"] * 250 + [good(1)]
    lines.append(json.dumps({"end": True, "count": 251}))
    url = write(tmp_path / "index.jsonl", lines)
    source = IndexSource(url)
    with caplog.at_level(logging.WARNING, logger="epochfs.catalog"):
        assert read_all(source) == [("ok/01.bin", 1, "v1")]
    assert source.unreadable.count == 250
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 100 + 2, messages[-3:]  # 100 named, "only counted from now on", the total
    assert messages[-1] == f"index {url}: 250 unreadable record(s) skipped (first: line 2)"


# ---------------------------------------------------------------------------- is_index
def test_a_header_with_sorted_keys_is_an_index(tmp_path: Path) -> None:
    header = json.dumps({"epochfs_index": FORMAT_VERSION, "remote": "s3://b/p", "sorted": False,
                         "order": "shuffled", "created": 1767225600}, sort_keys=True)
    assert not header.startswith('{"epochfs_index"')
    lines = [header, good(1), json.dumps({"end": True, "count": 1})]
    assert is_index(write(tmp_path / "index.jsonl.gz", lines))
    assert is_index(write(tmp_path / "index.jsonl", lines))
    assert not is_index(write(tmp_path / "keys.txt", ['{"epochfs": 1}', "a.bin\t1"]))
    assert not is_index(write(tmp_path / "plain.txt", ["a.bin\t1", "b.bin\t2"]))
    assert not is_index(write(tmp_path / "list.txt", ['["epochfs_index"]']))


def test_an_http_remote_lists_an_index_with_sorted_header_keys(served: tuple[Path, str]) -> None:
    root, base = served
    header = json.dumps({"epochfs_index": FORMAT_VERSION, "created": 5, "order": "shuffled",
                         "sorted": False}, sort_keys=True)
    lines = [header, good(1), good(2), json.dumps({"end": True, "count": 2})]
    (root / "index.jsonl").write_text("\n".join(lines) + "\n")
    url = f"{base}/index.jsonl"
    remote = open_remote(f"{base}/data/", index_url=url)
    try:
        source = listing_source(SimpleNamespace(index_url=url, remote=f"{base}/data/", endpoint_url=None),
                                remote)
        assert isinstance(source, IndexSource)
        assert read_all(source) == [("ok/01.bin", 1, "v1"), ("ok/02.bin", 2, "v2")]
    finally:
        remote.close()


# ---------------------------------------------------------------------------- S3 Inventory (CSV)
def inventory(root: Path, rows: list[list[str]],
              schema: str = "Bucket, Key, Size, ETag, IsLatest, IsDeleteMarker") -> tuple[str, str]:
    """An S3 Inventory in Amazon's layout with one CSV data file: (the manifest's URL, the data
    file's)."""
    data = root / "src" / "cfg" / "data"
    data.mkdir(parents=True)
    text = io.StringIO()
    csv.writer(text).writerows(rows)
    (data / "0.csv.gz").write_bytes(gzip.compress(text.getvalue().encode()))
    at = root / "src" / "cfg" / "2026-01-01T00-00Z"
    at.mkdir(parents=True)
    manifest = {"sourceBucket": "src", "destinationBucket": "arn:aws:s3:::dest", "fileFormat": "CSV",
                "fileSchema": schema, "files": [{"key": "src/cfg/data/0.csv.gz", "size": 1}]}
    (at / "manifest.json").write_text(json.dumps(manifest))
    return f"file://{at / 'manifest.json'}", f"file://{data / '0.csv.gz'}"


def test_unreadable_inventory_rows_are_skipped_counted_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [
        ["src", "train/a.bin", "3", "e1", "true", "false"],
        ["src", "train/b.bin", "abc", "e2", "true", "false"],  # row 2: not a size
        ["src", "train/c.bin", "4.0", "e3", "true", "false"],  # an integral float: Size 4
        ["src", "train/d.bin", "-1", "e4", "true", "false"],  # row 4: negative
        ["src", "train/e.bin", "", "e5", "true", "false"],  # row 5: no size
        ["src", "train/f.bin", "", "", "true", "true"],  # a delete marker has no size: passed over
        ["src", "train/g.bin", "3.5", "e7", "true", "false"],  # row 7: not whole
        ["src"],  # row 8: no Key
        [],  # a blank line: not a row
        ["src", "other/h.bin", "zzz", "e9", "true", "false"],  # outside the prefix: not read
        ["src", "train/i.bin", "5", "e10", "true", "false"],
    ]
    url, data = inventory(tmp_path / "inv", rows)
    source = InventorySource(url, remote_url="s3://src/train")
    with caplog.at_level(logging.WARNING, logger="epochfs.catalog"):
        listed = read_all(source)
    assert listed == [("a.bin", 3, "e1"), ("c.bin", 4, "e3"), ("i.bin", 5, "e10")]
    assert source.unreadable.count == 5
    messages = [r.getMessage() for r in caplog.records]
    for row, why in [(2, "Size 'abc' is not a whole number of bytes"),
                     (4, "Size '-1' is not a whole number of bytes"), (5, "no Size"),
                     (7, "Size '3.5' is not a whole number of bytes"), (8, "no Key")]:
        assert any(m.startswith(f"inventory data file {data} row {row}: {why}") for m in messages), (
            row, messages)
    assert messages[-1] == (f"inventory data file {data}: 5 unreadable record(s) skipped (first: "
                            "row 2)"), messages


def test_an_inventory_without_a_size_column_is_refused(tmp_path: Path) -> None:
    url, _ = inventory(tmp_path / "inv", [["src", "train/a.bin"]], schema="Bucket, Key")
    with pytest.raises(RemoteError, match="the inventory schema has no Size column"):
        InventorySource(url, remote_url="s3://src/train")


def test_an_inventory_with_bad_rows_completes_a_listing(tmp_path: Path) -> None:
    rows = [["src", f"train/{i:02d}.bin", str(i) if i % 3 else "x", "e", "true", "false"] for i in range(30)]
    url, _ = inventory(tmp_path / "inv", rows)
    store = Store(tmp_path / "cache", create=True)
    try:
        report = build_catalog(store, None, seed=0, shard_index=0, shard_count=1, object_limit=100,
                               source=InventorySource(url, remote_url="s3://src/train"))
        assert report.complete
        keys = {c.key for _, c in store.candidates(after_rank=None, limit=10**9)}
        assert keys == {f"{i:02d}.bin" for i in range(30) if i % 3}
        assert store.stats().skipped_total == 10, "the unreadable rows are the status's skips"
    finally:
        store.close()


# ---------------------------------------------------------------------------- S3 Inventory (Parquet)
def test_a_parquet_row_without_a_size_is_skipped_counted_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    keys = ["train/a.bin", "train/b.bin", "train/c.bin", "train/d.bin", "train/e.bin"]
    table = pa.table({
        "bucket": pa.array(["src"] * 5),
        "key": pa.array(keys),
        "is_latest": pa.array([True] * 5),
        "is_delete_marker": pa.array([False, False, False, True, False]),
        "size": pa.array([3, None, -2, None, 5], pa.int64()),  # row 4 a delete marker: no size
        "e_tag": pa.array(["e1", "e2", "e3", None, "e5"]),
    })
    data = tmp_path / "inv" / "src" / "cfg" / "data"
    data.mkdir(parents=True)
    pq.write_table(table, str(data / "0.parquet"))
    at = tmp_path / "inv" / "src" / "cfg" / "2026-01-01T00-00Z"
    at.mkdir(parents=True)
    (at / "manifest.json").write_text(json.dumps({
        "sourceBucket": "src", "destinationBucket": "arn:aws:s3:::dest", "fileFormat": "Parquet",
        "fileSchema": "message s3.inventory { }", "files": [{"key": "src/cfg/data/0.parquet", "size": 1}]}))
    source = InventorySource(f"file://{at / 'manifest.json'}", remote_url="s3://src/train")
    with caplog.at_level(logging.WARNING, logger="epochfs.catalog"):
        listed = read_all(source)
    assert listed == [("a.bin", 3, "e1"), ("e.bin", 5, "e5")]
    assert source.unreadable.count == 2
    where = f"inventory data file file://{data / '0.parquet'}"
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith(f"{where} row 2: no size"), messages
    assert messages[1].startswith(f"{where} row 3: size -2 is not a whole number of bytes"), messages
    assert messages[-1] == f"{where}: 2 unreadable record(s) skipped (first: row 2)", messages
