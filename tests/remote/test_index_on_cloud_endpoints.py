"""An index file on ``gs://`` or ``az://`` is read and written where the dataset is: at
``--endpoint-url``, through the backend the remote uses, not by a bare ``fsspec.open`` that
asked the cloud's public host (the index on Azurite: a minute of retries, then exit 2 with "check
the host name in --index: ctr does not resolve", ``ctr`` being the container; the upload: a
traceback of 179 lines). A failed upload is one line naming ``--out``; a host that does not
resolve is the one asked. And a local ``--out`` is replaced whole, never rewritten in place: a
sampler starting meanwhile read an empty file and exited 2.

Run as a user would: the console scripts in processes of their own, against the stores' real
emulators (fake-gcs-server, Azurite: tests/emulators.py), and the one opener in-process for the
ranged reads (an index in Parquet, an S3 Inventory's data files).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from common import wait_until
from emulators import ACCOUNT, KEY, running_azurite, running_fake_gcs
from sampler_helpers import running_sampler

from epochfs.sidecar.listing.indexfile import is_index, open_stream
from epochfs.sidecar.remote.base import RemoteError
from epochfs.sidecar.remote.objects import open_ranged, upload

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
NEVER = 120.0
"""Seconds after which a command still running is killed, failing the test (not a measure)."""
DATA = {"d/a/0.bin": b"zero" * 16, "d/b/1.bin": b"one" * 20}
"""What each bucket or container holds under its dataset prefix ``d/``."""
STORE_VARIABLES = ("EPOCHFS_", "AWS_", "AZURE_", "GOOGLE_", "GCE_", "STORAGE_EMULATOR")


@dataclass(frozen=True)
class Store:
    """A bucket or container on an emulator, holding :data:`DATA`."""

    scheme: str
    bucket: str
    endpoint: str
    env: dict[str, str]
    """The credentials the store takes, as the standard variables."""

    def url(self, path: str) -> str:
        return f"{self.scheme}://{self.bucket}/{path}"


def _env(extra: dict[str, str]) -> dict[str, str]:
    """This environment without any store's credentials or emulator settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(STORE_VARIABLES)}
    env.update(extra)
    return env


# ---------------------------------------------------------------------------- the emulators
class GCS:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def call(self, method: str, path: str, body: bytes = b"",
             content_type: str = "application/json") -> bytes:
        import urllib.request

        request = urllib.request.Request(f"{self.endpoint}{path}", data=body or None, method=method,
                                         headers={"Content-Type": content_type})
        with urllib.request.urlopen(request, timeout=10) as response:
            data: bytes = response.read()
            return data

    def put(self, bucket: str, key: str, body: bytes) -> None:
        self.call("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(key, safe='')}",
                  body, "application/octet-stream")

    def get(self, bucket: str, key: str) -> bytes:
        return self.call("GET", f"/storage/v1/b/{bucket}/o/{quote(key, safe='')}?alt=media")

    def store(self) -> Store:
        bucket = f"idx-{uuid.uuid4().hex[:12]}"
        self.call("POST", "/storage/v1/b?project=test", json.dumps({"name": bucket}).encode())
        for key, body in DATA.items():
            self.put(bucket, key, body)
        return Store("gs", bucket, self.endpoint, {})


class Azure:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def _service(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient(self.endpoint, credential={"account_name": ACCOUNT, "account_key": KEY})

    def put(self, container: str, key: str, body: bytes) -> None:
        with self._service() as service:
            service.get_container_client(container).upload_blob(key, body, overwrite=True)

    def get(self, container: str, key: str) -> bytes:
        with self._service() as service:
            data: bytes = service.get_container_client(container).download_blob(key).readall()
            return data

    def store(self) -> Store:
        name = f"idx-{uuid.uuid4().hex[:12]}"
        with self._service() as service:
            service.create_container(name)
        for key, body in DATA.items():
            self.put(name, key, body)
        return Store("az", name, self.endpoint, {"AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT,
                                                 "AZURE_STORAGE_ACCOUNT_KEY": KEY})


@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GCS]:
    with running_fake_gcs(tmp_path_factory.mktemp("gcs")) as endpoint:
        yield GCS(endpoint)


@pytest.fixture(scope="module")
def azure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azure]:
    with running_azurite(tmp_path_factory.mktemp("azurite")) as endpoint:
        yield Azure(endpoint)


@pytest.fixture(params=["gs", "az"])
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> tuple[Store, GCS | Azure]:
    """A new bucket (fake-gcs-server) or container (Azurite) holding :data:`DATA`; this process's
    environment holds its credentials alone (the in-process reads)."""
    emulator: GCS | Azure = request.getfixturevalue("gcs" if request.param == "gs" else "azure")
    made = emulator.store()
    for name in list(os.environ):
        if name.startswith(STORE_VARIABLES):
            monkeypatch.delenv(name)
    for name, value in made.env.items():
        monkeypatch.setenv(name, value)
    return made, emulator


def index_cmd(remote: str, out: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``epochfs index`` run to its end."""
    try:
        return subprocess.run([EPOCHFS, "index", remote, "--out", out, *args], capture_output=True,
                              text=True, env=_env(env), timeout=NEVER)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"epochfs index still ran after {NEVER:.0f} s: {err[-1500:]}")


def records(body: bytes) -> tuple[dict[str, object], list[str], dict[str, object]]:
    """(header, keys, trailer) of an index file's bytes (gzip or plain)."""
    if body[:2] == b"\x1f\x8b":
        body = gzip.decompress(body)
    lines = [json.loads(line) for line in body.splitlines() if line.strip()]
    return lines[0], sorted(str(line["k"]) for line in lines[1:-1]), lines[-1]


# ---------------------------------------------------------------------------- gs:// and az://
@pytest.mark.parametrize("name", ["idx.jsonl", "idx.jsonl.gz"])
def test_index_uploaded_to_the_endpoint(store: tuple[Store, GCS | Azure], name: str) -> None:
    """``epochfs index <remote> --endpoint-url EP --out <scheme>://bucket/idx`` writes the index on
    the emulator: the store's own client reads it back whole."""
    made, emulator = store
    r = index_cmd(made.url("d"), made.url(name), made.env, "--endpoint-url", made.endpoint)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr
    header, keys, trailer = records(emulator.get(made.bucket, name))
    assert header["epochfs_index"] == 1
    assert keys == sorted(k.removeprefix("d/") for k in DATA)
    assert trailer == {"end": True, "count": len(DATA)}


def test_index_read_from_the_endpoint(store: tuple[Store, GCS | Azure], tmp_path: Path) -> None:
    """An index put on the emulator by the store's own client is read through the one opener with
    ``endpoint_url`` (streamed and gunzipped, and by ranges as a Parquet index is); then a real
    sampler with ``--index <scheme>://... --endpoint-url EP`` lists its catalog from it and
    caches every object (it exited 2 at the start: "check the host name in --index")."""
    made, emulator = store
    local = tmp_path / "built.jsonl.gz"  # the store listed, the index written here
    r = index_cmd(made.url("d"), str(local), made.env, "--endpoint-url", made.endpoint)
    assert r.returncode == 0, r.stderr[-3000:]
    emulator.put(made.bucket, "idx.jsonl.gz", local.read_bytes())
    url = made.url("idx.jsonl.gz")

    assert is_index(url, endpoint_url=made.endpoint)
    with open_stream(url, endpoint_url=made.endpoint) as f:
        assert records(f.read()) == records(local.read_bytes())
    body = local.read_bytes()
    with open_ranged(url, endpoint_url=made.endpoint) as f:
        f.seek(-8, os.SEEK_END)  # a Parquet footer's place
        assert f.read() == body[-8:]
        f.seek(3)
        assert f.read(5) == body[3:8]

    cache = tmp_path / "cache"
    with running_sampler(cache, made.url("d"), "--index", url, "--endpoint-url", made.endpoint,
                         "--capacity", "1Mi", env=_env(made.env)) as sp:
        wait_until(lambda: sp.stats().get("samples") == len(DATA) or not sp.alive(),
                   what="every object cached")
        assert sp.alive(), sp.log_text()[-3000:]


def test_failed_upload_is_one_line_naming_out(store: tuple[Store, GCS | Azure]) -> None:
    """An ``--out`` the store refuses (a bucket or container that does not exist) ends
    ``epochfs index`` with exit 1 and one line naming ``--out`` and the URL, no traceback."""
    made, _ = store
    out = f"{made.scheme}://no-such-{uuid.uuid4().hex[:8]}/idx.jsonl"
    r = index_cmd(made.url("d"), out, made.env, "--endpoint-url", made.endpoint)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    last = [line for line in r.stderr.splitlines() if line.strip()][-1]
    kind = "container" if made.scheme == "az" else "bucket"
    assert last == (f"epochfs index: --out: cannot write {out}: not found: no {kind} "
                    f"{out.split('/')[2]!r} in this store"), last
    with pytest.raises(RemoteError, match=f"^cannot write {out}: not found: no {kind} "):
        upload(__file__, out, endpoint_url=made.endpoint)


def test_unresolved_endpoint_named_not_the_container(tmp_path: Path) -> None:
    """An index on ``az://`` at an ``--endpoint-url`` whose host does not resolve: the sampler
    exits 2 naming that host and ``--endpoint-url``, not the container as a host name."""
    endpoint = f"http://epochfs-no-such-host-{uuid.uuid4().hex[:8]}.invalid:10000/{ACCOUNT}"
    env = _env({"AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": KEY})
    try:
        r = subprocess.run([EPOCHFS, "sample", "--cache", str(tmp_path / "c"), "--remote", "az://ctr/d",
                            "--index", "az://ctr/idx.jsonl", "--endpoint-url", endpoint, "--capacity", "1Mi"],
                           capture_output=True, text=True, env=env, timeout=NEVER)
    except subprocess.TimeoutExpired:
        pytest.fail(f"epochfs sample still ran after {NEVER:.0f} s")
    last = [line for line in r.stderr.splitlines() if line.strip()][-1]
    assert r.returncode == 2, r.stderr[-3000:]
    assert last.startswith("epochfs sample: --index: "), last
    host = endpoint.split("//")[1].split(":")[0]
    assert last.endswith(f"check the host name in --endpoint-url: {host} does not resolve from this node "
                         "(a typo, or a name only another network knows)"), last
    assert "ctr does not resolve" not in last, last


def test_unresolved_store_host_not_guessed_from_the_bucket(tmp_path: Path) -> None:
    """Without ``--endpoint-url`` a ``gs://`` or ``az://`` index is asked of the store's own host,
    which no flag names: the fix names the node's DNS, not the bucket or container as a host; an
    ``az://`` URL that names its account's host names that host."""
    from epochfs.sidecar.config import SamplerSettings
    from epochfs.sidecar.sampler.refusals import refusal_fix

    for index in ("gs://bkt/idx.jsonl", "az://ctr/idx.jsonl"):
        settings = SamplerSettings(remote=index.replace("idx.jsonl", "d"), index_url=index, cache=tmp_path)
        flag, fix = refusal_fix(settings, "host")
        assert (flag, fix) == ("--index", "the store's endpoint for --index does not resolve from this "
                               "node: check the node's DNS and egress (or --endpoint-url)"), fix
    named = "az://ctr@acct.blob.core.windows.net/idx.jsonl"
    settings = SamplerSettings(remote="az://ctr/d", index_url=named, cache=tmp_path)
    assert refusal_fix(settings, "host")[1].startswith(
        "check the host name in --index: acct.blob.core.windows.net does not resolve")


# ---------------------------------------------------------------------------- a local --out
def test_local_out_replaced_whole(tmp_path: Path) -> None:
    """``epochfs index --out /path`` over an older index: the path names the old file or the new
    one, never a truncated one. A reader that opened the old index before holds it whole after
    the write (in place, it read the new bytes or none), the path's file is a new inode with the
    whole new index and the old file's mode, and nothing else is left in the folder."""
    data = tmp_path / "data"
    for i in range(3):
        (data / f"p{i}").mkdir(parents=True)
        (data / f"p{i}" / "x.bin").write_bytes(b"x" * (i + 1))
    shared = tmp_path / "shared"
    shared.mkdir()
    out = shared / "idx.jsonl.gz"
    old = gzip.compress(b'{"epochfs_index": 1, "remote": "file:///old"}\n{"k": "old", "s": 1, "v": ""}\n'
                        b'{"end": true, "count": 1}\n')
    out.write_bytes(old)
    out.chmod(0o640)
    with open(out, "rb") as reader:
        before = os.fstat(reader.fileno())
        r = index_cmd(f"file://{data}", str(out), {})
        assert r.returncode == 0, r.stderr[-3000:]
        assert reader.read() == old, "the old index changed under a reader that held it open"
    after = os.stat(out)
    assert (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino), "rewritten in place"
    assert after.st_mode & 0o777 == 0o640
    header, keys, trailer = records(out.read_bytes())
    assert header["remote"] == f"file://{data}"
    assert keys == ["p0/x.bin", "p1/x.bin", "p2/x.bin"] and trailer["count"] == 3
    assert sorted(p.name for p in shared.iterdir()) == ["idx.jsonl.gz"]


def test_local_out_failed_write_leaves_old_file(tmp_path: Path) -> None:
    """A write that fails (the file to copy is unreadable) leaves the old index as it was and no
    temporary file beside it; the failure is a ``WriteError`` (a :class:`RemoteError`: one line)
    naming the path."""
    out = tmp_path / "idx.jsonl"
    out.write_bytes(b"old\n")
    with pytest.raises(RemoteError, match=f"^cannot write {out}: "):
        upload(str(tmp_path / "missing"), str(out))
    with pytest.raises(RemoteError, match=f"^cannot write file://{out}: "):
        upload(str(tmp_path), f"file://{out}")  # a folder: opened, its read fails
    assert out.read_bytes() == b"old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx.jsonl"]
