"""A ``gs://`` remote lists the bucket as it is now, every time it is listed.

The listing beside the sampler keeps one remote for its whole life and lists it again and
again: an object written to the bucket since the last listing must appear in the next one, and
one deleted must go. gcsfs keeps a cache of every folder it listed and hands out one filesystem
per set of options (its instance cache), so a remote answered each relisting from the first.

Run against fake-gcs-server (the real Go server of the PyPI wrapper), objects written and
deleted through its JSON API beside the remote under test.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from emulators import running_fake_gcs

from epochfs.sidecar.remote.registry import open_remote


@dataclass(frozen=True)
class GCS:
    endpoint: str

    def call(self, method: str, path: str, body: bytes = b"",
             content_type: str = "application/json") -> None:
        request = urllib.request.Request(f"{self.endpoint}{path}", data=body or None, method=method,
                                         headers={"Content-Type": content_type})
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def put(self, bucket: str, key: str, body: bytes) -> None:
        self.call("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(key, safe='')}",
                  body, "application/octet-stream")

    def delete(self, bucket: str, key: str) -> None:
        self.call("DELETE", f"/storage/v1/b/{bucket}/o/{quote(key, safe='')}")


@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GCS]:
    with running_fake_gcs(tmp_path_factory.mktemp("gcs")) as endpoint:
        yield GCS(endpoint)


def _keys(remote: object) -> set[str]:
    return {str(o.key) for o in remote.list()}  # type: ignore[attr-defined]


def test_a_gcs_relisting_sees_objects_written_and_deleted_since(gcs: GCS) -> None:
    gcs.call("POST", "/storage/v1/b?project=test", json.dumps({"name": "relist"}).encode())
    for key in ("train/a.bin", "train/sub/b.bin"):
        gcs.put("relist", key, b"x" * 16)
    remote = open_remote("gs://relist/train", endpoint_url=gcs.endpoint, read_timeout=10)
    try:
        assert _keys(remote) == {"a.bin", "sub/b.bin"}
        gcs.put("relist", "train/c.bin", b"y" * 8)          # a new object in a folder listed before
        gcs.put("relist", "train/sub/d.bin", b"z" * 8)      # and in a subfolder listed before
        gcs.put("relist", "train/new/e.bin", b"w" * 8)      # and in a folder that is new
        gcs.delete("relist", "train/a.bin")
        assert _keys(remote) == {"sub/b.bin", "c.bin", "sub/d.bin", "new/e.bin"}
        # Another remote of the same bucket (the next start) lists it as it is too, not as the
        # filesystem an earlier remote of the same options last listed it.
        gcs.delete("relist", "train/sub/b.bin")
        again = open_remote("gs://relist/train", endpoint_url=gcs.endpoint, read_timeout=10)
        try:
            assert _keys(again) == {"c.bin", "sub/d.bin", "new/e.bin"}
        finally:
            again.close()
    finally:
        remote.close()


def test_a_gcs_remote_reads_an_object_rewritten_since_it_was_listed(gcs: GCS, tmp_path: Path) -> None:
    """The object's size comes from the store, not from a listing of the folder kept earlier: a
    body written again larger is read whole."""
    gcs.call("POST", "/storage/v1/b?project=test", json.dumps({"name": "rewrite"}).encode())
    gcs.put("rewrite", "train/a.bin", b"1" * 4)
    remote = open_remote("gs://rewrite/train", endpoint_url=gcs.endpoint, read_timeout=10)
    try:
        assert {(str(o.key), o.size) for o in remote.list()} == {("a.bin", 4)}
        gcs.put("rewrite", "train/a.bin", b"2" * 40)
        assert {(str(o.key), o.size) for o in remote.list()} == {("a.bin", 40)}
        reader = remote.open("a.bin")
        try:
            assert reader.read(100) == b"2" * 40
        finally:
            reader.close()
    finally:
        remote.close()
