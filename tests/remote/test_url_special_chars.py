"""``#`` and ``?`` are legal in an S3 key and in a folder's name: a remote URL whose prefix holds
them lists that prefix, not the part before the character (as a URL's fragment or query would
be cut off), which would list an empty dataset or, worse, a sibling folder's keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from common import S3Server

from epochfs.sidecar.remote.base import RemoteError
from epochfs.sidecar.remote.file import FileRemote
from epochfs.sidecar.remote.s3 import S3Remote

KEYS = ["run#1/a.bin", "run#2/b.bin", "run/c.bin", "v?1/d.bin", "v/e.bin"]


@pytest.mark.parametrize(
    ("prefix", "listed"),
    [
        ("run#1", ["a.bin"]),
        ("run#2/", ["b.bin"]),
        ("v?1/", ["d.bin"]),
    ],
)
def test_an_s3_prefix_keeps_hash_and_question_mark(s3: S3Server, prefix: str, listed: list[str]) -> None:
    client = s3.client()
    client.create_bucket(Bucket="bkt")
    for key in KEYS:
        client.put_object(Bucket="bkt", Key=key, Body=b"z")
    remote = S3Remote(url=f"s3://bkt/{prefix}", endpoint_url=s3.endpoint)
    try:
        assert (remote.bucket, remote.prefix) == ("bkt", prefix.rstrip("/"))
        assert sorted(str(o.key) for o in remote.list()) == listed
    finally:
        remote.close()


@pytest.mark.parametrize(("folder", "listed"), [("run#1", ["a.bin"]), ("v?1", ["d.bin"])])
def test_a_file_folder_keeps_hash_and_question_mark(tmp_path: Path, folder: str, listed: list[str]) -> None:
    for key in KEYS:
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(b"z")
    remote = FileRemote(url=f"file://{tmp_path}/{folder}")
    assert remote.root == str(tmp_path / folder).encode()
    assert sorted(str(o.key) for o in remote.list()) == listed


def test_an_az_url_keeps_hash_and_question_mark_in_its_prefix() -> None:
    """The Azure backend's URL forms are split as s3:// and file:// are: a blob name's "#" and
    "?" stay in the prefix (``urlsplit`` read ``az://c/run#1`` as the prefix ``run``)."""
    pytest.importorskip("adlfs", reason="az:// needs adlfs (the azure extra)")
    from epochfs.sidecar.remote.azure import parse_url

    assert parse_url("az://c/run#1/") == ("c", None, "run#1")
    assert parse_url("abfss://c@acct.dfs.core.windows.net/v?1") == ("c", "acct.dfs.core.windows.net", "v?1")
    assert parse_url("az://c/p/q/") == ("c", None, "p/q")
    with pytest.raises(RemoteError, match="not an Azure Blob URL"):
        parse_url("s3://c/p")
    with pytest.raises(RemoteError, match="no container"):
        parse_url("az:///p")
