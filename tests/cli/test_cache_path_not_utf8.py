"""A ``--cache`` whose path is not UTF-8 is taken like any other.

Why: Linux paths are bytes; a cache folder named with a Latin-1 byte (``c\\xff``) made ``epochfs
sample`` crash at its second start (the check that an existing index is epochfs's built an SQLite
URI from the path's text: ``UnicodeEncodeError``), so a sidecar restarted its sampler and its
publisher for ever. The real command, started twice on such a cache.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from common import wait_until
from sampler_helpers import EPOCHFS


def _status(cache: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([EPOCHFS, "status", "--cache", cache], capture_output=True, timeout=60)


def test_a_cache_path_with_a_byte_that_is_not_utf8_is_opened_again(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"x" * 10)
    cache = os.fsdecode(os.fsencode(tmp_path) + b"/c\xff d")
    for _ in range(2):  # the first start makes the index, the second checks it is epochfs's
        proc = subprocess.Popen([EPOCHFS, "sample", "--cache", cache, "--remote", data.as_uri(),
                                 "--capacity", "1Mi"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_until(lambda p=proc: p.poll() is not None or b"samples 1 " in _status(cache).stdout,
                       timeout=60, what="the sample cached")
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        # Stopped by the SIGTERM (cleanly, or before its handler was set): never a crash.
        assert proc.returncode in (0, -signal.SIGTERM) and b"Traceback" not in err, err[-2000:]
