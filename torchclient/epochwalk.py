"""Walking an epoch folder that has no manifest: every file under ``epoch-N/`` with its size.

The fallback of the torch client (:mod:`.dataset`, :mod:`.labels`) for a folder shaped like the
mount that carries no ``.epochfs/epoch-N.manifest`` (a plain folder a user built). Apart from
:mod:`.layout` because it is the client's reading of a folder, not the layout's contract: the FUSE
server reads the layout and never walks a folder, and a plain folder's symlinks (dangling ones,
links to themselves, links back to a folder above) are the walk's own concern. Standard library
only, as the layout is.
"""

from __future__ import annotations

import errno
import os
import stat
import warnings
from pathlib import Path

from .layout import epoch_dir


def _folders_above(folder: Path) -> frozenset[tuple[int, int]]:
    """(st_dev, st_ino) of ``folder`` and every folder above it, as written and as resolved: a link
    to one of them (``up -> ..``, ``/``) would walk other epochs or the whole disk, a loop."""
    seen: set[tuple[int, int]] = set()
    for start in (Path(os.path.abspath(folder)), Path(os.path.realpath(folder))):
        for each in (start, *start.parents):
            try:
                st = os.stat(each)
            except OSError:
                continue
            seen.add((st.st_dev, st.st_ino))
    return frozenset(seen)


def walk_epoch(root: str | os.PathLike[str], epoch: int) -> list[tuple[str, int]]:
    """(relative path, size) of every file under ``epoch-N/``, sorted by path: the fallback without manifest.

    Entries are usually symlinks to the object files, so sizes come from ``stat`` (which follows them).
    A plain folder may link whole folders in (``epoch-0/b -> /data/b``): they are followed, as any
    reader of the folder would, except one that leads back to a folder above it (a loop): the
    epoch folder or any of its ancestors (``up -> ..`` would add the other epochs). A symlink
    whose target is missing (or that leads to itself, ELOOP) is no file of the epoch: it is skipped
    with a warning, not taken for a mount being replaced (whose ENOENT the caller retries for
    ``retry_seconds``): the entry itself is there (``lstat``), only its target is not. So is a fifo,
    socket or device (a read of a fifo waits for a writer for ever). One warning a walk names the
    entries skipped.
    """
    base = epoch_dir(root, epoch)
    try:
        os.stat(base)
    except FileNotFoundError:
        return []  # as os.walk: the caller looks the epoch up again (the dataset retries an ENOENT)
    found: list[tuple[str, int]] = []
    dangling: list[str] = []
    cycles: list[str] = []
    loops: list[str] = []
    others: list[str] = []
    stack = [(str(base), "", _folders_above(base))]
    while stack:
        folder, prefix, above = stack.pop()
        with os.scandir(folder) as listing:
            entries = list(listing)
        for entry in entries:
            rel = prefix + entry.name
            try:
                is_dir = entry.is_dir()  # follows a symlink, as os.walk(followlinks=True) does
            except OSError as e:
                if e.errno != errno.ELOOP:
                    raise
                cycles.append(rel)  # a link that leads to itself (a -> a): no file, no folder
                continue
            if is_dir:
                st = entry.stat()
                if (st.st_dev, st.st_ino) in above:
                    loops.append(rel)
                else:
                    stack.append((entry.path, rel + "/", above | {(st.st_dev, st.st_ino)}))
                continue
            try:
                st = os.stat(entry.path)
                if not stat.S_ISREG(st.st_mode):
                    others.append(rel)  # a fifo, socket or device: a read of it would block or never end
                    continue
                found.append((rel, st.st_size))
            except FileNotFoundError:
                if not stat.S_ISLNK(os.lstat(entry.path).st_mode):  # the entry itself gone: raise
                    raise
                dangling.append(rel)
            except OSError as e:
                if e.errno != errno.ELOOP:
                    raise
                cycles.append(rel)
    said = [f"{len(names)} {what}: {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}"
            for names, what in ((dangling, "dangling symlink(s) (target missing)"),
                                (cycles, "symlink(s) that lead to themselves"),
                                (loops, "symlinked folder(s) leading to a folder above them"),
                                (others, "entries that are no regular file (a fifo, socket or device)"))
          if names]
    if said:
        warnings.warn(f"epochfs: walking {base} (no manifest) skipped {'; '.join(said)}", stacklevel=2)
    found.sort()
    return found
