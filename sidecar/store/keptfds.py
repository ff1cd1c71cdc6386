"""The index's side files read through descriptors kept open for the process's life.

Closing any descriptor of a file drops every POSIX lock the process holds on it, those of SQLite's
connections too (POSIX record locks belong to the process and the file, not to the descriptor).
A read of ``index.sqlite-shm`` through ``open()``/``close()`` dropped the connections' lock on the
shared memory that tells other processes this one still uses it: the next process to open the
index could then take itself for the only user and reset the shared memory under our connections.
So the descriptor of each such file read here is never closed: one per file, reused.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

_lock = threading.Lock()
_kept: dict[tuple[int, int], int] = {}


def read_head(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of the file now at ``path`` (``OSError`` as ``os.stat`` raises it),
    read through a descriptor this process keeps open (:mod:`this module <.keptfds>`)."""
    st = os.stat(path)
    with _lock:
        fd = _kept.get((st.st_dev, st.st_ino))
        if fd is None:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            opened = os.fstat(fd)  # replaced since the stat: kept under the file it is
            _kept[(opened.st_dev, opened.st_ino)] = fd
    return os.pread(fd, size, 0)


__all__ = ["read_head"]
