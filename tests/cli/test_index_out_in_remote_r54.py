"""``epochfs index --out`` under the remote's own prefix is refused, for object stores too (r54).

``epochfs index s3://bkt/data --out s3://bkt/data/self.index.gz`` was accepted: the index was an
object under the prefix it lists, so the next run listed it too (21 for 20 objects) and every
sampler listing the remote without ``--index`` cataloged it as a sample. A ``file://`` remote's
folder was refused already; an object store's prefix is now, the same way (exit 2, one line,
before the listing), while a key that only starts alike (``data2/``) is no part of ``data/``.
Real ``epochfs index`` processes against a moto S3 server.
"""

from __future__ import annotations

import os
import subprocess

from common import S3Server, put_objects
from sampler_helpers import EPOCHFS

OBJECTS = {f"data/f{i:02d}.bin": bytes([i]) * 64 for i in range(20)}


def _index(s3: S3Server, remote: str, out: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    return subprocess.run([EPOCHFS, "index", remote, "--out", out, "--endpoint-url", s3.endpoint],
                          capture_output=True, text=True, timeout=120, env=env, check=False)


def _keys(s3: S3Server) -> list[str]:
    return sorted(o["Key"] for o in s3.client().list_objects_v2(Bucket="bkt").get("Contents", []))


def test_an_out_under_the_remote_prefix_is_refused_before_the_listing(s3: S3Server) -> None:
    put_objects(s3, "bkt", OBJECTS)
    for remote, out in (("s3://bkt/data", "s3://bkt/data/self.index.gz"),
                        ("s3://bkt/data/", "S3://bkt/data/sub/index.jsonl")):
        r = _index(s3, remote, out)
        assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith(f"epochfs index: --out: {out} is inside the remote's prefix "
                               f"s3://bkt/data/ (REMOTE {remote})"), last
        assert "the index would list itself as one; write it beside that prefix (--out " in last, last
        assert "Traceback" not in r.stderr
    whole = _index(s3, "s3://bkt", "s3://bkt/index.jsonl.gz")  # the whole bucket is the remote
    assert whole.returncode == 2, whole.stderr
    assert "narrower prefix than the whole bucket" in whole.stderr, whole.stderr
    assert _keys(s3) == sorted(OBJECTS), "nothing written into the bucket"


def test_an_out_beside_the_remote_prefix_is_written(s3: S3Server) -> None:
    """``data2/`` and ``data-self.index.gz`` start like ``data`` but are not under ``data/``."""
    put_objects(s3, "bkt", OBJECTS)
    for out in ("s3://bkt/data2/index.jsonl.gz", "s3://bkt/data-self.index.gz"):
        r = _index(s3, "s3://bkt/data", out)
        assert (r.returncode, r.stdout.strip()) == (0, "20"), r.stderr
    assert _keys(s3) == sorted([*OBJECTS, "data2/index.jsonl.gz", "data-self.index.gz"])
