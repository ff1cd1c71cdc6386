"""``gs://`` and ``az://`` list every object once, with its true key, so the shared checks of keys
(an empty segment, a leading ``/``, a key that is also a folder, a folder marker) see and count
each one as they do on S3.

fsspec's walk of folders made keys up: gcsfs listed a folder ``d/`` holding ``d//s.bin`` as a
0-byte file ``d`` (admitted as an empty sample), and a prefix ``ds//`` as the root itself kept
whole as a key; adlfs merged the blob ``x/a`` with the folder ``x/a/`` (``x/a`` twice, ``x/a/b``
never) and dropped keys with an empty segment. Each backend runs against its own real emulator
(fake-gcs-server, Azurite), started as tests/remote/test_conformance.py starts it.
"""

from __future__ import annotations

import json
import logging
import uuid
from urllib.parse import quote

import pytest
from test_conformance import AzureServer, GCSServer, azure_env, azurite, gcs_server  # noqa: F401  (fixtures)

from epochfs.sidecar.listing.clashes import ClashFinder
from epochfs.sidecar.listing.filter import CatalogReport, PageFilter
from epochfs.sidecar.remote import Remote, RemoteObject, open_remote

STORED: dict[str, bytes] = {
    "ds": b"the root's own object",
    "ds/d//s.bin": b"double slash",
    "ds//l.bin": b"leading slash",
    "ds/x/a": b"file a",
    "ds/x/a/b": b"file a/b",
    "ds/y/c.bin": b"ccc",
    "ds/t/": b"",
    "ds/e.bin": b"",
    "ds-other/o.bin": b"beside the root",
}
"""Names as stored in the bucket; the remote's root is ``ds``."""
KEYS = {"d//s.bin": 12, "/l.bin": 13, "x/a": 6, "x/a/b": 8, "y/c.bin": 3, "t/": 0, "e.bin": 0}
"""What the listing of the root must give: every object under ``ds/`` once, its key as stored."""


def _gs(server: GCSServer) -> str:
    bucket = f"walk-{uuid.uuid4().hex[:16]}"
    server.call("POST", "/storage/v1/b?project=test", json.dumps({"name": bucket}).encode())
    for name, body in STORED.items():
        server.call("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(name, safe='')}",
                    body, "application/octet-stream")
    return f"gs://{bucket}/ds"


def _az(server: AzureServer) -> str:
    return f"az://{server.container(STORED)}/ds"


@pytest.fixture(params=["gs", "az"])
def remote(request: pytest.FixtureRequest) -> Remote:
    if request.param == "gs":
        server: GCSServer = request.getfixturevalue("gcs_server")
        return open_remote(_gs(server), endpoint_url=server.endpoint, read_timeout=10)
    azure: AzureServer = request.getfixturevalue("azure_env")
    return open_remote(_az(azure), endpoint_url=azure.endpoint, read_timeout=10)


def test_the_listing_gives_every_key_once_as_stored(remote: Remote) -> None:
    """No phantom (``d``, the root's name), no key twice, none dropped, in name order; each with
    its size and a version."""
    try:
        listed = list(remote.list())
    finally:
        remote.close()
    keys = [str(o.key) for o in listed]
    assert sorted(keys) == sorted(KEYS), keys
    assert {str(o.key): o.size for o in listed} == KEYS
    assert keys == sorted(keys, key=lambda k: k.encode())
    assert remote.sorted_listing
    assert all(o.version for o in listed), listed


def test_the_shared_checks_count_every_odd_key(remote: Remote) -> None:
    """The listing's pages through the catalog's filter, as the lister passes them: the empty
    segment and the leading ``/`` skipped and counted as on S3, ``x/a`` skipped as also a folder
    (counted), the marker ``t/`` not a sample; the rest cataloged, and nothing of size 0 but the
    empty object."""
    try:
        objects: list[RemoteObject] = list(remote.list())
    finally:
        remote.close()
    report = CatalogReport()
    page = PageFilter(report, seed=0, shard_index=0, shard_count=1, object_limit=1 << 30)
    out = page.page(objects, ClashFinder() if remote.sorted_listing else None)

    assert report.reasons == {"empty component (//)": 1, "leading /": 1}
    assert report.hostile == 2
    assert report.markers == 1
    assert out.clashes == ["x/a"] and report.clashes == 1
    shown = {row.key: row.size for row in out.rows if row.key not in out.clashes}
    assert shown == {"x/a/b": 8, "y/c.bin": 3, "e.bin": 0}


def test_gcsfs_says_once_that_it_cannot_learn_the_bucket_s_layout(
        gcs_server: GCSServer, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    """Without Google credentials gcsfs warns at every request that it cannot learn the bucket's
    layout and falls back to the JSON API (99 times for 19 objects): once per run."""
    caplog.set_level(logging.WARNING)
    for _ in range(2):
        remote = open_remote(_gs(gcs_server), endpoint_url=gcs_server.endpoint, read_timeout=10)
        try:
            for obj in remote.list():
                if obj.size:
                    reader = remote.open(str(obj.key))
                    reader.read(obj.size)
                    reader.close()
                    remote.read_range(str(obj.key), 1, 2)
        finally:
            remote.close()
    said = [r for r in caplog.records
            if "bucket type" in r.getMessage() or "storage layout" in r.getMessage()]
    assert len(said) <= 1, [r.getMessage()[:120] for r in said]
