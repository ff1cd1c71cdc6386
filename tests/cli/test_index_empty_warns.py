"""``epochfs index`` of a remote that holds no key says so where the index is made.

Why: the index is written once for a fleet; an empty one makes every node's sidecar sample nothing,
yet the command logged only INFO lines (``indexed 0 key(s)``) and exited 0. It now warns, with
the fix the sidecar's own empty listing names (a pattern written as the prefix is told the prefix,
and the sidecars' ``--include``). Real ``epochfs index`` runs over a ``file://`` dataset and moto.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from common import S3Server, put_objects
from sampler_helpers import EPOCHFS


def test_an_empty_index_is_warned_of_with_the_fix(tmp_path: Path) -> None:
    remote = tmp_path / "data" / "trian"  # a typo of train/: an empty folder
    remote.mkdir(parents=True)
    out = tmp_path / "index.jsonl"
    r = subprocess.run([EPOCHFS, "index", remote.as_uri(), "--out", str(out)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    [line] = [x for x in r.stderr.splitlines() if "WARNING" in x]
    assert f"0 keys under {remote.as_uri()}: the index is empty; check the remote's prefix" in line, line


def test_an_index_with_keys_warns_of_nothing(tmp_path: Path) -> None:
    remote = tmp_path / "data"
    remote.mkdir()
    (remote / "a.bin").write_bytes(b"x")
    r = subprocess.run([EPOCHFS, "index", remote.as_uri(), "--out", str(tmp_path / "i.jsonl")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "WARNING" not in r.stderr, r.stderr


def test_an_index_of_a_pattern_is_told_the_prefix_and_the_sidecars_include(s3: S3Server,
                                                                           tmp_path: Path) -> None:
    put_objects(s3, "pat", {"train/a.npy": b"x"})
    r = subprocess.run([EPOCHFS, "index", "s3://pat/train/*.npy", "--endpoint-url", s3.endpoint,
                        "--out", str(tmp_path / "i.jsonl")], capture_output=True, text=True, timeout=60)
    [line] = [x for x in r.stderr.splitlines() if "WARNING" in x] or [r.stderr]
    assert ("the remote is a prefix, not a pattern: epochfs index s3://pat/train, and give the "
            "sidecars --include '*.npy'") in line, line
