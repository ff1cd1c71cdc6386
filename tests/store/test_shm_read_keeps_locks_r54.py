"""Reading the shared-memory file's header (``Index.frames_elsewhere``, asked when the write-ahead
log changed under a connection) leaves the process's locks on it: a plain ``open()``/``close()``
dropped every POSIX lock the process held on ``index.sqlite-shm``, SQLite's mark that this process
still uses the shared memory among them (the kernel's lock table, /proc/locks, says which)."""

from __future__ import annotations

import os
from pathlib import Path

from fuse_helpers import admit, make_objects, open_store

from epochfs.sidecar.store.index import SHM_SUFFIX


def _locks_on(path: Path) -> int:
    """This process's POSIX locks on ``path``, counted in /proc/locks."""
    st = os.stat(path)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    count = 0
    with open("/proc/locks") as f:
        for line in f:
            fields = line.split()
            if "POSIX" in fields and str(os.getpid()) in fields and dev in fields:
                count += 1
    return count


def test_reading_the_shared_memory_header_keeps_the_connections_locks(tmp_path: Path) -> None:
    with open_store(tmp_path / "cache") as store:
        admit(store, make_objects(3, 10))
        ix = store._ix  # the index connection whose locks are looked at
        shm = ix.path.with_name(ix.path.name + SHM_SUFFIX)
        held = _locks_on(shm)
        assert held > 0, "SQLite holds a lock on the shared memory while the connection is open"
        assert ix.frames_elsewhere() is False  # nothing was deleted: the log holds its frames
        assert _locks_on(shm) == held, "reading the header dropped the connection's locks"
        ix.frames_elsewhere()
        assert _locks_on(shm) == held
        assert store.stats().samples == 3
