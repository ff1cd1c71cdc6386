"""Which ``epoch-N/`` folders of the published folder the publisher wrote, and the live epochs a
user's folder of the same name keeps from being shown.

Why apart from the publisher: a ``--mount`` may hold a user's own ``epoch-3/`` (a checkpoint
folder), which recovery once deleted as a stale epoch. The publisher must never remove it, never
publish over it and never point ``latest`` at it; a live epoch whose name it holds is an error
the operator sees (the log, at most once a minute, and the publisher's pause reason) until the
folder is moved away. This module keeps that record; :mod:`.folderview_publisher` asks it.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from epochfs.sidecar.volumes import published_epoch
from epochfs.torchclient.layout import CONTROL_DIR, epoch_name

log = logging.getLogger("epochfs.folderview")

BLOCKED_REPEAT = 60.0
"""Seconds between the errors about a live epoch a user's ``epoch-N/`` hides."""


class Owned:
    """The publisher's record of the ``epoch-N/`` folders it wrote in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._own: dict[int, tuple[int, int]] = {}  # epoch-N/ it wrote: (st_dev, st_ino) seen then
        self._foreign: set[int] = set()  # epoch-N/ folders it did not write, warned about once
        self._blocked_said: dict[int, float] = {}  # live epochs a foreign folder hides: last error
        self.blocked: str | None = None
        """Why a live epoch is not shown (a folder epochfs did not write holds its name), or None:
        recorded as the publisher's pause reason by :func:`.folderview.run_publish`."""

    def ours(self, visible: set[int]) -> set[int]:
        """Of the ``visible`` epochs, those the publisher wrote: one it showed (same folder since),
        or one that passes :func:`.volumes.published_epoch` (written before a restart). A user's
        ``epoch-N/`` is never taken for the epoch (neither shown over nor pointed at)."""
        own: dict[int, tuple[int, int]] = {}
        for n in visible:
            try:
                st = os.lstat(self.folder / epoch_name(n))
            except OSError:
                continue
            if self._own.get(n) == (st.st_dev, st.st_ino) or published_epoch(self.folder, n):
                own[n] = (st.st_dev, st.st_ino)
        self._own = own
        return set(own)

    def shown(self, n: int) -> None:
        """Record ``epoch-N/`` as written by this publisher (just shown)."""
        st = os.lstat(self.folder / epoch_name(n))
        self._own[n] = (st.st_dev, st.st_ino)

    def holds(self, n: int) -> bool:
        """Whether ``epoch-N/`` is one the publisher wrote (as of the last :meth:`ours`)."""
        return n in self._own

    def newest(self) -> list[int]:
        """The epochs it wrote, ascending (as of the last :meth:`ours`)."""
        return sorted(self._own)

    def moved(self) -> bool:
        """Whether a folder that hid a live epoch is gone (the epoch can be shown now)."""
        return any(not os.path.lexists(self.folder / epoch_name(n)) for n in self._blocked_said)

    def report_blocked(self, blocked: list[int]) -> None:
        """A live epoch a foreign ``epoch-N/`` hides: an error when it becomes live, then at most
        once a minute, and :attr:`blocked` (the pause reason) until the folder is moved away."""
        now = time.monotonic()
        for n in blocked:
            if now - self._blocked_said.get(n, -1e18) >= BLOCKED_REPEAT:
                self._blocked_said[n] = now
                log.error("%s: epoch %d is live but cannot be published: %s holds its name and was not "
                          "published by epochfs; move it out of the folder view (epoch %d is shown "
                          "once it is gone)", self.folder, n, epoch_name(n), n)
        for n in set(self._blocked_said) - set(blocked):
            del self._blocked_said[n]
        self.blocked = None if not blocked else (
            f"epochs {blocked} cannot be published: {', '.join(epoch_name(n) for n in blocked)} in "
            f"{self.folder} not published by epochfs; move them out of the folder view")

    def foreign(self, n: int) -> bool:
        """Whether ``epoch-N/`` is there and the publisher did not write it (a user's folder in
        ``--mount``), with a warning the first time: what epochfs did not publish it never removes."""
        if not os.path.lexists(self.folder / epoch_name(n)) or published_epoch(self.folder, n):
            return False
        if n not in self._foreign:
            self._foreign.add(n)
            log.warning("%s: %s was not published by epochfs (no manifest in %s/, or files "
                        "rather than links): left as it is; move it out of the folder view",
                        self.folder, epoch_name(n), CONTROL_DIR)
        return True


__all__ = ["BLOCKED_REPEAT", "Owned"]
