"""Remotes and index files behind a plain HTTP server that ignores ``Range`` and streams without
seeking (Python's own ``http.server``, as a simple static host does): what a conformance server
that honours every header does not show.

- an index file (plain or gzip) is read over ``http://`` as over ``file://``: the one opener
  buffers every fsspec file (HTTP's streaming file had no ``readline(n)`` and no seek, so
  ``is_index`` raised TypeError and ``--index https://...`` stopped the sampler with a traceback);
- a ranged read of an ``http(s)://`` remote is the range even when the server sends the whole body.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from epochfs.sidecar.listing.indexfile import IndexSource, is_index, object_record
from epochfs.sidecar.remote import open_remote


def _index(keys: list[str]) -> bytes:
    import json

    from epochfs.sidecar.listing.indexfile import FORMAT_VERSION
    from epochfs.sidecar.remote import RemoteObject

    head = json.dumps({"epochfs_index": FORMAT_VERSION}).encode() + b"\n"
    rows = b"".join(object_record(RemoteObject(k, 16, "v")) for k in keys)
    return head + rows + json.dumps({"end": True, "count": len(keys)}).encode() + b"\n"


@pytest.mark.parametrize("name", ["index.jsonl", "index.jsonl.gz"])
def test_an_index_is_read_over_plain_http(served: tuple[Path, str], name: str) -> None:
    root, url = served
    body = _index(["a/0.bin", "a/1.bin", "b/2.bin"])
    (root / name).write_bytes(gzip.compress(body) if name.endswith(".gz") else body)
    assert is_index(f"{url}/{name}")
    source = IndexSource(f"{url}/{name}")
    keys = [str(o.key) for page in source.pages(source.spans()[0], "") for o in page.objects]
    assert keys == ["a/0.bin", "a/1.bin", "b/2.bin"]


def test_a_ranged_read_is_the_range_when_the_server_ignores_range(served: tuple[Path, str]) -> None:
    root, url = served
    (root / "data").mkdir()
    (root / "data" / "obj").write_bytes(bytes(range(16)))
    (root / "data" / "index.txt").write_text("obj\t16\n")
    remote = open_remote(f"{url}/data")
    try:
        assert remote.read_range("obj", 4, 3) == bytes([4, 5, 6])
        assert remote.read_range("obj", 0, 16) == bytes(range(16))
    finally:
        remote.close()
