"""Wake the folder view's publisher when an epoch is cut, instead of at its next 0.1 s poll.

Why: the trainer's wait at an epoch boundary (ask -> ``epoch-N/`` visible) included up to one poll
interval of the publisher (0.05 s on average) before it even looked. A cut is made by another
process (the sidecar's ``/v1/cut``, the sampler's timer, ``epochfs cut``), so nothing in the
publisher sees it happen; but every cut replaces the cache's ``epochs.hwm`` (the epoch high-water
mark, temp + rename, right after the cut's commit: :mod:`epochfs.sidecar.store.hwm`), and Linux's
inotify reports that rename. :class:`CutWatch` waits for it or for the poll interval, whichever
comes first; the publisher then looks at the store as at each poll (a rename that is not a cut
costs one small query). Where inotify is missing (another OS, no ``libc``, a full watch table) it
waits the interval: the poll alone still publishes every cut.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import select
from pathlib import Path

from epochfs.sidecar.store import HWM_NAME

log = logging.getLogger("epochfs.folderview")

IN_MOVED_TO = 0x00000080
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000


class CutWatch:
    """inotify on the cache folder for ``epochs.hwm`` being replaced; :meth:`wait` blocks until
    it was (True) or ``timeout`` passed (False)."""

    def __init__(self, cache: Path) -> None:
        self.fd = -1
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if fd < 0:
                raise OSError(ctypes.get_errno(), "inotify_init1")
            if libc.inotify_add_watch(fd, os.fsencode(cache), IN_MOVED_TO) < 0:
                err = ctypes.get_errno()
                os.close(fd)
                raise OSError(err, f"inotify_add_watch {cache}")
            self.fd = fd
        except (OSError, AttributeError) as e:  # no inotify: the publisher polls
            log.info("no inotify on %s (%s): cuts are seen at the next poll", cache, e)

    def wait(self, timeout: float) -> bool:
        """Block until a cut was seen (True) or ``timeout`` seconds passed (False)."""
        if self.fd < 0:
            return False
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        seen = False
        while True:  # drain: one wake for any number of renames
            try:
                data = os.read(self.fd, 65536)
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    return seen
                raise
            if not data:
                return seen
            seen = seen or os.fsencode(HWM_NAME) in data

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
