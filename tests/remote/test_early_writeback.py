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
from pathlib import Path

import pytest
from traced_download import traced_download

from epochfs.sidecar import tempwrite

SIZE = 4 << 20
BLOCK = 1 << 20

def test_every_block_is_sent_to_writeback_before_the_fsync(tmp_path: Path) -> None:
    body = bytes(range(256)) * (SIZE // 256)
    traced = traced_download(tmp_path, body, "sync_file_range,fsync", direct=False)
    assert traced.temp.read_bytes() == body
    fd, lines = traced.fd, traced.lines
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
