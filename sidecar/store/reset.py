"""Replacing a damaged index: rebuild it from what is on disk, move it aside, say so in one line.

A corrupt ``index.sqlite`` (a garbage page, a file that is not a database) cannot be repaired in
place, and failing on it at every start is a crash loop that takes the sidecar with it. So a fresh
index is built beside it (``index.rebuild.sqlite``) from the members files of the live epochs
(:mod:`.memberrestore`: the epochs, their samples, the running totals; :mod:`.countercarry`: the
counters, from the damaged index where they can still be read), and only then takes the damaged
one's place: the old index is linked to ``index.sqlite.corrupt-<UTC time>`` (kept for a
post-mortem; nothing reads it again), its ``-wal``/``-shm`` files renamed beside it, and the
rebuilt file renamed over ``index.sqlite``, so the path always holds an index and no process ever
opens the fresh one without its epochs. What the members files do not hold is gone: the object
files of samples in no live epoch become orphans that the sampler's recovery removes, the catalog
is listed again (a key whose sample was restored is not fetched again), and epoch numbers
continue above the high-water mark kept outside the index (:mod:`.hwm`), so no number is ever
published twice. When the rebuild itself fails (a full disk), the fresh index is an empty one,
which the sampler fills again: a start that failed on it would be the crash loop above.

A deleted index beside the epochs' members files is replaced the same way (an opener's fresh
empty index would lose them all, :mod:`.handle`); its line says it was missing, with nothing to
move aside but the ``-wal``/``-shm`` files it may have left (a new index never opens those).

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

from epochfs.sidecar.store import countercarry, hwm, memberrestore
from epochfs.sidecar.store.index import INDEX_NAME, SHM_SUFFIX, WAL_SUFFIX, Index
from epochfs.sidecar.store.objects import fsync_dir

log = logging.getLogger("epochfs.store")

LOCK_NAME = "index.lock"
CORRUPT_INFIX = ".corrupt-"
REBUILD_NAME = "index.rebuild.sqlite"
"""Where the fresh index is built before it takes the damaged one's place."""
REBUILD_CACHE_KIB = 128 << 10
"""SQLite's page cache for the rebuild's connection (the default is 2 MiB)."""


@contextlib.contextmanager
def reset_lock(root: Path) -> Iterator[None]:
    """Hold ``<cache>/index.lock`` (exclusive, across processes) for the duration of a reset."""
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove_index_files(path: Path) -> None:
    for suffix in ("", WAL_SUFFIX, SHM_SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def build(root: Path, *, migrate: bool) -> tuple[Path, memberrestore.Rebuilt] | None:
    """A fresh index at :data:`REBUILD_NAME` holding the epochs of the members files, closed and
    checkpointed (no log beside it); None when it could not be built (then nothing is left)."""
    temp = root / REBUILD_NAME
    _remove_index_files(temp)  # a rebuild interrupted by a crash
    try:
        fresh = Index(temp, migrate=migrate)
        try:
            # Room for the b-trees of a million samples' unique keys, filled in random order:
            # 12 s instead of 23 s for the samples of a 1M-member epoch (allocated as used).
            fresh.db.execute(f"PRAGMA cache_size=-{REBUILD_CACHE_KIB}")
            rebuilt = memberrestore.rebuild(fresh, root)
            try:  # the counters never go backwards where the damaged index still holds them
                countercarry.carry(fresh, root / INDEX_NAME)
            except Exception as e:  # the restored epochs matter more than the counters
                log.warning("the damaged index's counters were not carried over (%s: %s): they "
                            "restart at 0", type(e).__name__, e)
            fresh.checkpoint()
        finally:
            fresh.close()
        for suffix in (WAL_SUFFIX, SHM_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{temp}{suffix}")
    except Exception as e:  # a full disk, or a bug: never a start that fails on the reset itself
        log.error("the cache index could not be rebuilt from the epochs' members files (%s: %s): "
                  "an empty index replaces it", type(e).__name__, e)
        _remove_index_files(temp)
        return None
    return temp, rebuilt


def replace(root: Path, problem: str, *, migrate: bool) -> Path:
    """Replace the damaged index of ``root`` by one rebuilt from the members files (or an empty
    one), in one log line; returns where the old index went. Call under :func:`reset_lock`, with
    this process's connection closed."""
    started = time.monotonic()
    index = root / INDEX_NAME
    # A deleted index (its -wal and -shm may be left: never to be opened with the new one).
    missing = [suffix for suffix in (WAL_SUFFIX, SHM_SUFFIX) if os.path.lexists(f"{index}{suffix}")] \
        if not os.path.lexists(index) else None
    built = build(root, migrate=migrate)
    aside = move_aside(root, replacement=None if built is None else built[0])
    report(root, problem, aside, None if built is None else built[1], time.monotonic() - started,
           missing=missing)
    return aside


def move_aside(root: Path, *, replacement: Path | None = None) -> Path:
    """Rename the index and its -wal/-shm files to ``index.sqlite.corrupt-<time>``, and put
    ``replacement`` (an index file with no log) in its place; returns the new name of the old
    index. With a replacement the old index is linked to its new name first and replaced by one
    rename, so ``index.sqlite`` is never missing (an opener meanwhile would make an empty one).
    Call under :func:`reset_lock`, with this process's connection closed."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = root / f"{INDEX_NAME}{CORRUPT_INFIX}{stamp}"
    n = 1
    while base.exists():
        n += 1
        base = root / f"{INDEX_NAME}{CORRUPT_INFIX}{stamp}-{n}"
    index = root / INDEX_NAME
    linked = False
    if replacement is not None:
        try:
            os.link(index, base)
            linked = True
        except FileNotFoundError:
            linked = True  # nothing to keep
        except OSError:  # a volume without hard links: renamed, as without a replacement
            pass
    for suffix in (WAL_SUFFIX, SHM_SUFFIX) if linked else ("", WAL_SUFFIX, SHM_SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            os.replace(root / f"{INDEX_NAME}{suffix}", Path(f"{base}{suffix}"))
    if replacement is not None:
        os.replace(replacement, index)
    fsync_dir(root)
    return base


def report(root: Path, problem: str, aside: Path, rebuilt: memberrestore.Rebuilt | None = None,
           seconds: float = 0.0, *, missing: list[str] | None = None) -> None:
    """The one log line of a reset: what was wrong, where the old index went, what follows.
    ``missing``: there was no index file (deleted), only these of its ``-wal``/``-shm`` files,
    moved aside under ``aside``'s name (a log of the deleted index, kept for a post-mortem)."""
    top = hwm.floor(hwm.read(root), None)
    numbers = "from 0" if top is None else f"above the high-water mark {top}"
    if rebuilt is None or not rebuilt.epochs:
        kept = "no epoch restored"
    else:
        kept = (f"epochs {', '.join(map(str, rebuilt.epochs))} restored from their members files in "
                f"{seconds:.2f}s ({rebuilt.samples} samples: {rebuilt.kept} object files kept, "
                f"{rebuilt.repairs} missing or short to fetch again in place)")
    if rebuilt is not None and rebuilt.refused:
        kept += f"; epoch(s) {', '.join(map(str, sorted(rebuilt.refused)))} lost (members file damaged)"
    if missing is None:
        went = f"moved aside to {aside.name} and replaced by a fresh one"
    else:
        left = f" (its {' and '.join(missing)} file(s) moved aside to {aside.name}{'/'.join(missing)})" \
            if missing else ""
        went = f"the index file is missing, so nothing to move aside{left}; replaced by a fresh one"
    log.error("the cache index %s is damaged (%s): %s; %s; other object files are removed as orphans "
              "and fetched again, epochs continue %s", root / INDEX_NAME, problem, went, kept, numbers)
