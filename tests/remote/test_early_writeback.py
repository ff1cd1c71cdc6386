"""Each block a download writes buffered goes to the kernel's writeback at once
(sidecar/tempwrite.py; where it writes buffered: a volume without ``O_DIRECT``, or
``Downloader(direct=False)``).

The fsync before admission is the one wait a download slot makes on the disk; without the hint
the kernel starts writing a body's pages only when that fsync asks, so the slot waited for the
whole body to reach the disk. The real :class:`Downloader` fetches a real 4 MiB file through the
``file://`` remote in a child process run under the real ``strace``: the kernel must be asked
``sync_file_range(..., SYNC_FILE_RANGE_WRITE)`` for every 1 MiB block, in order, before the
temp file's fsync, and must accept each ask (the test's folder is on the node's own disk).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from epochfs.sidecar import tempwrite

SIZE = 4 << 20
BLOCK = 1 << 20

CHILD = textwrap.dedent("""
    import hashlib, sys, threading
    from pathlib import Path
    from epochfs.sidecar.download import Downloader, RetryPolicy
    from epochfs.sidecar.remote import open_remote
    from epochfs.sidecar.store import Candidate, Store

    data, cache = Path(sys.argv[1]), Path(sys.argv[2])
    store = Store(cache, create=True)
    remote = open_remote(f"file://{data}")
    listed = {str(o.key): o for o in remote.list()}["big.bin"]
    dl = Downloader(store=store, remote=remote, stop=threading.Event(),
                    retry=RetryPolicy(attempts=1, base=0.0, cap=0.0), direct=False)
    sid = hashlib.blake2b(b"big.bin", digest_size=16).hexdigest()
    result = dl.fetch(Candidate("big.bin", sid, listed.size, listed.version))
    assert result.error is None and result.admission is not None, result.error
    print(result.admission.temp)
""")


def test_every_block_is_sent_to_writeback_before_the_fsync(tmp_path: Path) -> None:
    strace = shutil.which("strace")
    assert strace is not None, "strace is a test dependency (Makefile APT_PACKAGES)"
    data = tmp_path / "data"
    data.mkdir()
    body = bytes(range(256)) * (SIZE // 256)
    (data / "big.bin").write_bytes(body)
    log = tmp_path / "strace"  # one file per thread (-ff): a call is never split across lines
    out = subprocess.run(
        [strace, "-ff", "-qq", "-e", "trace=openat,sync_file_range,fsync", "-o", str(log),
         sys.executable, "-c", CHILD, str(data), str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    temp = Path(out.stdout.strip())
    assert temp.read_bytes() == body
    opening = r'openat\(.*"' + re.escape(str(temp)) + r'".*\) = (\d+)$'
    threads = [f.read_text().splitlines() for f in tmp_path.glob("strace.*")]
    lines = next((t for t in threads if any(re.search(opening, line) for line in t)), [])
    opened = [m.group(1) for line in lines if (m := re.search(opening, line))]
    assert len(opened) == 1, f"the temp file opened once for writing: {opened}"
    fd = opened[0]
    asked = [(int(m.group(1)), int(m.group(2)), m.group(3)) for line in lines
             if (m := re.search(rf"sync_file_range\({fd}, (\d+), (\d+), (\w+)\) = 0$", line))]
    assert asked == [(i * BLOCK, BLOCK, "SYNC_FILE_RANGE_WRITE") for i in range(SIZE // BLOCK)], asked
    kinds = [m.group(1) for line in lines if (m := re.match(rf"(sync_file_range|fsync)\({fd}\b", line))]
    assert kinds == ["sync_file_range"] * (SIZE // BLOCK) + ["fsync"], kinds


def test_a_file_that_cannot_be_written_back_is_answered_false_not_raised(tmp_path: Path) -> None:
    """A pipe has no pages to write back (ESPIPE): the hint says False and the write goes on."""
    if tempwrite._sync_file_range() is None:
        pytest.fail("libc without sync_file_range on this Linux machine")
    r, w = os.pipe()
    try:
        assert tempwrite.start_writeback(w, 0, 4096) is False
    finally:
        os.close(r)
        os.close(w)
