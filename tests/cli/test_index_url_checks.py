"""``epochfs index REMOTE --out URL``: the remote checked as the sampler's ``--remote`` is (one
line, exit 2, nothing listed), and ``--out``'s name read as the object store reads it (a key's
'#' and '?' are part of it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from sampler_helpers import EPOCHFS

from epochfs.sidecar.cli_index import _gzipped_name


@pytest.mark.parametrize(("remote", "says"), [("s3:///x", "no bucket"), ("s3://", "no bucket"),
                                              ("ftp://h/x", "unknown URL scheme")])
def test_a_remote_that_cannot_be_one_exits_2_with_the_reason(tmp_path: Path, remote: str, says: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    r = subprocess.run([EPOCHFS, "index", remote, "--out", str(tmp_path / "index.txt")],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2, r.stderr[-2000:]
    assert says in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "index.txt").exists()


def test_the_out_name_keeps_an_object_keys_hash_and_question_mark() -> None:
    assert _gzipped_name("s3://bkt/run#1.gz")
    assert _gzipped_name("az://c/idx?v2.gz")
    assert not _gzipped_name("s3://bkt/index.gz#1")
    assert _gzipped_name("https://host/index.gz?X-Amz-Signature=abc")  # a query is not the name
    assert _gzipped_name("/data/index.txt.gz")
