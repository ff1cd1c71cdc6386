"""The lines of an index file as it streams in: bounded, whatever the file holds.

An index is read BLOCK bytes at a time (it may be larger than memory allows to hold at once), and
a line is held until its newline comes. A file without newlines (a gzip bomb of one byte repeated,
a server streaming one endless line) would be held whole, and a buffer searched whole at every
block costs time quadratic in its length (the listing process at 97% of a core and 1.7 GB). So a
line is at most :data:`MAX_LINE_BYTES`: past that, its bytes are dropped up to the next newline and
the line is answered as None, which the index passes over and counts; only each new block is
searched for newlines.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from epochfs.sidecar.store.digests import BLOCK

MAX_LINE_BYTES = 64 << 10
"""The longest index line kept. A line holds a key (at most 1,024 bytes on S3, 4,096 as a path)
and a few fields: sixteen times the longest key with room to spare."""


def index_lines(f: Any) -> Iterator[bytes | None]:
    """The lines of an open file ``f`` (its ``read``), without their newlines; the last one whether
    or not it ends with one; None for a line over :data:`MAX_LINE_BYTES` (dropped)."""
    pending: list[bytes] = []
    held = 0
    dropping = False
    while block := f.read(BLOCK):
        start = 0
        while (end := block.find(b"\n", start)) >= 0:
            if dropping or held + end - start > MAX_LINE_BYTES:
                yield None
            else:
                pending.append(block[start:end])
                yield b"".join(pending)
            pending, held, dropping = [], 0, False
            start = end + 1
        rest = len(block) - start
        if dropping or held + rest > MAX_LINE_BYTES:
            pending, held, dropping = [], 0, True
        elif rest:
            pending.append(block[start:])
            held += rest
    if dropping:
        yield None
    elif pending:
        yield b"".join(pending)


__all__ = ["MAX_LINE_BYTES", "index_lines"]
