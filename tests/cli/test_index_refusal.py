"""An ``--index`` that is not an epochfs index ends the sampler with exit 2 and one line (issue 21).

The first hour's promise: a permanent error names its cause and the fix in one line, no traceback,
and is not retried (exit 2, which the sidecar does not restart). A file that is something else (a
listing saved by hand, a wrong URL's error page) is such an error.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from sampler_helpers import EPOCHFS


@pytest.mark.parametrize("body", [b"this is not an index\n\x00\x01garbage", b"", b"<html>404</html>\n"])
def test_an_index_that_is_not_one_exits_2_naming_the_flag(tmp_path: Path, body: bytes) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "a.bin").write_bytes(b"x" * 10)
    index = tmp_path / "not-an-index.txt"
    index.write_bytes(body)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    r = subprocess.run([EPOCHFS, "sample", "--remote", remote.as_uri(), "--index", str(index),
                        "--cache", str(tmp_path / "cache"), "--capacity", "1Mi"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("epochfs sample: --index: ") and str(index) in last, last
    assert "Traceback" not in r.stderr
