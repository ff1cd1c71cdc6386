"""Replacing a damaged index: move it aside, start a fresh one, say so in one line.

A corrupt ``index.sqlite`` (a garbage page, a file that is not a database) cannot be repaired in
place, and failing on it at every start is a crash loop that takes the sidecar with it. So the
index and its ``-wal``/``-shm`` files are renamed to ``index.sqlite.corrupt-<UTC time>[-wal|-shm]``
(kept for a post-mortem; nothing reads them again) and a fresh index is made. What the old index
knew is gone: the object files become orphans that the sampler's recovery removes, the catalog is
listed again, and epoch numbers continue above the high-water mark kept outside the index
(:mod:`.hwm`), so no number is ever published twice.

Several processes may find the damage at once (the sampler, the FUSE server, the supervisor each
open the index): the reset holds ``<cache>/index.lock`` and looks again under it, so one of them
moves the index aside and the others open the fresh one.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

from epochfs.sidecar.store import hwm
from epochfs.sidecar.store.index import INDEX_NAME, SHM_SUFFIX, WAL_SUFFIX
from epochfs.sidecar.store.objects import fsync_dir

log = logging.getLogger("epochfs.store")

LOCK_NAME = "index.lock"
CORRUPT_INFIX = ".corrupt-"


@contextlib.contextmanager
def reset_lock(root: Path) -> Iterator[None]:
    """Hold ``<cache>/index.lock`` (exclusive, across processes) for the duration of a reset."""
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def move_aside(root: Path) -> Path:
    """Rename the index and its -wal/-shm files to ``index.sqlite.corrupt-<time>``; returns the
    new name of the index. Call under :func:`reset_lock`, with this process's connection closed."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = root / f"{INDEX_NAME}{CORRUPT_INFIX}{stamp}"
    n = 1
    while base.exists():
        n += 1
        base = root / f"{INDEX_NAME}{CORRUPT_INFIX}{stamp}-{n}"
    for suffix in ("", WAL_SUFFIX, SHM_SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            os.replace(root / f"{INDEX_NAME}{suffix}", Path(f"{base}{suffix}"))
    fsync_dir(root)
    return base


def report(root: Path, problem: str, aside: Path) -> None:
    """The one log line of a reset: what was wrong, where the old index went, what follows."""
    top = hwm.floor(hwm.read(root), None)
    numbers = "from 0" if top is None else f"above the high-water mark {top}"
    log.error("the cache index %s is damaged (%s): moved aside to %s and replaced by a fresh one; "
              "its object files are removed as orphans and fetched again, epochs continue %s",
              root / INDEX_NAME, problem, aside.name, numbers)
