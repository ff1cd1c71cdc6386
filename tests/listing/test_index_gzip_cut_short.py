"""A gzipped index cut short or damaged is an error naming it and telling to write it again, as a
plain index without its trailer is, never gzip's own exception: an ``EOFError`` ended ``epochfs
sample --index keys.jsonl.gz`` in a traceback when the cut was in the header, and a listing whose
failure named no file when it was further on (found by an exploratory bad-input run). The lines
before the cut are read first. Real files, a real :class:`~epochfs.sidecar.listing.Lister` and
store, and the real command line.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from epochfs.sidecar.listing.indexfile import FORMAT_VERSION, IndexSource
from epochfs.sidecar.listing.lister import Lister
from epochfs.sidecar.remote import RemoteError
from epochfs.sidecar.store import Store

EPOCHFS = str(Path(sys.executable).parent / "epochfs")
KEYS = [f"k{i:05d}.bin" for i in range(5000)]
SAID = "its gzip stream is cut short or damaged"


def _gzipped_index(path: Path) -> bytes:
    lines = [json.dumps({"epochfs_index": FORMAT_VERSION, "remote": "s3://bkt/p"})]
    lines += [json.dumps({"k": k, "s": 5}) for k in KEYS] + [json.dumps({"end": True, "count": len(KEYS)})]
    body = gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0)
    path.write_bytes(body)
    return body


def _listed(tmp_path: Path, index: Path) -> tuple[Store, list[object]]:
    store = Store(tmp_path / "cache", create=True)
    lister = Lister(store, IndexSource(str(index), page=1000), seed=1, threads=1)
    try:
        return store, [lister.run().complete]
    except RemoteError as e:
        return store, [str(e)]


def _catalog(store: Store) -> int:
    return len(list(store.candidates(after_rank=None, limit=10**9)))


def test_a_whole_gzipped_index_lists_every_key(tmp_path: Path) -> None:
    index = tmp_path / "keys.jsonl.gz"
    _gzipped_index(index)
    store, runs = _listed(tmp_path, index)
    assert runs == [True]
    assert _catalog(store) == len(KEYS)


@pytest.mark.parametrize("damage", ["cut", "flipped"])
def test_a_gzipped_index_cut_short_or_damaged_fails_the_listing_in_words(tmp_path: Path, damage: str) -> None:
    index = tmp_path / "keys.jsonl.gz"
    body = _gzipped_index(index)
    middle = len(body) * 2 // 3
    if damage == "cut":
        index.write_bytes(body[:middle])
    else:
        flipped = bytes(b ^ 0xFF for b in body[middle:middle + 64])
        index.write_bytes(body[:middle] + flipped + body[middle + 64:])
    store, runs = _listed(tmp_path, index)
    [said] = runs
    assert isinstance(said, str) and f"the index {index}: {SAID}" in said and "write it again" in said, runs
    assert 0 < _catalog(store) < len(KEYS), "the pages before the damage are committed"


def test_a_gzipped_index_cut_in_its_header_is_refused_in_one_line(tmp_path: Path) -> None:
    index = tmp_path / "keys.jsonl.gz"
    index.write_bytes(_gzipped_index(index)[:40])
    data = tmp_path / "data"
    data.mkdir()
    out = subprocess.run([EPOCHFS, "sample", "--cache", str(tmp_path / "cache"), "--remote", f"file://{data}",
                          "--index", str(index), "--capacity", "1Mi"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(
        f"epochfs sample: --index: the index {index}: {SAID} (Compressed file ended"), out.stderr
