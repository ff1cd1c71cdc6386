"""Whether a folder's entries may have changed since it was last scanned, from one stat of it.

Why: the served counter marks each of ``objects/``'s fan-out folders for fanotify and looks for new
or remade ones at every supervisor tick (4 a second); a full scan (256 stats and the group's
fdinfo parsed) cost ~6 ms each, 2-3% of a core for an idle sidecar. Adding, removing or renaming
an entry updates its folder's mtime, and a folder made again is another inode, so a folder whose
(device, inode, mtime) is the one last scanned has the same entries; a mark the kernel dropped
went with its inode, which only a removal (an mtime change) frees.

The kernel stamps times from a coarse clock (a few ms), so two changes inside one tick, the
second after a scan, leave the same mtime: a stamp younger than :data:`RACY_NS` is never taken
as unchanged (git's "racily clean" index entries are handled the same way).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

RACY_NS = 2_000_000_000
"""A folder changed this recently is scanned at every look, whatever its stamp."""

Stamp = tuple[int, int, int]


class FolderStamp:
    """The (device, inode, mtime) of ``path`` at its last complete scan."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._scanned: Stamp | None = None

    def look(self) -> Stamp | None:
        """The folder's stamp now when it may have changed since :meth:`scanned` was told of a
        scan (or cannot be read: a scan finds out why); None when it certainly has not."""
        try:
            st = os.stat(self.path)
        except OSError:
            return (-1, -1, -1)
        stamp = (st.st_dev, st.st_ino, st.st_mtime_ns)
        if stamp == self._scanned and time.time_ns() - st.st_mtime_ns > RACY_NS:
            return None
        return stamp

    def scanned(self, stamp: Stamp | None) -> None:
        """A scan that began after :meth:`look` answered ``stamp`` completed: until the folder
        changes again, it need not be scanned (None: scan again at the next look)."""
        self._scanned = stamp
