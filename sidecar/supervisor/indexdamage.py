"""The sampler's index-damage exits in a row, and the good run that ends them.

An exit :data:`~epochfs.sidecar.config.EXIT_INDEX` (74) is no crash: the next start of the sampler
replaces the damaged index within seconds, so it restarts at once and ``/healthz`` stays 200. An
index damaged again on *every* run (a failing disk, a volume that corrupts writes) would so restart
the sampler for ever while the pod looked healthy; hence the count of such exits in a row, which
``/healthz`` fails on at :data:`~epochfs.sidecar.config.INDEX_DAMAGES_UNHEALTHY`.

A *good run* ends the count: one that ran
:attr:`~epochfs.sidecar.supervisor.ChildProcesses.STABLE_AFTER` seconds, or one during which an
epoch was cut (the replaced index served a cut: it works). The cut is read from the published mark
of ``epochs.hwm`` (:mod:`epochfs.sidecar.store.hwm`), not from the index: a small file outside it,
raised after every cut commits and never lowered (a reset keeps it), so a mark above the one read
at the last damage exit means a cut committed since, whatever state the index is in now. It is
read only while a count is running, and only when the file changed (a stat otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from epochfs.sidecar.store import hwm


@dataclass
class IndexDamages:
    """One child's index-damage exits (only the sampler exits :data:`EXIT_INDEX`)."""

    in_row: int = 0
    """Index-damage exits with no good run between: what ``/healthz`` reads."""
    total: int = 0
    """Index-damage exits since the supervisor started."""
    mark: int = -1
    """The published mark of ``epochs.hwm`` read at the last index-damage exit (-1: none)."""
    _file_key: tuple[int, int, int] | None = field(default=None, repr=False)
    _published: int = field(default=-1, repr=False)

    def published(self, cache: Path) -> int:
        """The published mark of ``cache``'s ``epochs.hwm`` (-1: no cut yet, or unreadable: the
        store logs that once per change of the file). Read again only when the file changed
        (every write replaces it: a new inode)."""
        try:
            st = (cache / hwm.HWM_NAME).stat()
        except FileNotFoundError:
            self._file_key, self._published = None, -1
            return -1
        except OSError:
            return self._published  # the volume failing now: the last mark read
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._file_key:
            mark = hwm.read(cache)
            self._file_key, self._published = key, -1 if mark is None else mark.published
        return self._published

    def proved(self, cache: Path, *, ran: float, stable_after: float) -> bool:
        """A run that lasted ``ran`` seconds is a good one: it ran ``stable_after`` seconds, or an
        epoch was cut since the last index-damage exit. Reads nothing while no count runs."""
        return self.in_row > 0 and (ran >= stable_after or self.published(cache) > self.mark)

    def exited(self, cache: Path, *, damaged: bool, ran: float, stable_after: float) -> None:
        """Record an exit after ``ran`` seconds: a good run ends the count (however it ended), an
        index-damage exit (``damaged``) adds one and remembers the mark it saw."""
        if self.proved(cache, ran=ran, stable_after=stable_after):
            self.in_row = 0
        if damaged:
            self.in_row += 1
            self.total += 1
            self.mark = self.published(cache)

    def clear(self) -> None:
        """A good run is going on: the count ends (the mark stays, for the next damage)."""
        self.in_row = 0
