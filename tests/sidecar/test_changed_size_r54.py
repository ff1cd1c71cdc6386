"""An object rewritten after the listing: what docs/sampler.md says happens, against S3 (moto).

Of the same size, it is cached with its new bytes under its new version (the GET's ETag). Of
another size, the download is refused as ``Changed`` (``size is 60000, the listing said 50000``)
and the key skipped; it stays skipped while the listing says the old size (a relist that lists the
old size again tries it once more, and skips it again), and is cached once a relist records the
new size. The docs said before that any rewritten object was cached with its new bytes.

The listing here is an ``epochfs index`` (so it is stale by construction, without racing the
sampler), written again for the last relist. The real ``epochfs index``, ``sample`` and
``relist`` commands.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from common import S3Server, wait_until
from sampler_helpers import index_rows

from epochfs.sidecar.store import INDEX_NAME, Store, object_name

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
BUCKET, REMOTE = "changed-ds", "s3://changed-ds/d"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "sampler.md"
SAID = "skipping 'grow.bin': Changed: size is 60000, the listing said 50000"


def _documented() -> str:
    """docs/sampler.md on an object rewritten after the listing (to the next heading), one line."""
    text = DOCS.read_text()
    start = text.index("object rewritten after the listing")
    return " ".join(text[start:text.index("\n## ", start)].split())


def _env() -> dict[str, str]:
    """The moto credentials the ``s3`` fixture set, without the developer's EPOCHFS_* settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}


def _index(s3: S3Server, out: Path) -> None:
    made = subprocess.run([EPOCHFS, "index", REMOTE, "--out", str(out), "--endpoint-url", s3.endpoint],
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr[-2000:]


def _samples(cache: Path) -> dict[str, tuple[int, str, bytes]]:
    """key -> (size, version, the cached bytes) of every sample held."""
    if not (cache / INDEX_NAME).exists():
        return {}
    rows = index_rows(cache, "SELECT key, size, version, sid FROM samples")
    objects = cache / "objects"
    return {str(k): (int(str(s)), str(v), (objects / object_name(str(sid))).read_bytes())
            for k, s, v, sid in rows}


def _catalog(cache: Path, key: str) -> tuple[int, int]:
    """(the listed size, the skip mark) of ``key``'s catalog row."""
    ((size, skipped),) = index_rows(cache, "SELECT size, skipped FROM catalog WHERE key = ?", (key,))
    return int(str(size)), int(str(skipped))


def _relist(cache: Path) -> None:
    done = subprocess.run([EPOCHFS, "relist", "--cache", str(cache)], env=_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_rewrite_of_another_size_is_skipped_until_a_relist_records_it(s3: S3Server, tmp_path: Path) -> None:
    documented = _documented()
    assert f"`{SAID}`" in documented, "the docs quote the skip this test sees"
    assert "until a relist" in documented and Path(__file__).name in documented
    client = s3.client()
    client.create_bucket(Bucket=BUCKET)
    listed = {"d/same.bin": b"a" * 40_000, "d/grow.bin": b"a" * 50_000, "d/ok.bin": b"o" * 1_000}
    for key, body in listed.items():
        client.put_object(Bucket=BUCKET, Key=key, Body=body)
    index = tmp_path / "index.jsonl"
    _index(s3, index)
    # Rewritten after the listing: one of the same size, one larger.
    same_etag = client.put_object(Bucket=BUCKET, Key="d/same.bin", Body=b"b" * 40_000)["ETag"].strip('"')
    grow_etag = client.put_object(Bucket=BUCKET, Key="d/grow.bin", Body=b"b" * 60_000)["ETag"].strip('"')
    cache, log = tmp_path / "cache", tmp_path / "sampler.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([EPOCHFS, "sample", "--cache", str(cache), "--remote", REMOTE, "--index",
                                 str(index), "--endpoint-url", s3.endpoint, "--capacity", "10Mi"],
                                env=_env(), stdout=out, stderr=subprocess.STDOUT)

    def said() -> int:
        return log.read_text(errors="replace").count(SAID)

    try:
        wait_until(lambda: (said() == 1 and len(_samples(cache)) == 2) or proc.poll() is not None, timeout=60,
                   what="the two objects cached, the one of another size skipped")
        assert proc.poll() is None, log.read_text()[-3000:]
        held = _samples(cache)
        assert held["same.bin"] == (40_000, same_etag, b"b" * 40_000), "same size: new bytes, new version"
        assert "grow.bin" not in held
        assert _catalog(cache, "grow.bin")[0] == 50_000 and _catalog(cache, "grow.bin")[1] != 0

        _relist(cache)  # the index still says 50000: tried once more, skipped again
        wait_until(lambda: said() == 2 or proc.poll() is not None, timeout=60, what="the second skip")
        assert proc.poll() is None and "grow.bin" not in _samples(cache)

        _index(s3, index)  # a listing that records the new size
        _relist(cache)
        wait_until(lambda: "grow.bin" in _samples(cache) or proc.poll() is not None, timeout=60,
                   what="the object of the new size cached after the relist")
        assert proc.poll() is None, log.read_text()[-3000:]
        assert _samples(cache)["grow.bin"] == (60_000, grow_etag, b"b" * 60_000)
        assert _catalog(cache, "grow.bin") == (60_000, 0)
        assert said() == 2
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert proc.returncode == 0, log.read_text()[-3000:]
    with Store(cache) as store:
        stats = store.stats()
    # Counted once per key: the second skip met the object the listing already said.
    assert (stats.skipped_total, stats.failed_total) == (1, 1)
