"""``epochfs index`` writes its records shuffled (sidecar/listing/indexorder.py): a sidecar fetches
from what it has read of its ``--index`` so far, so every prefix of the stream must be a uniform
sample of the dataset, not its first folders; and the clashes a reader can no longer find in a
stream out of key order (a file that is also a folder of other keys) are left out by the writer,
as a listing leaves them out."""

from __future__ import annotations

import gzip
import io
import json
from collections import Counter
from pathlib import Path

import pytest

from epochfs.sidecar.listing import indexorder
from epochfs.sidecar.listing.indexfile import object_record
from epochfs.sidecar.remote import RemoteObject


def sorted_parts(tmp_path: Path, spans: list[list[str]]) -> list[str]:
    paths = []
    for i, keys in enumerate(spans):
        path = tmp_path / f"{i:06d}.gz"
        with gzip.open(path, "wb") as f:
            for k in sorted(keys):
                f.write(object_record(RemoteObject(k, 1, "v")))
        paths.append(str(path))
    return paths


def shuffled(tmp_path: Path, spans: list[list[str]], salt: bytes = b"s" * 16) -> tuple[list[str], int]:
    parts = sorted_parts(tmp_path, spans)
    out = io.BytesIO()
    total = sum(len(s) for s in spans)
    written, dropped = indexorder.write_shuffled(parts, total, out, gzip.compress, str(tmp_path), salt=salt)
    keys = [json.loads(line)["k"] for line in gzip.decompress(out.getvalue()).splitlines()]
    assert written == len(keys)
    return keys, dropped


def test_every_prefix_draws_from_every_folder_in_proportion(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexorder, "BUCKET_RECORDS", 1000)  # 20 buckets: the prefix crosses them
    sizes = {"a": 10_000, "b": 6_000, "c": 3_000, "d": 1_000}
    spans = [[f"{f}/{i:05d}.bin" for i in range(n)] for f, n in sizes.items()]
    keys, dropped = shuffled(tmp_path, spans)
    assert dropped == 0 and sorted(keys) == sorted(k for s in spans for k in s)
    for prefix in (400, 2_000, 7_000):
        mix = Counter(k[0] for k in keys[:prefix])
        for folder, n in sizes.items():
            want = prefix * n / 20_000
            assert abs(mix[folder] - want) < 5 * want**0.5 + 5, (prefix, mix)
    # Inside a folder too: the first 400 of folder a's keys in the stream spread over its names.
    firsts = [int(k[2:7]) for k in keys if k.startswith("a/")][:400]
    assert 140 <= sum(n < 5_000 for n in firsts) <= 260  # half of them in its first half


def test_a_file_that_is_also_a_folder_is_left_out_and_the_order_follows_the_salt(tmp_path: Path) -> None:
    spans = [["x", "x/1", "x/2", "y"], ["z/1"]]
    (tmp_path / "one").mkdir()
    keys, dropped = shuffled(tmp_path / "one", spans)
    assert dropped == 1 and sorted(keys) == ["x/1", "x/2", "y", "z/1"]
    (tmp_path / "two").mkdir()
    again, _ = shuffled(tmp_path / "two", spans)
    assert again == keys  # the same salt, the same order
    (tmp_path / "three").mkdir()
    many = [[f"k{i:04d}" for i in range(200)]]
    first, _ = shuffled(tmp_path / "three", many, salt=b"1" * 16)
    (tmp_path / "four").mkdir()
    second, _ = shuffled(tmp_path / "four", many, salt=b"2" * 16)
    assert sorted(first) == sorted(second) and first != second  # another index, another order


def test_clashes_are_found_as_a_listing_finds_them_whatever_keys_come_between(tmp_path: Path) -> None:
    """A key that is not UTF-8 ("kb" records, which every reader refuses) sorts apart from the
    text keys: it must not stop the clash search for the keys after it. A folder marker (``a/``)
    or a refused key (``a/../b``) makes no folder of ``a``, as in a listing's page filter. And a
    clash across two span files is found (the spans are read in key order)."""
    parts = []
    records = [[RemoteObject("a", 1, "v"), RemoteObject("a/", 0, "v"), RemoteObject("a/../b", 1, "v")],
               [RemoteObject("b/x", 1, "v"), RemoteObject(b"b\xff", 1, "v"), RemoteObject("c", 1, "v")],
               [RemoteObject("c/1", 1, "v"), RemoteObject("d", 1, "v")]]
    for i, span in enumerate(records):
        path = tmp_path / f"{i:06d}.gz"
        with gzip.open(path, "wb") as f:
            for obj in span:
                f.write(object_record(obj))
        parts.append(str(path))
    assert indexorder.clashes(parts) == {"c"}
    out = io.BytesIO()
    written, dropped = indexorder.write_shuffled(parts, 8, out, lambda b: b, str(tmp_path))
    lines = out.getvalue().splitlines()
    assert (written, dropped, len(lines)) == (7, 1, 7)  # plain JSON lines; "c" left out
    assert sorted(indexorder.record_key(line) for line in lines if b'"k":' in line) == [
        "a", "a/", "a/../b", "b/x", "c/1", "d"]


def test_an_index_written_again_is_another_source_listed_afresh(tmp_path: Path) -> None:
    """A listing of an index resumes by the records it consumed; an index written again at the
    same URL holds its records in another order (a salt of its own), so a resumed count would
    skip other keys than those consumed. Its header's time makes it another source (a start
    lists it afresh, :meth:`Lister.prepare`), the same file the same source."""
    from epochfs.sidecar.listing.indexfile import IndexSource

    def index(created: int) -> str:
        path = tmp_path / f"i{created}.jsonl"
        path.write_bytes(json.dumps({"epochfs_index": 1, "sorted": False, "created": created}).encode()
                         + b"\n" + object_record(RemoteObject("k", 1, "v"))
                         + json.dumps({"end": True, "count": 1}).encode() + b"\n")
        return path.as_uri()

    first, again = index(100), index(200)
    assert IndexSource(first).name == IndexSource(first).name
    assert IndexSource(first).name != IndexSource(again).name.replace("i200", "i100")
